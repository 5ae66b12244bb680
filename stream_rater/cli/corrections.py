"""Corrections: ``void`` / ``unvoid`` matches of a ladder, ``rerate`` it (optionally with new
parameters); carried out here, or by a worker with ``--via-topic``. And ``season``: start a new
season of a ladder (a record on the matches topic, applied by the worker in its place)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import uuid
from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

from stream_rater.cli.common import (
    KAFKA_SECURITY,
    Subcommands,
    configured_ladders,
    ladders_of,
    require,
    settings_flags,
    settings_of,
    store_flag,
    store_url,
    with_store,
)
from stream_rater.cli.inputs import bar, valid_matches
from stream_rater.config.ladders import Ladder, parse_param
from stream_rater.config.rules import Rules, refuse_rule_overrides
from stream_rater.config.settings import Settings, env_name
from stream_rater.contracts import CorrectionRequest, MatchFinished
from stream_rater.offline.adapters import FORMATS
from stream_rater.store import StateStore
from stream_rater.waiting import wait_until_async


def register(sub: Subcommands) -> None:
    """Add ``void``, ``unvoid``, ``rerate`` and ``season`` to the subcommands `sub`."""
    for name, what in (
        ("void", "void matches of a ladder"),
        ("unvoid", "count voided matches again"),
        ("rerate", "recompute a ladder from its history (optionally with new parameters)"),
    ):
        _add_correction(sub, name, what)
    _add_season(sub)


def _add_correction(sub: Subcommands, name: str, what: str) -> None:
    """The ``void``, ``unvoid`` or ``rerate`` subcommand (`name`, doing `what`): what to
    correct, the history to read, and how the re-rate runs (`_rerate_flags`)."""
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
            "--since",
            metavar="CHECKPOINT|TIME",
            help="apply the new parameters from this checkpoint on (its id, or the newest made at or "
            "before a time): the states it holds keep the old parameters' numbers (default: re-rate "
            "the whole history)",
        )
    p.add_argument(
        "--history",
        action="append",
        default=[],
        metavar="FILE",
        help="matches older than the topic retains, applied first (repeatable; --format); "
        "required once retention deleted the head of the ladder's partition (an empty file: "
        "it held none of the ladder's matches)",
    )
    p.add_argument("--format", choices=FORMATS, default="jsonl", help="format of --history files")
    p.add_argument("--home-effect", action="store_true", help="football --history: the 'home' effect")
    _rerate_flags(p)
    p.set_defaults(func=cmd_correct)


def _rerate_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a correction's re-rate: its pacing, its output, where it runs."""
    p.add_argument(
        "--lease",
        type=float,
        default=10.0,
        help="seconds the re-rate lock (and the freeze) outlive a crashed re-rate (default 10)",
    )
    p.add_argument("--batch-size", type=int, default=1000, help="matches per processor batch (default 1000)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument(
        "--via-topic",
        action="store_true",
        help="send the request to the corrections topic for a worker to carry out, and return "
        "(no store needed)",
    )
    store_flag(p)
    settings_flags(
        p,
        [
            "broker",
            "topic_matches",
            "topic_updates",
            "topic_corrections",
            "topic_checkpoints",
            "checkpoint_sink",
            "max_event_bytes",
            "max_clock_skew",
            "ladders_file",
            *KAFKA_SECURITY,
        ],
    )


def _add_season(sub: Subcommands) -> None:
    """The ``season`` subcommand: its flags and handler."""
    p = sub.add_parser(
        "season",
        help="start a new season of a ladder: every player's rating is pulled toward the prior "
        "(README 'Ladder rules'); the previous season's leaderboard stays readable",
    )
    p.add_argument("--ladder", required=True)
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="season_shrink=K or season_sigma=S for this reset (default: the ladder's), repeatable",
    )
    p.add_argument("--id", help="the season record's id, its idempotency key (default: season-<random>)")
    p.add_argument(
        "--via-topic",
        action="store_true",
        help="only send the season record to the matches topic and return (no store needed)",
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for a worker to apply it (default 60)"
    )
    store_flag(p)
    settings_flags(p, ["broker", "topic_matches", "ladders_file", *KAFKA_SECURITY])
    p.set_defaults(func=cmd_season)


