"""What the commands share: the embedded runtime's broker flag, secrets' file flags."""

from __future__ import annotations

import argparse

import pytest

from stream_rater.cli import build_parser
from stream_rater.cli.common import ladders_of, settings_of
from stream_rater.config.settings import env_name, secret_names

#: Each command that starts an embedded broker, and the attribute its choice lands in.
EMBEDDED = [
    (["dev"], "local_broker"),
    (["bench", "e2e"], "broker"),
    (["bench", "soak"], "broker"),
    (["bench", "chaos"], "broker"),
]


@pytest.mark.parametrize(("command", "dest"), EMBEDDED)
def test_the_embedded_broker_is_chosen_with_embedded_broker(command: list[str], dest: str, capsys):
    """Not `--broker`, which is a Kafka URL in every other command."""
    args = build_parser().parse_args([*command, "--embedded-broker", "apache-kafka"])
    assert getattr(args, dest) == "apache-kafka" and capsys.readouterr().err == ""


@pytest.mark.parametrize(("command", "dest"), EMBEDDED)
def test_broker_still_works_there_with_one_deprecation_line(command: list[str], dest: str, capsys):
    args = build_parser().parse_args([*command, "--broker", "tansu"])
    assert getattr(args, dest) == "tansu"
    deprecated = (
        f"stream-rater {' '.join(command)}: --broker tansu is deprecated here (--broker is a Kafka URL "
        "elsewhere): use --embedded-broker tansu"
    )
    assert capsys.readouterr().err.splitlines() == [deprecated]


@pytest.mark.parametrize(("command", "dest"), EMBEDDED)
def test_the_help_offers_only_embedded_broker(command: list[str], dest: str, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    shown = capsys.readouterr().out
    assert "--embedded-broker" in shown and "--broker " not in shown and "--broker\n" not in shown


def test_a_secret_flag_has_a_file_form(tmp_path, monkeypatch):
    """``--redis-password-file`` reads the secret from a file, as ``…_FILE`` does."""
    for name in secret_names():
        monkeypatch.delenv(env_name(name), raising=False)
        monkeypatch.delenv(env_name(name) + "_FILE", raising=False)
    (tmp_path / "pw").write_text("from-a-file\n")
    args = build_parser().parse_args(
        ["ratings", "--store", "memory", "--redis-password-file", str(tmp_path / "pw")]
    )
    assert settings_of(args).redis_password == "from-a-file"


def test_param_overrides_keep_a_ladders_modes(tmp_path):
    """``--param`` on a ladder with modes (issue 48) keeps its modes, so its events still parse."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.arena]\nmodel = "trueskill"\n\n[ladders.arena.modes.duel]\n')
    args = argparse.Namespace(ladders_file=str(path), ladder="arena", model=None, param=["beta=5.0"])
    arena = ladders_of(args)["arena"]
    assert arena.params["beta"] == 5.0 and list(arena.modes) == ["duel"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["migrate", "--to", "4"], "stream-rater migrate: argument --to: invalid choice"),
        (["replay", "--bogus"], "stream-rater: unrecognized arguments: --bogus"),
        (
            ["bench", "e2e", "--rates", "x"],
            "stream-rater bench e2e: argument --rates: invalid comma-separated float",
        ),
        (["worker", "--batch-size"], "stream-rater worker: argument --batch-size: expected one argument"),
        ([], "stream-rater: the following arguments are required: command"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command_and_flag(argv: list[str], says: str, capsys):
    """argparse's own error prints the whole usage block before its line."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    lines = capsys.readouterr().err.splitlines()
    assert exit_.value.code == 2 and len(lines) == 1 and lines[0].startswith(says), lines
