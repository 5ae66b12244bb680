"""The ``stream-rater`` command line: one entry point, one subcommand per job.

Each ``cmd_*`` function parses nothing itself: `build_parser` declares the flags (service
flags mirror `Settings` fields and default to their ``STREAM_RATER_*`` variables) and the
function does the job.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import fields
from typing import Any, TextIO

from stream_rater.config.ladders import (
    DEFAULT_LADDER,
    DEFAULT_MODEL,
    Ladder,
    Ladders,
    ParamError,
    check_params,
    load_ladders,
    parse_param,
)
from stream_rater.config.settings import Settings, env_name
from stream_rater.contracts import CorrectionRequest, Limits, MatchFinished
from stream_rater.contracts.codecs import encode_event
from stream_rater.offline.adapters import FORMATS, open_text, read_records

EXIT_BAD_INPUT = 2
EXIT_RUNTIME = 1


def _settings_flags(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """Flags for the named `Settings` fields, e.g. ``--redis-url`` (alias ``--redis``)."""
    by_name = {f.name: f for f in fields(Settings)}
    aliases = {"redis_url": ["--redis"], "broker": ["--kafka"]}
    for name in names:
        f = by_name[name]
        flag = "--" + name.replace("_", "-")
        parser.add_argument(
            flag,
            *aliases.get(name, []),
            dest=name,
            type=type(f.default),
            default=None,
            help=f"{f.metadata['help']} [env {env_name(name)}, default {f.default!r}]",
        )


def _input_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE", help="input files ('-' or none: stdin)")
    parser.add_argument("--format", choices=FORMATS, default="jsonl", help="input format (default jsonl)")
    parser.add_argument(
        "--home-effect",
        action="store_true",
        help="football: mark the home team of non-neutral matches with the 'home' effect",
    )
    parser.add_argument(
        "--ladder",
        help="rate every match on this ladder (overrides the events'); with "
        "--from-topic, the ladder whose matches are read",
    )
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
    parser.add_argument(
        "--batch-size", type=int, default=1000, help="matches per processor batch (default 1000)"
    )
    _settings_flags(parser, ["ladders_file"])


def _store_flag(parser: argparse.ArgumentParser, default: str | None, required: bool = True) -> None:
    parser.add_argument(
        "--store",
        default=default,
        required=required and default is None,
        help="'memory' or a Redis URL (redis://host:port/db, or "
        "redis+cluster://host:port[,host:port…] for a Redis Cluster)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The full ``stream-rater`` argument parser."""
    parser = argparse.ArgumentParser(prog="stream-rater", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    sub = parser.add_subparsers(dest="command", required=True)

    kafka_security = [
        "kafka_security_protocol",
        "kafka_sasl_mechanism",
        "kafka_sasl_username",
        "kafka_sasl_password",
        "kafka_ssl_cafile",
    ]
    p = sub.add_parser(
        "replay",
        help="apply match files (or a ladder's matches from the topic) offline; print rating-changed events",
    )
    _input_flags(p)
    _store_flag(p, "memory")
    p.add_argument("--out", help="write events here instead of stdout")
    p.add_argument(
        "--from-topic",
        action="store_true",
        help="read --ladder's matches from the matches topic (earliest retained offset to its "
        "end, in log order) instead of files",
    )
    _settings_flags(p, ["broker", "topic_matches", *kafka_security])
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser(
        "verify",
        help="recompute a ladder from the matches topic and compare with the store; "
        "exit 1 if any player differs",
    )
    p.add_argument("--ladder", required=True, help="the ladder to verify")
    p.add_argument(
        "--tolerance", type=float, default=1e-9, help="largest |difference| of mu or sigma (default 1e-9)"
    )
    p.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds to wait for the workers to commit what was read (default 30)",
    )
    _store_flag(p, None)
    _settings_flags(
        p, ["broker", "topic_matches", "consumer_group", "max_event_bytes", "ladders_file", *kafka_security]
    )
    p.set_defaults(func=cmd_verify)

    for name, what in (
        ("void", "void matches of a ladder"),
        ("unvoid", "count voided matches again"),
        ("rerate", "recompute a ladder from its history (optionally with new parameters)"),
    ):
        p = sub.add_parser(
            name,
            help=f"{what}: re-rate the ladder beside the live one and switch over "
            "without stopping the stream; subscribers get correction events",
        )
        if name != "rerate":
            p.add_argument("match_ids", nargs="+", metavar="MATCH_ID")
        p.add_argument("--ladder", required=True)
        p.add_argument(
            "--reason", required=name == "void", default="", help="why (sent in the correction events)"
        )
        if name == "rerate":
            p.add_argument(
                "--param",
                action="append",
                default=[],
                metavar="NAME=VALUE",
                help="new model parameter of the ladder from now on, repeatable",
            )
        p.add_argument(
            "--history",
            action="append",
            default=[],
            metavar="FILE",
            help="matches older than the topic retains, applied first (repeatable; --format)",
        )
        p.add_argument("--format", choices=FORMATS, default="jsonl", help="format of --history files")
        p.add_argument("--home-effect", action="store_true", help="football --history: the 'home' effect")
        p.add_argument(
            "--lease",
            type=float,
            default=10.0,
            help="seconds the re-rate lock (and the freeze) outlive a crashed re-rate (default 10)",
        )
        p.add_argument(
            "--batch-size", type=int, default=1000, help="matches per processor batch (default 1000)"
        )
        p.add_argument("--json", action="store_true", help="print the report as one JSON object")
        p.add_argument(
            "--via-topic",
            action="store_true",
            help="send the request to the corrections topic for a worker to carry out, and return",
        )
        _store_flag(p, None, required=False)  # required unless --via-topic
        _settings_flags(
            p,
            [
                "broker",
                "topic_matches",
                "topic_updates",
                "topic_corrections",
                "max_event_bytes",
                "ladders_file",
                *kafka_security,
            ],
        )
        p.set_defaults(func=cmd_correct)

    p = sub.add_parser(
        "dlq", help="list the dead-letter topic, or redrive dead letters after a fix (exactly once)"
    )
    p.add_argument("action", choices=["list", "redrive"])
    p.add_argument("--reason", help="only dead letters whose reason contains this text")
    p.add_argument("--json", action="store_true", help="list: one JSON object per dead letter")
    p.add_argument("--dry-run", action="store_true", help="redrive: say what would be sent, send nothing")
    _settings_flags(p, ["broker", "topic_matches", "topic_dlq", *kafka_security])
    p.set_defaults(func=cmd_dlq)

    p = sub.add_parser("predict", help="win/draw probabilities and match quality of proposed teams")
    p.add_argument(
        "teams", nargs="+", metavar="A,B", help="one argument per team: player ids joined by commas"
    )
    p.add_argument("--ladder", default="default")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _store_flag(p, None)
    _settings_flags(p, ["ladders_file", "max_query_players"])
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("serve", help="the read-only HTTP read API (no consumer): players, predict, balance")
    _store_flag(p, None)
    _settings_flags(p, ["web_host", "web_port", "ladders_file", "max_query_players"])
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("evaluate", help="predict each match from the ratings just before it; print accuracy")
    _input_flags(p)
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument(
        "--plot", metavar="FILE.png", help="save the calibration curve and wrong-order rate over time"
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("tune", help="fit model parameters on the first part of the matches; report the rest")
    _input_flags(p)
    p.add_argument(
        "--fit-fraction", type=float, default=0.3, help="share of the matches to fit on (default 0.3)"
    )
    p.add_argument(
        "--tune",
        metavar="NAME,NAME",
        help="parameters to fit (default: the model's usual ones not fixed by --param)",
    )
    p.add_argument(
        "--objective",
        default="log_loss",
        help="metric minimised on the fit part: log_loss (default), brier or wrong_order",
    )
    p.add_argument("--max-trials", type=int, default=60, help="objective evaluations at most (default 60)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("ratings", help="every player's state as JSON lines")
    p.add_argument("--ladder", default="default")
    p.add_argument("--effects", action="store_true", help="list the ladder's context effects instead")
    _store_flag(p, None)
    _settings_flags(p, ["ladders_file"])
    p.set_defaults(func=cmd_ratings)

    p = sub.add_parser("leaderboard", help="the top of a ladder by display rating")
    p.add_argument("--ladder", default="default")
    p.add_argument("--top", type=int, default=20)
    _store_flag(p, None)
    _settings_flags(p, ["ladders_file"])
    p.set_defaults(func=cmd_leaderboard)

    service = [f.name for f in fields(Settings)]
    p = sub.add_parser("worker", help="run a worker against the configured Kafka and Redis")
    _settings_flags(p, service)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("dev", help="embedded broker + Redis + a worker in the foreground")
    _settings_flags(p, [n for n in service if n not in ("broker", "redis_url")])
    p.add_argument(
        "--redis-cluster",
        action="store_true",
        help="a local Redis Cluster of 3 masters instead of one Redis (redis+cluster:// URL)",
    )
    p.add_argument(
        "--cluster-replicas",
        type=int,
        default=0,
        metavar="N",
        help="with --redis-cluster: replicas per master (default 0)",
    )
    p.set_defaults(func=cmd_dev)

    p = sub.add_parser("publish", help="send match events from files or stdin to the matches topic")
    _input_flags(p)
    p.add_argument("--rate", type=float, help="at most this many events per second")
    _settings_flags(
        p,
        [
            "broker",
            "topic_matches",
            "topic_updates",
            "topic_dlq",
            "partitions",
            "replication_factor",
            *kafka_security,
        ],
    )
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("subscribe", help="print rating-changed events as JSON lines")
    p.add_argument("--ladder", help="only this ladder's events")
    p.add_argument("--player", help="only this player's events (needs --ladder)")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest retained event")
    p.add_argument("--count", type=int, help="stop after this many events")
    p.add_argument("--idle-timeout", type=float, help="stop after this many seconds without events")
    _settings_flags(p, ["broker", "topic_updates", *kafka_security])
    p.set_defaults(func=cmd_subscribe)

    p = sub.add_parser(
        "demo", help="embedded runtime + worker; rate the football data; print the leaderboard"
    )
    p.add_argument(
        "--data", help="football results CSV, may be .gz (default: the copy shipped in the package)"
    )
    p.add_argument("--limit", type=int, help="only the first N matches")
    p.add_argument("--top", type=int, default=15, help="leaderboard rows to print")
    _settings_flags(p, ["partitions", "batch_size", "batch_seconds"])
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("bench", help="benchmarks (speed and memory, never timed tests)")
    p.add_argument(
        "what",
        choices=["engines", "e2e", "api", "soak", "rerate", "scale", "capacity"],
        help="engines: µs per rate() vs peer packages; e2e: worker vs faust pass-through; "
        "api: the read API under load; soak: one worker for minutes, memory and latency over time; "
        "rerate: void a football match while the worker rates more (re-rate speed, switch block); "
        "scale: K ladders over P partitions, 1 → 2 → 4 workers, single Redis and local cluster; "
        "capacity: Redis and Kafka bytes per state, marker, history entry and record, projected",
    )
    p.add_argument(
        "--repeat", type=int, default=5, help="engines: timing rounds per shape and engine (best is kept)"
    )
    p.add_argument(
        "--matches",
        type=int,
        default=None,
        help="e2e: matches in the throughput burst (30000); scale: matches per run (60000)",
    )
    p.add_argument("--ladders", type=int, default=16, help="scale: ladders the matches spread over")
    p.add_argument("--partitions", type=int, default=8, help="scale: partitions of the matches topic")
    p.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        metavar="N",
        help="scale: worker counts to run (default 1 2 4)",
    )
    p.add_argument(
        "--store",
        choices=["single", "cluster", "both"],
        default="both",
        help="scale: a single Redis, the local 3-master Redis Cluster, or both",
    )
    p.add_argument("--json", action="store_true", help="scale: print the runs as JSON")
    p.add_argument("--latency-matches", type=int, default=3_000, help="e2e: matches in the steady phase")
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="e2e: matches/s in the steady phase (500); api: requests/s per query (1000); "
        "soak: matches/s (2000); rerate: matches/s published during the re-rate (500)",
    )
    p.add_argument("--seconds", type=float, default=10.0, help="api: seconds of load per query")
    p.add_argument("--minutes", type=float, default=10.0, help="soak: minutes of sustained load")
    p.add_argument("--plot", metavar="FILE.png", help="soak: draw latency and memory over time")
    p.add_argument("--players", type=int, default=10_000_000, help="capacity: players to project for")
    p.add_argument(
        "--per-day",
        type=lambda v: [float(x) for x in v.split(",")],
        default=[1e6, 20e6],
        metavar="N[,N…]",
        help="capacity: matches per day to project for (1000000,20000000)",
    )
    p.set_defaults(func=cmd_bench)
    for command in sub.choices.values():
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of a failure"
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stream-rater`` console script.

    Every failure is one line on stderr, ``stream-rater <command>: <what>``, and an exit code:
    2 for bad usage or input (a flag, a parameter, a file line, an unknown ladder), 1 when a
    service cannot be reached or something else fails. ``--debug`` shows the traceback.
    """
    args = build_parser().parse_args(argv)
    if not args.debug and args.command not in ("worker", "dev", "demo"):
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # its connect errors reach us as exceptions
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        code, message = _failure(exc)
        print(f"stream-rater {args.command}: {message}", file=sys.stderr)
        return code


def _failure(exc: Exception) -> tuple[int, str]:
    """The exit code and the one-line message of a command's failure."""
    import redis.exceptions
    from aiokafka.errors import KafkaError

    from stream_rater.processor import StoreLost
    from stream_rater.store.base import LockLost, RerateRunning

    if isinstance(exc, (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)):
        return EXIT_RUNTIME, f"Redis: {exc}"
    if isinstance(exc, KafkaError):
        return EXIT_RUNTIME, f"Kafka broker: {exc}"
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return EXIT_RUNTIME, str(exc) or type(exc).__name__
    if isinstance(exc, (RerateRunning, LockLost, StoreLost)):
        return EXIT_RUNTIME, str(exc)
    if isinstance(exc, KeyError):  # config.ladders.UnknownLadderError says which ladders exist
        return EXIT_BAD_INPUT, str(exc)
    if isinstance(exc, (ValueError, OSError)):
        return EXIT_BAD_INPUT, str(exc)
    return EXIT_RUNTIME, f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"


