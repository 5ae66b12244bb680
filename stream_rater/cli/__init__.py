"""The ``stream-rater`` command line: one entry point, one subcommand per job.

Each command group is a module that registers its subcommands (``register(sub)``) and holds
their ``cmd_*`` functions: `offline` (replay, verify, evaluate, tune), `migrate`, `corrections` (void,
unvoid, rerate), `ratings` (ratings, leaderboard, predict, balance, serve), `stream` (worker, dev, demo,
publish, subscribe, dlq), `archive`, `bench`, `synth` and `tokens` (token new). `common` holds what they share: service flags mirror
`Settings` fields and default to their ``STREAM_RATER_*`` variables, ``--store`` defaults to
``STREAM_RATER_REDIS_URL``, and every failure is one line with its exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence

from stream_rater.cli import (
    archive,
    bench,
    checkpoints,
    corrections,
    migrate,
    offline,
    ratings,
    stream,
    synth,
    tokens,
)
from stream_rater.cli.common import KafkaConnectFailures, OneLineParser, debug_flag, failure

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The full ``stream-rater`` argument parser."""
    parser: argparse.ArgumentParser = OneLineParser(prog="stream-rater", description=__doc__.splitlines()[0])
    debug_flag(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (offline, migrate, corrections, checkpoints, ratings, stream, archive, bench, synth, tokens):
        group.register(sub)
    for command in _commands(sub):
        debug_flag(command, on_command=True)
    return parser


def _commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> list[argparse.ArgumentParser]:
    """Every command parser under `sub`, the subcommands of a command group (``bench …``) too."""
    found = []
    for command in sub.choices.values():
        found.append(command)
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                found += _commands(action)
    return found


#: The exit code of a command whose stdout reader went away: 128 + SIGPIPE, as a shell reports
#: a tool SIGPIPE ended (``yes | head -1``).
EXIT_BROKEN_PIPE = 141


def _reader_gone() -> int:
    """Quietly `EXIT_BROKEN_PIPE`: stdout now points at /dev/null, so that the interpreter's own
    flush at exit does not report the broken pipe either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


class Terminated(KeyboardInterrupt):
    """SIGTERM: the command unwinds as on Ctrl-C — its ``finally`` blocks stop the processes
    it started, by PID — and exits 128 + 15, as a shell reports a process SIGTERM ended. Not
    the commands with a stop of their own (`STOPS_ITSELF`)."""


#: Commands that stop gracefully on SIGTERM by themselves (faust's worker, aiohttp's server, the
#: archiver's loop), from start-up on as before: `Terminated` is not theirs.
STOPS_ITSELF = frozenset({"worker", "serve", "archive"})


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM does not cut the unwinding short
    raise Terminated


@contextlib.contextmanager
def _sigterm_unwinds(command: str) -> Iterator[None]:
    """Within it, SIGTERM raises `Terminated` — for a `command` not in `STOPS_ITSELF`, in the
    main thread (the only one a handler can be set from), unless SIGTERM is not the default
    there (a parent ignores it); the handler before is restored after (`main` also runs inside
    test processes)."""
    before = signal.getsignal(signal.SIGTERM)
    mine = command not in STOPS_ITSELF and threading.current_thread() is threading.main_thread()
    if before is not signal.SIG_DFL or not mine:
        yield
        return
    signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


#: The exit code of a command SIGTERM ended (`Terminated`).
EXIT_TERMINATED = 128 + signal.SIGTERM


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stream-rater`` console script.

    Every failure is one line on stderr, ``stream-rater <command>: <what>``, and an exit code:
    2 for bad usage or input (a flag, a parameter, a file line, an unknown ladder), 1 when a
    service cannot be reached or something else fails (a Kafka broker: why, e.g. its SASL
    credentials or TLS certificate). ``--debug`` shows the traceback. A reader of stdout that
    went away (``stream-rater ratings | head -3``) ends the command quietly with 141, as SIGPIPE
    ends other Unix tools; SIGTERM ends it as Ctrl-C does, with 143 (`Terminated`).
    """
    args = build_parser().parse_args(argv)
    kafka_connect = KafkaConnectFailures()
    if not args.debug and args.command not in ("worker", "dev", "demo"):
        kafka_connect.install()
    try:
        with _sigterm_unwinds(args.command):
            code = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader gone before the last buffered lines is a broken pipe too
        return code
    except Terminated:
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()
    except Exception as exc:
        if args.debug:
            raise
        code, message = failure(exc, kafka_connect)
        print(f"stream-rater {args.command}: {message}", file=sys.stderr)
        return code