def cmd_season(args: argparse.Namespace) -> int:
    """``season``: publish a season-start record to the matches topic — its place in the
    ladder's partition is where the season starts, for the workers and for every replay — and,
    unless ``--via-topic``, wait until the store shows it applied."""
    import time

    from stream_rater.contracts import DEFAULT_LIMITS, parse_match
    from stream_rater.kafka.produce import match_record, send_records

    settings = settings_of(args)
    require(settings, "broker")
    ladders = configured_ladders(args)
    params = {}
    for text in args.param:
        try:
            name, value = parse_param(text)
        except ValueError as e:
            raise ValueError(f"--param: {e}") from None
        params[name] = value
    record = {
        "kind": "season",
        "match_id": args.id or f"season-{uuid.uuid4().hex[:12]}",
        "ladder": args.ladder,
        "finished_at": time.time(),
        **({"params": params} if params else {}),
    }
    try:
        parse_match(record, ladders, DEFAULT_LIMITS)
    except ValueError as e:
        raise ValueError(f"--param: {e}" if "params" in str(e) else str(e)) from None
    if not args.via_topic:
        store_url(args)
    refuse_neutral_season(ladders.get(args.ladder), params)
    asyncio.run(send_records(settings, [match_record(settings.topic_matches, record)]))
    if args.via_topic:
        print(
            f"sent season record {record['match_id']} for ladder {args.ladder!r} to {settings.topic_matches!r}"
        )
        return 0

    async def started(store: StateStore) -> int:
        async def applied() -> int | None:
            ended = await store.seasons(args.ladder)
            return len(ended) + 1 if record["match_id"] in ended else None

        return await wait_until_async(
            applied, f"a worker to apply season record {record['match_id']}", args.timeout
        )

    season = with_store(args, started)
    print(f"ladder {args.ladder!r}: season {season} started (record {record['match_id']})")
    return 0


def refuse_neutral_season(ladder: Ladder, overrides: Mapping[str, Any]) -> None:
    """A usage error when a season start of `ladder` (with the record's `overrides`) would
    change nobody: neither ``season_shrink`` nor ``season_sigma`` is set (their neutral values,
    1 and 0, pull no rating toward the prior)."""
    rules = Rules.of({**ladder.params, **overrides})
    if rules.season_shrink == 1.0 and rules.season_sigma == 0.0:
        raise ValueError(
            f"ladder {ladder.name!r} has no season rules: season_shrink and season_sigma are unset, "
            "so a season start would change nobody; set them in the ladders file "
            f"(or {env_name('ladder')}_<NAME>__SEASON_SHRINK), or give --param season_shrink=K"
        )


def cmd_correct(args: argparse.Namespace) -> int:
    """``void`` / ``unvoid`` / ``rerate``: re-rate a ladder into a new generation and switch."""
    from stream_rater.corrections.history import HistorySources, apply_correction
    from stream_rater.corrections.rerate import Correction, RerateOptions, Tuning

    settings = settings_of(args)
    require(settings, "broker")
    refuse_rule_overrides(dict(parse_param(p) for p in getattr(args, "param", [])), "--param ")
    correction = Correction(
        args.command,
        args.ladder,
        tuple(getattr(args, "match_ids", ())),
        args.reason,
        dict(parse_param(p) for p in getattr(args, "param", [])),
    )
    ladders_of(args)  # checks --param against the ladder's model: one line naming the flag
    ladders = configured_ladders(args)
    ladders.get(args.ladder)
    if args.via_topic:
        return _request_correction(settings, args, correction.request(f"cli-{uuid.uuid4().hex[:12]}"))
    store_url(args)  # no store is a usage error before any --history file is read
    with ExitStack() as stack:
        files: list[MatchFinished] | None = None
        if args.history:
            args.files, args.strict, args.allow_bad_lines = args.history, True, False
            files = list(valid_matches(args, ladders, stack)[0])
        progress = bar(stack, "re-rate")
        report = with_store(
            args,
            lambda store: apply_correction(
                correction,
                settings,
                ladders,
                store,
                options=RerateOptions(Tuning(lease=args.lease, batch_size=args.batch_size), progress),
                sources=HistorySources(files=files, since=getattr(args, "since", None)),
            ),
        )
    for line in report.skipped:
        print(line, file=sys.stderr)
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
        ("--since", getattr(args, "since", None)),
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