def _configured_ladders(args: argparse.Namespace) -> Ladders:
    """The ladders of the ladders file (``--ladders-file``) and the environment."""
    settings = Settings.from_env().override(ladders_file=getattr(args, "ladders_file", None))
    return load_ladders(settings.ladders_file or None, os.environ)


def _ladders(args: argparse.Namespace) -> Ladders:
    """The configured ladders, with ``--ladder``'s model and parameters replaced by
    ``--model`` / ``--param`` when given (each checked: a bad one is one line naming it)."""
    ladders = _configured_ladders(args)
    model = getattr(args, "model", None)
    params = dict(parse_param(p) for p in getattr(args, "param", []))
    if not (model or params):
        return ladders
    name = getattr(args, "ladder", None) or DEFAULT_LADDER
    base = ladders.get(name, None)
    keep = base is not None and model in (None, base.model)
    ladder = Ladder(
        name,
        model or (base.model if base else DEFAULT_MODEL),
        {**(base.params if keep and base else {}), **params},
    )
    try:
        check_params(ladder.model, ladder.params)  # a bad parameter fails before any input is read
    except ParamError as exc:
        raise ValueError(f"--param {exc}" if exc.name else f"--model {ladder.model}: {exc}") from None
    return Ladders([*(lad for lad in ladders.values() if lad.name != name), ladder])


