"""The command line's parsing and store resolution, in process (the e2e tests run it as users do)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import stream_rater.bench
from stream_rater.cli import EXIT_TERMINATED, build_parser, main, stream, synth
from stream_rater.cli.common import store_url
from tests.helpers import cli


def test_store_is_the_flag_else_STREAM_RATER_REDIS_URL(monkeypatch: pytest.MonkeyPatch):
    """--store wins; without it the settings' Redis URL (its variable) is the store."""
    parser = build_parser()
    monkeypatch.setenv("STREAM_RATER_REDIS_URL", "redis://env:6379/0")
    assert store_url(parser.parse_args(["ratings"])) == "redis://env:6379/0"
    assert store_url(parser.parse_args(["ratings", "--store", "memory"])) == "memory"
    assert store_url(parser.parse_args(["replay"])) == "memory"  # replay is offline unless told


def test_no_store_is_a_usage_error_naming_the_flag_and_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("STREAM_RATER_REDIS_URL", raising=False)
    with pytest.raises(ValueError, match="--store URL or set STREAM_RATER_REDIS_URL"):
        store_url(build_parser().parse_args(["leaderboard"]))


def test_bench_chooses_the_redis_topology_with_redis():
    """``bench scale --redis single|cluster|both``; --store means a store URL elsewhere."""
    parser = build_parser()
    assert parser.parse_args(["bench", "scale"]).redis == "both"
    assert parser.parse_args(["bench", "scale", "--redis", "cluster"]).redis == "cluster"
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "scale", "--store", "single"])


def test_dev_on_tansu_names_the_librdkafka_it_takes_and_says_when_java_is_missing(monkeypatch):
    """`dev`'s note on Tansu names the librdkafka it takes (tests/e2e/test_tansu_clients.py checks
    the claim), a group consumer's wait, `--embedded-broker apache-kafka`, and why that cannot start here
    when java is missing (`demo` and `dev` on Tansu need no java)."""
    from stream_rater.cli.stream import tansu_clients_note

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    note = tansu_clients_note()
    assert "librdkafka 2.2+" in note and "`stream-rater dev --embedded-broker apache-kafka`" in note
    assert "session.timeout.ms=6000: 3 s" in note
    assert note.endswith(
        "which cannot start here: Apache Kafka needs java 17+ (JAVA_HOME or PATH), and none was found"
    )


def test_each_bench_is_a_subcommand_named_after_its_module_with_only_its_own_flags():
    """``bench <name>`` runs `stream_rater/bench/<name>.py`, and takes no other bench's flags."""
    parser = build_parser()
    benches = next(
        a for a in parser._subparsers._group_actions[0].choices["bench"]._actions if a.dest == "what"
    )
    bench_dir = Path(stream_rater.bench.__file__).parent
    assert {name for name in benches.choices if not (bench_dir / f"{name}.py").exists()} == set()
    assert parser.parse_args(["bench", "engines", "--repeat", "2"]).repeat == 2
    assert parser.parse_args(["bench", "chaos", "--debug"]).debug is True
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "engines", "--minutes", "1"])


def test_sigterm_unwinds_a_command_through_its_finally_blocks_and_exits_143(monkeypatch):
    """SIGTERM raises in the command, as Ctrl-C would, so its ``finally`` blocks (which stop
    what it started, by PID) run; the exit code is 128 + 15; the handler before comes back."""
    ran: list[str] = []

    def command(args) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # handled before the next line runs
            ran.append("went on")
        finally:
            ran.append("finally")
        return 0

    monkeypatch.setattr(synth, "cmd_synth", command)
    assert main(["synth"]) == EXIT_TERMINATED
    assert ran == ["finally"] and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_command_that_stops_by_itself_on_sigterm_keeps_sigterm_as_it_was(monkeypatch):
    """The worker's own stop (faust's handler, installed once it runs) holds from start-up on."""
    seen = []
    monkeypatch.setattr(stream, "cmd_worker", lambda args: seen.append(signal.getsignal(signal.SIGTERM)))
    assert main(["worker"]) == 0 and seen == [signal.SIG_DFL]


@pytest.mark.parametrize("command", [["synth", "--matches", "4000"], ["replay", "--model", "elo"]])
def test_a_reader_that_goes_away_ends_the_command_quietly_with_141(command: list[str], tmp_path: Path):
    """``stream-rater … | head -1``: no "[Errno 32] Broken pipe" line, exit 128 + SIGPIPE."""
    matches = tmp_path / "matches.jsonl"
    matches.write_text(cli("synth", "--matches", "3000", check=True).stdout)
    args = [*command, str(matches)] if command[0] == "replay" else command
    proc = subprocess.Popen(
        [sys.executable, "-m", "stream_rater", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()  # like `head -1`: the reader is gone with most of the output unread
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and "Broken pipe" not in stderr, stderr


def test_building_the_parser_loads_no_service_client():
    """Every command builds the whole parser first: it loads neither Kafka's, Redis's,
    PostgreSQL's nor the numeric libraries, nor the local runtime or the archiver (which
    made each command start about half a CPU-second slower); a command loads what it uses."""
    heavy = [
        "aiokafka",
        "redis",
        "faust",
        "numpy",
        "psycopg",
        "stream_rater.local.runtime",
        "stream_rater.service.archiver",
    ]
    probe = (
        "import sys; from stream_rater.cli import build_parser; build_parser(); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
