"""``stream-rater archive``: write the updates topic into the PostgreSQL archive
(`stream_rater.service.archiver`), or with ``--migrate`` only bring its schema up to date."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from stream_rater.cli.common import (
    KAFKA_SECURITY,
    Subcommands,
    configured_ladders,
    require,
    setting_names,
    settings_flags,
    settings_of,
)
from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import ARCHIVE_GROUP, Settings


def register(sub: Subcommands) -> None:
    """Add ``archive`` to `sub`."""
    p = sub.add_parser(
        "archive",
        help="write every rating-changed event into the PostgreSQL archive (--migrate: schema only)",
        description="Consume the updates topic in its own consumer group and write each event into "
        "PostgreSQL once, and from the matches topic each rated match's placings (validated with "
        "the workers' ladders file); offsets are committed after PostgreSQL committed. Applies the "
        "schema's migrations at start.",
    )
    p.add_argument("--migrate", action="store_true", help="apply the schema migrations and exit")
    p.add_argument(
        "--group", default=ARCHIVE_GROUP, help=f"the archive's consumer group (default {ARCHIVE_GROUP})"
    )
    p.add_argument("--batch-size", type=int, default=2000, help="most records written in one transaction")
    p.add_argument(
        "--metrics-port", type=int, default=0, help="port of the /metrics HTTP server (default 0: none)"
    )
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of the metrics server")
    settings_flags(
        p,
        [
            "archive_url",
            "broker",
            "topic_updates",
            "topic_matches",
            "ladders_file",
            "max_event_bytes",
            "max_clock_skew",
            "session_timeout",
            "log_level",
            *KAFKA_SECURITY,
        ],
    )
    p.set_defaults(func=cmd_archive)


def archive_url(settings: Settings) -> str:
    """The configured archive URL; a usage error naming the flag when it is missing or not PostgreSQL's."""
    require(settings, "archive_url")
    url = settings.archive_url
    if not url.startswith(("postgresql://", "postgres://")):
        raise ValueError(f"{setting_names('archive_url')}: expected a postgresql:// URL, got {url!r}")
    return url


def cmd_archive(args: argparse.Namespace) -> int:
    """``archive``: migrate, then archive until SIGTERM/SIGINT (``--migrate``: migrate and exit)."""
    settings = settings_of(args)
    url = archive_url(settings)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size: must be >= 1, got {args.batch_size}")
    if args.migrate:
        applied = asyncio.run(_migrate_once(url))
        print(f"archive schema: applied {applied}" if applied else "archive schema: up to date")
        return 0
    require(settings, "broker")
    ladders = configured_ladders(args)
    logging.basicConfig(
        level=settings.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr=args.metrics_host)
    asyncio.run(_archive(settings, url, args, ladders))
    return 0


async def _migrate_once(url: str) -> list[int]:
    """Apply the migrations once; an unreachable server is a runtime failure naming the URL."""
    import psycopg

    from stream_rater.archive import migrate
    from stream_rater.archive.reader import one_line, safe_url

    try:
        async with await psycopg.AsyncConnection.connect(url, connect_timeout=5) as conn:
            return await migrate(conn)
    except psycopg.OperationalError as exc:
        raise ConnectionError(
            f"archive {safe_url(url)} ({setting_names('archive_url')}): {one_line(exc)}"
        ) from None


async def _archive(settings: Settings, url: str, args: argparse.Namespace, ladders: Ladders) -> None:
    """Run the archiver until a stop signal."""
    from stream_rater.service.archiver import ArchiveOptions, Archiver

    options = ArchiveOptions(group=args.group, batch_size=args.batch_size)
    archiver = Archiver(settings, url, options, ladders)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, archiver.stop.set)
    await archiver.run()