def _open_inputs(files: Sequence[str], stack: ExitStack) -> Iterator[tuple[str, TextIO]]:
    if not files or files == ["-"]:
        yield "<stdin>", sys.stdin
        return
    for path in files:
        yield path, stack.enter_context(open_text(path))


def _progress(iterable: Any, total_hint: str) -> Any:
    if not sys.stderr.isatty():
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, unit=" matches", desc=total_hint, file=sys.stderr)


def cmd_replay(args: argparse.Namespace) -> int:
    """``replay``: validate, apply in order, print rating-changed events as JSON lines."""
    from stream_rater.offline.replay import replay
    from stream_rater.processor import Processor
    from stream_rater.store import open_store

    ladders = _ladders(args)
    with ExitStack() as stack:
        out = stack.enter_context(open(args.out, "w", encoding="utf-8")) if args.out else sys.stdout
        matches, rejected = (
            _topic_matches(args, ladders) if args.from_topic else _valid_matches(args, ladders, stack)
        )

        async def run() -> Any:
            store = open_store(args.store)
            try:
                return await replay(
                    _progress(matches, "replay"),
                    Processor(ladders, store),
                    batch_size=args.batch_size,
                    on_result=lambda r: out.writelines(encode_event(e).decode() + "\n" for e in r.events),
                )
            finally:
                await store.close()

        summary = asyncio.run(run())
    summary.rejected = len(rejected)
    summary.read += len(rejected)
    print(summary.line(), file=sys.stderr)
    return _bad_lines_code(args, rejected)


