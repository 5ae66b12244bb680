"""``checkpoint``: write verified checkpoints of ladders (once, or ``--loop`` at the cadence)
for voids, ``verify`` and store-loss recovery to start from (README "Checkpoints")."""

from __future__ import annotations

import argparse

from stream_rater.cli.common import (
    KAFKA_SECURITY,
    Subcommands,
    configured_ladders,
    require,
    settings_flags,
    settings_of,
    store_flag,
    store_url,
    with_store,
)
from stream_rater.store import StateStore


def register(sub: Subcommands) -> None:
    """Add ``checkpoint`` to the subcommands `sub`."""
    p = sub.add_parser(
        "checkpoint",
        help="replay ladders beside the live ones and write a verified checkpoint of each when "
        "the cadence says so (every N matches or H hours); never blocks the workers",
    )
    p.add_argument(
        "--ladder",
        action="append",
        default=[],
        help="a ladder to checkpoint (repeatable; default: every ladder the store has)",
    )
    p.add_argument(
        "--force", action="store_true", help="write a checkpoint now if the ladder moved since the last"
    )
    p.add_argument("--loop", action="store_true", help="run rounds until stopped (SIGTERM/SIGINT)")
    p.add_argument(
        "--interval", type=float, default=10.0, help="seconds between rounds with --loop (default 10)"
    )
    p.add_argument(
        "--metrics-port", type=int, default=0, help="port of the /metrics HTTP server (default 0: none)"
    )
    store_flag(p)
    settings_flags(
        p,
        [
            "broker",
            "topic_matches",
            "topic_checkpoints",
            "checkpoint_every_matches",
            "checkpoint_every_hours",
            "max_event_bytes",
            "max_clock_skew",
            "ladders_file",
            "web_host",
            *KAFKA_SECURITY,
        ],
    )
    p.set_defaults(func=cmd_checkpoint)


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """``checkpoint``: one round per ladder (or a loop); exit 1 if a round failed."""
    from stream_rater.checkpoints import KafkaSink
    from stream_rater.service.checkpointing import checkpoint_rounds

    settings = settings_of(args)
    require(settings, "broker")
    if args.interval <= 0:
        raise ValueError(f"--interval: must be > 0, got {args.interval}")
    if settings.checkpoint_every_matches <= 0:
        raise ValueError(f"--checkpoint-every-matches: must be > 0, got {settings.checkpoint_every_matches}")
    ladders = configured_ladders(args)
    for name in args.ladder:
        ladders.get(name)
    store_url(args)

    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr=settings.web_host)

    async def run(store: StateStore) -> int:
        names = args.ladder or [n for n in await store.ladders() if "~" not in n]
        async with KafkaSink(settings) as sink:
            return await checkpoint_rounds(
                settings,
                ladders,
                store,
                sink,
                names,
                force=args.force,
                every=args.interval if args.loop else None,
                report=lambda r: print(r.line(), flush=True),
            )

    try:
        failed = with_store(args, run)
    except KeyboardInterrupt:
        return 0
    return 1 if failed else 0
