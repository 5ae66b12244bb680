"""Match files as commands read them: the input flags, validation with each bad line reported,
the exit code of bad lines, and progress bars on a terminal.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from typing import Any, TextIO

from stream_rater.cli.common import EXIT_BAD_INPUT, settings_flags
from stream_rater.config.ladders import Ladders
from stream_rater.contracts import MatchFinished
from stream_rater.offline.adapters import FORMATS, open_text, read_records

#: ``--ladder``'s help where it is a rating command's.
RATE_ON_LADDER = (
    "rate every match on this ladder (overrides the events'); with --from-topic, the ladder whose "
    "matches are read"
)


def input_flags(
    parser: argparse.ArgumentParser, *, ladder_help: str = RATE_ON_LADDER, rating: bool = True
) -> None:
    """The files, their format, the ladder (`ladder_help`) and the ladders file, bad-line
    handling, and — for a command `rating` them — the model, its parameters and the batch size."""
    parser.add_argument("files", nargs="*", metavar="FILE", help="input files ('-' or none: stdin)")
    parser.add_argument("--format", choices=FORMATS, default="jsonl", help="input format (default jsonl)")
    parser.add_argument(
        "--home-effect",
        action="store_true",
        help="football: mark the home team of non-neutral matches with the 'home' effect",
    )
    parser.add_argument("--ladder", help=ladder_help)
    if rating:
        parser.add_argument("--model", help="model of that ladder (e.g. trueskill, sph-elo, elo)")
        parser.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="model parameter (constructor keyword), repeatable",
        )
    parser.add_argument(
        "--strict", action="store_true", help="stop at the first bad line instead of skipping it"
    )
    parser.add_argument(
        "--allow-bad-lines",
        action="store_true",
        help="exit 0 although some lines were rejected (each is still reported)",
    )
    if rating:
        parser.add_argument(
            "--batch-size", type=int, default=1000, help="matches per processor batch (default 1000)"
        )
    settings_flags(parser, ["ladders_file"])


def valid_matches(
    args: argparse.Namespace, ladders: Ladders, stack: ExitStack
) -> tuple[Iterator[MatchFinished], list[str]]:
    """The valid matches of the input files, and the list that collects where bad lines
    were (each is also reported on stderr)."""
    from stream_rater.offline.replay import validated

    rejected: list[str] = []

    def report(where: str, reason: str) -> None:
        rejected.append(where)
        print(f"{where}: {reason}", file=sys.stderr)

    records = read_records(_open_inputs(args.files, stack), args.format, home_effect=args.home_effect)
    return iter(
        validated(records, ladders, ladder=args.ladder, on_error=report, strict=args.strict)
    ), rejected


def _open_inputs(files: Sequence[str], stack: ExitStack) -> Iterator[tuple[str, TextIO]]:
    if not files or files == ["-"]:
        yield "<stdin>", sys.stdin
        return
    for path in files:
        yield path, stack.enter_context(open_text(path))


def bad_lines_code(args: argparse.Namespace, rejected: list[str]) -> int:
    """2 when input lines were rejected (unless --allow-bad-lines), else 0."""
    return EXIT_BAD_INPUT if rejected and not args.allow_bad_lines else 0


def progress(iterable: Any, what: str) -> Any:
    """`iterable` counted on a progress bar on stderr; as it is off a terminal."""
    if not sys.stderr.isatty():
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, unit=" matches", desc=what, file=sys.stderr)


def bar(stack: ExitStack, what: str) -> Callable[[int, int], None] | None:
    """A progress bar on stderr (matches/s, ETA) as ``update(done, total)``; None off a terminal."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    line = stack.enter_context(tqdm(unit=" matches", desc=what, file=sys.stderr))

    def update(done: int, total: int) -> None:
        line.total = total
        line.update(done - line.n)

    return update