def _bad_lines_code(args: argparse.Namespace, rejected: list[str]) -> int:
    """2 when input lines were rejected (unless --allow-bad-lines), else 0."""
    return EXIT_BAD_INPUT if rejected and not args.allow_bad_lines else 0


def _valid_matches(
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


def _topic_matches(args: argparse.Namespace, ladders: Ladders) -> tuple[Iterator[MatchFinished], list[str]]:
    """``replay --from-topic``: the ladder's valid matches from the matches topic, in log order."""
    from stream_rater.kafka import ladder_history, read_log

    if args.files:
        raise ValueError("--from-topic reads the topic: give no FILE")
    if not args.ladder:
        raise ValueError("--from-topic needs --ladder")
    settings = _settings(args)
    _require(settings, "broker")
    records, _ = asyncio.run(read_log(settings, settings.topic_matches))
    history = ladder_history(records, ladders, args.ladder, Limits(max_event_bytes=settings.max_event_bytes))
    if not history.ordered:
        print(
            f"warning: ladder {args.ladder!r} has records on partitions {sorted(history.positions)}; "
            "taken by broker timestamp",
            file=sys.stderr,
        )
    return iter(history.matches), history.rejected


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify``: recompute a ladder from the topic, compare with the store; 1 if any differ."""
    from stream_rater.offline.verify import verify
    from stream_rater.store import open_store

    settings = _settings(args)
    _require(settings, "broker")
    ladders = _ladders(args)
    ladders.get(args.ladder)

    async def run() -> Any:
        store = open_store(args.store)
        try:
            return await verify(
                settings, ladders, args.ladder, store, tolerance=args.tolerance, wait=args.wait
            )
        finally:
            await store.close()

    report = asyncio.run(run())
    print("\n".join(report.lines()))
    return 1 if report.differences else 0


def cmd_correct(args: argparse.Namespace) -> int:
    """``void`` / ``unvoid`` / ``rerate``: re-rate a ladder into a new generation and switch."""
    from stream_rater.corrections.history import apply_correction
    from stream_rater.corrections.rerate import Correction
    from stream_rater.store import open_store

    settings = _settings(args)
    _require(settings, "broker")
    correction = Correction(
        args.command,
        args.ladder,
        tuple(getattr(args, "match_ids", ())),
        args.reason,
        dict(parse_param(p) for p in getattr(args, "param", [])),
    )
    _ladders(args)  # checks --param against the ladder's model: one line naming the flag
    ladders = _configured_ladders(args)
    ladders.get(args.ladder)
    if args.via_topic:
        return _request_correction(settings, args, correction.request(f"cli-{uuid.uuid4().hex[:12]}"))
    if not args.store:
        raise ValueError("--store is required (unless --via-topic)")
    with ExitStack() as stack:
        files = []
        if args.history:
            args.files, args.strict, args.allow_bad_lines = args.history, True, False
            files = list(_valid_matches(args, ladders, stack)[0])
        bar = _bar(stack, "re-rate")

        async def run() -> Any:
            store = open_store(args.store)
            try:
                return await apply_correction(
                    correction,
                    settings,
                    ladders,
                    store,
                    files=files,
                    lease=args.lease,
                    batch_size=args.batch_size,
                    progress=bar,
                )
            finally:
                await store.close()

        report = asyncio.run(run())
    print(json.dumps(dataclasses.asdict(report)) if args.json else report.line())
    return 0


def _request_correction(settings: Settings, args: argparse.Namespace, request: CorrectionRequest) -> int:
    """``void|unvoid|rerate --via-topic``: publish the request for a worker (the flags a worker
    has no use for, --history, --lease, --batch-size, are refused)."""
    from stream_rater.kafka import send_request

    for flag, unused in (
        ("--history", args.history),
        ("--lease", args.lease != 10.0),
        ("--batch-size", args.batch_size != 1000),
    ):
        if unused:
            raise ValueError(f"{flag}: not with --via-topic (the worker reads the matches topic itself)")
    asyncio.run(send_request(settings, request.to_dict()))
    print(
        json.dumps(request.to_dict())
        if args.json
        else f"sent {args.command} request {request.request_id} for ladder {args.ladder!r} to "
        f"{settings.topic_corrections!r}; a worker carries it out (its log and metrics say when)"
    )
    return 0


def _bar(stack: ExitStack, what: str) -> Callable[[int, int], None] | None:
    """A progress bar on stderr (matches/s, ETA) as ``update(done, total)``; None off a terminal."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar = stack.enter_context(tqdm(unit=" matches", desc=what, file=sys.stderr))

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    return update


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``evaluate``: score each match's prediction from the ratings just before it."""
    from stream_rater.offline.evaluate import plot, score

    ladders = _ladders(args)
    with ExitStack() as stack:
        matches, rejected = _valid_matches(args, ladders, stack)
        _, summary, counts = score([_progress(matches, "evaluate")], ladders, batch_size=args.batch_size)
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.report())
    if args.plot:
        ladder = ladders.get(args.ladder or DEFAULT_LADDER)
        plot(summary, args.plot, " ".join([ladder.model, *(f"{k}={v}" for k, v in ladder.params.items())]))
    counts.rejected = len(rejected)
    counts.read += len(rejected)
    print(counts.line(), file=sys.stderr)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    """``tune``: fit a ladder's parameters on the first part of the matches, report all parts."""
    from stream_rater.offline.tune import tune

    ladders = _ladders(args)
    with ExitStack() as stack:
        matches, rejected = _valid_matches(args, ladders, stack)
        parsed = list(_progress(matches, "validate"))
    if rejected:
        print(f"{len(rejected)} bad lines skipped", file=sys.stderr)
    result = tune(
        parsed,
        ladders,
        args.ladder or DEFAULT_LADDER,
        args.tune.split(",") if args.tune else None,
        fixed=[parse_param(p)[0] for p in args.param],
        fit_fraction=args.fit_fraction,
        objective=args.objective,
        max_trials=args.max_trials,
        batch_size=args.batch_size,
        on_trial=lambda trial: print(trial.line(), file=sys.stderr, flush=True),
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.report())
    return 0


