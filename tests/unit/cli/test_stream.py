"""The stream commands' flags and hints, parsed in process."""

from __future__ import annotations

import pytest

from stream_rater.cli import build_parser
from stream_rater.cli.stream import publish_hint


def help_of(*command: str) -> str:
    parser = build_parser()
    for name in command:
        parser = next(a for a in parser._subparsers._group_actions if a.dest in ("command", "what")).choices[
            name
        ]
    return parser.format_help()


@pytest.mark.parametrize(
    "flag", ["--model", "--param", "--batch-size", "--topic-updates", "--topic-dlq", "--from-topic"]
)
def test_publish_offers_none_of_the_rating_commands_flags(flag: str):
    """`publish` rates nothing: no model, parameters or batch size, no output topics, no
    `--ladder … with --from-topic`."""
    assert flag not in help_of("publish")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["publish", flag, "x"])


def test_publish_says_it_checks_ladders_against_the_workers_ladders_file():
    text = " ".join(help_of("publish").split())
    assert "--ladders-file / STREAM_RATER_LADDERS_FILE" in text and "as the worker" in text


def test_devs_publish_hint_names_the_ladders_file_dev_was_given():
    """After `dev --ladders-file ladders.toml`, the printed publish command checks the same ladders."""
    assert publish_hint("kafka://127.0.0.1:9092", "my ladders.toml") == (
        "stream-rater publish --broker kafka://127.0.0.1:9092 --ladders-file 'my ladders.toml' FILE"
    )
    assert (
        publish_hint("kafka://127.0.0.1:9092", "")
        == "stream-rater publish --broker kafka://127.0.0.1:9092 FILE"
    )
