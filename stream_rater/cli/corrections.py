"""Corrections: ``void`` / ``unvoid`` matches of a ladder, ``rerate`` it (optionally with new
parameters); carried out here, or by a worker with ``--via-topic``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import uuid
from contextlib import ExitStack

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
from stream_rater.config.ladders import parse_param
from stream_rater.config.settings import Settings
from stream_rater.contracts import CorrectionRequest
from stream_rater.offline.adapters import FORMATS


def register(sub: Subcommands) -> None:
    """Add ``void``, ``unvoid`` and ``rerate`` to the subcommands `sub`."""
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
                "max_event_bytes",
                "ladders_file",
                *KAFKA_SECURITY,
            ],
        )
        p.set_defaults(func=cmd_correct)


def cmd_correct(args: argparse.Namespace) -> int:
    """``void`` / ``unvoid`` / ``rerate``: re-rate a ladder into a new generation and switch."""
    from stream_rater.corrections.history import apply_correction
    from stream_rater.corrections.rerate import Correction

    settings = settings_of(args)
    require(settings, "broker")
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
        files = []
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
                files=files,
                lease=args.lease,
                batch_size=args.batch_size,
                progress=progress,
            ),
        )
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