def cmd_ratings(args: argparse.Namespace) -> int:
    """``ratings``: every stored player (or effect) of a ladder as JSON lines."""
    from stream_rater.store import open_store

    model = _ladders(args).get(args.ladder).rating_model

    async def run() -> None:
        store = open_store(args.store)
        try:
            states = await store.players(args.ladder, effects=args.effects)
        finally:
            await store.close()
        from stream_rater.rating.base import Rating

        for player_id, s in sorted(states.items()):
            row = {
                "player_id": player_id,
                "mu": s.mu,
                "sigma": s.sigma,
                "rating": model.display(Rating(s.mu, s.sigma)),
                "games": s.games,
                "last_played": s.last_played,
                "version": s.version,
            }
            print(json.dumps(row))

    asyncio.run(run())
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    """``leaderboard``: the top N players of a ladder, best first."""
    from stream_rater.store import open_store

    _ladders(args).get(args.ladder)

    async def run() -> None:
        store = open_store(args.store)
        try:
            rows = await store.leaderboard(args.ladder, args.top)
            states = await store.read(args.ladder, [p for p, _ in rows], [], [])
        finally:
            await store.close()
        print(f"{'#':>4}  {'player':<32} {'rating':>9} {'mu':>9} {'sigma':>8} {'games':>6}")
        for rank, (player_id, rating) in enumerate(rows, start=1):
            s = states.players[player_id]
            sigma = "" if s.sigma is None else f"{s.sigma:8.3f}"
            print(f"{rank:>4}  {player_id:<32} {rating:9.3f} {s.mu:9.3f} {sigma:>8} {s.games:>6}")

    asyncio.run(run())
    return 0


def _settings(args: argparse.Namespace) -> Settings:
    flags = {f.name: getattr(args, f.name) for f in fields(Settings) if hasattr(args, f.name)}
    return Settings.from_env().override(**flags)


def _require(settings: Settings, *names: str) -> None:
    missing = [n for n in names if not getattr(settings, n)]
    if missing:
        raise ValueError(
            "not configured: " + ", ".join(f"--{n.replace('_', '-')} / {env_name(n)}" for n in missing)
        )


def cmd_worker(args: argparse.Namespace) -> int:
    """``worker``: consume matches, rate, commit to Redis, emit rating updates."""
    from stream_rater.service.app import run_worker

    settings = _settings(args)
    _require(settings, "broker", "redis_url")
    run_worker(settings, _ladders(args))
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    """``dev``: the embedded local runtime and a worker, in the foreground until Ctrl-C."""
    from stream_rater.local.runtime import LocalRuntime
    from stream_rater.service.app import run_worker

    settings = _settings(args)
    cluster = {"redis_cluster": 3, "cluster_replicas": args.cluster_replicas} if args.redis_cluster else {}
    with LocalRuntime(topics=settings.topics(), **cluster) as runtime:
        settings = settings.override(
            broker=runtime.broker_url, redis_url=runtime.redis_url, session_timeout=3.0
        )
        print(
            f"broker   {runtime.broker_url}  ({env_name('broker')})\n"
            f"redis    {runtime.redis_url}  ({env_name('redis_url')})\n"
            f"web      http://{settings.web_host}:{settings.web_port}/\n"
            f"publish: stream-rater publish --broker {runtime.broker_url} FILE",
            file=sys.stderr,
        )
        run_worker(settings, _ladders(args))
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    """``publish``: validate each line, send the good ones keyed by ladder (`events.match_key`)."""
    from stream_rater.kafka import TopicError, client_options, create_topics, publish

    settings = _settings(args)
    _require(settings, "broker")
    ladders = _ladders(args)
    try:  # as the worker would, so that a broker that auto-creates topics never picks the count
        asyncio.run(
            create_topics(
                settings.broker,
                settings.topics(),
                settings.replication_factor,
                options=client_options(settings),
            )
        )
    except TopicError as exc:
        print(f"stream-rater publish: warning: {exc}; publishing anyway", file=sys.stderr)
    with ExitStack() as stack:
        matches, rejected = _valid_matches(args, ladders, stack)
        summary = asyncio.run(publish((m.to_dict() for m in matches), settings, rate=args.rate))
    print(f"{summary.line()}; {len(rejected)} bad lines not sent", file=sys.stderr)
    return _bad_lines_code(args, rejected)


def cmd_subscribe(args: argparse.Namespace) -> int:
    """``subscribe``: rating-changed events as JSON lines on stdout."""
    from stream_rater.kafka import subscribe

    settings = _settings(args)
    _require(settings, "broker")
    if args.player and not args.ladder:
        raise ValueError("--player needs --ladder")

    async def run() -> None:
        seen = 0

        def bad(where: str, reason: str) -> None:
            print(f"stream-rater subscribe: skipped the record at {where}: {reason}", file=sys.stderr)

        async for event in subscribe(
            settings,
            ladder=args.ladder,
            player=args.player,
            on_bad=bad,
            from_beginning=args.from_beginning,
            idle_timeout=args.idle_timeout,
        ):
            print(json.dumps(event), flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                return

    asyncio.run(run())
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``demo``: the README's run command."""
    from pathlib import Path

    from stream_rater.local.demo import default_data_file, run_demo

    data = Path(args.data) if args.data else default_data_file()
    return run_demo(_settings(args), data, limit=args.limit, top=args.top)


def cmd_bench(args: argparse.Namespace) -> int:
    """``bench``: run a benchmark and print its table."""
    if args.what == "engines":
        from stream_rater.bench import engines

        engines.run(repeat=args.repeat)
    elif args.what == "soak":
        from stream_rater.bench import soak

        soak.run(minutes=args.minutes, rate=args.rate or 2000.0, plot=args.plot)
    elif args.what == "rerate":
        from stream_rater.bench import rerate

        rerate.run(rate=args.rate or 500.0)
    elif args.what == "api":
        from stream_rater.bench import api

        api.run(rate=args.rate or 1000.0, seconds=args.seconds)
    elif args.what == "scale":
        from stream_rater.bench import scale

        stores = scale.STORES if args.store == "both" else (args.store,)
        runs = scale.run(
            ladders=args.ladders,
            partitions=args.partitions,
            workers=args.workers,
            matches=args.matches or 60_000,
            stores=stores,
            as_json=args.json,
        )
        return 1 if any(r.differences for r in runs) else 0
    elif args.what == "capacity":
        from stream_rater.bench import capacity

        capacity.run(players=args.players, per_day=args.per_day)
    else:
        from stream_rater.bench import e2e

        e2e.run(matches=args.matches or 30_000, latency_matches=args.latency_matches, rate=args.rate or 500.0)
    return 0


def cmd_dlq(args: argparse.Namespace) -> int:
    """``dlq list|redrive``: read the dead letters; re-publish the selected ones once."""
    from stream_rater.offline.dead_letters import dead_letters, redrive

    settings = _settings(args)
    _require(settings, "broker")
    found = asyncio.run(dead_letters(settings, args.reason))
    if args.action == "list":
        for letter in found:
            print(json.dumps(letter.to_dict()) if args.json else letter.line())
        print(f"{len(found)} dead letters", file=sys.stderr)
        return 0
    sent, skipped = asyncio.run(redrive(settings, found, dry_run=args.dry_run))
    verb = "would redrive" if args.dry_run else "redrove"
    print(
        f"{verb} {sent} dead letters to {settings.topic_matches}; {skipped} redriven before", file=sys.stderr
    )
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    """``predict``: each team's chance to finish first, the draw chance and the quality."""
    import time

    from stream_rater.queries import Queries, team_arguments
    from stream_rater.store import open_store

    settings = _settings(args)
    ladders = _ladders(args)

    async def run() -> dict:
        store = open_store(args.store)
        try:
            return await Queries(store, ladders, settings.max_query_players).predict(
                args.ladder, team_arguments(args.teams), time.time()
            )
        finally:
            await store.close()

    answer = asyncio.run(run())
    if args.json:
        print(json.dumps({k: answer[k] for k in ("ladder", "teams", "draw_probability", "quality")}))
        return 0
    for team in answer["teams"]:
        new = f"  (new: {', '.join(team['new'])})" if team["new"] else ""
        print(f"{','.join(team['players']):<40} wins {100 * team['win_probability']:6.2f} %{new}")
    if answer["draw_probability"] is not None:
        print(f"{'draw':<40}      {100 * answer['draw_probability']:6.2f} %")
    print(f"match quality {answer['quality']:.4f}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """``serve``: the read API over the store, without consuming anything."""
    from aiohttp import web

    from stream_rater.queries import Queries
    from stream_rater.service.query_api import serve_app
    from stream_rater.store import open_store

    settings = _settings(args)
    store = open_store(args.store)
    application = serve_app(Queries(store, _ladders(args), settings.max_query_players), store)

    async def close_store(_: web.Application) -> None:
        await store.close()

    application.on_cleanup.append(close_store)
    web.run_app(application, host=settings.web_host, port=settings.web_port, print=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
