"""The stream: run a ``worker`` (or ``dev`` / ``demo`` on the embedded runtime), ``publish``
matches, ``subscribe`` to rating changes, list and redrive the ``dlq``."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from contextlib import ExitStack
from dataclasses import fields

from stream_rater.cli.common import (
    KAFKA_SECURITY,
    Subcommands,
    embedded_broker_flag,
    ladders_of,
    require,
    settings_flags,
    settings_of,
)
from stream_rater.cli.inputs import bad_lines_code, input_flags, valid_matches
from stream_rater.config.settings import Settings, env_name


def register(sub: Subcommands) -> None:
    """Add ``worker``, ``dev``, ``demo``, ``publish``, ``subscribe`` and ``dlq`` to `sub`."""
    _add_worker(sub)
    _add_dev(sub)
    _add_demo(sub)
    _add_publish(sub)
    _add_subscribe(sub)
    _add_dlq(sub)


#: `dev`'s fixed ports, so that the README's tutorial can name them: Kafka's and Redis's usual ones.
DEV_KAFKA_PORT = 9092
DEV_REDIS_PORT = 6379


def _add_worker(sub: Subcommands) -> None:
    """The ``worker`` subcommand: its flags and handler."""
    service = [f.name for f in fields(Settings)]
    p = sub.add_parser("worker", help="run a worker against the configured Kafka and Redis")
    settings_flags(p, service)
    p.set_defaults(func=cmd_worker)


def _add_dev(sub: Subcommands) -> None:
    """The ``dev`` subcommand: its flags and handler."""
    service = [f.name for f in fields(Settings)]
    p = sub.add_parser(
        "dev",
        help="embedded broker + Redis (+ PostgreSQL and the archive with --archive) + a worker in the foreground",
    )
    settings_flags(p, [n for n in service if n not in ("broker", "redis_url", "replication_factor")])
    embedded_broker_flag(
        p,
        dest="local_broker",
        choices=["tansu", "apache-kafka"],
        default="tansu",
        help="the local broker: Tansu (default) or Apache Kafka (needs java and mvn)",
    )
    p.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="N",
        help="with --embedded-broker apache-kafka: KRaft nodes (default 1; 3 gives replication 3)",
    )
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
    p.add_argument(
        "--archive",
        action="store_true",
        help="also a local PostgreSQL and a `stream-rater archive` beside the worker (history and explain beyond Redis)",
    )
    p.add_argument(
        "--kafka-port",
        type=int,
        default=DEV_KAFKA_PORT,
        metavar="P",
        help=f"port of the Tansu broker (default {DEV_KAFKA_PORT}; 0: a free one; Apache Kafka takes free ones)",
    )
    p.add_argument(
        "--redis-port",
        type=int,
        default=DEV_REDIS_PORT,
        metavar="P",
        help=f"port of Redis (default {DEV_REDIS_PORT}; 0: a free one; a Redis Cluster takes free ones)",
    )
    p.set_defaults(func=cmd_dev)


def _add_demo(sub: Subcommands) -> None:
    """The ``demo`` subcommand: its flags and handler."""
    p = sub.add_parser(
        "demo", help="embedded runtime + worker; rate the football data; print the leaderboard"
    )
    p.add_argument(
        "--data", help="football results CSV, may be .gz (default: the copy shipped in the package)"
    )
    p.add_argument("--limit", type=int, help="only the first N matches")
    p.add_argument("--top", type=int, default=15, help="leaderboard rows to print")
    settings_flags(p, ["partitions", "batch_size", "batch_seconds"])
    p.set_defaults(func=cmd_demo)


def _add_publish(sub: Subcommands) -> None:
    """The ``publish`` subcommand: only the flags it uses (none of the rating commands')."""
    p = sub.add_parser(
        "publish",
        help="send match events from files or stdin to the matches topic",
        description="Validate each line as the worker will, and send the valid ones to the matches "
        "topic keyed by ladder. The ladder names are checked against the ladders the worker is "
        f"configured with: give publish the same ladders file (--ladders-file / {env_name('ladders_file')}) "
        "as the worker.",
    )
    input_flags(p, ladder_help="send every match on this ladder (overrides the events')", rating=False)
    p.add_argument("--rate", type=float, help="at most this many events per second")
    settings_flags(p, ["broker", "topic_matches", "partitions", "replication_factor", *KAFKA_SECURITY])
    p.set_defaults(func=cmd_publish)


def _add_subscribe(sub: Subcommands) -> None:
    """The ``subscribe`` subcommand: its flags and handler."""
    p = sub.add_parser("subscribe", help="print rating-changed events as JSON lines")
    p.add_argument("--ladder", help="only this ladder's events")
    p.add_argument("--player", help="only this player's events (needs --ladder)")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest retained event")
    p.add_argument("--count", type=int, help="stop after this many events")
    p.add_argument("--idle-timeout", type=float, help="stop after this many seconds without events")
    settings_flags(p, ["broker", "topic_updates", *KAFKA_SECURITY])
    p.set_defaults(func=cmd_subscribe)


def _add_dlq(sub: Subcommands) -> None:
    """The ``dlq`` subcommand: its flags and handler."""
    p = sub.add_parser(
        "dlq", help="list the dead-letter topic, or redrive dead letters after a fix (exactly once)"
    )
    p.add_argument("action", choices=["list", "redrive"])
    p.add_argument("--reason", help="only dead letters whose reason contains this text")
    p.add_argument("--json", action="store_true", help="list: one JSON object per dead letter")
    p.add_argument("--dry-run", action="store_true", help="redrive: say what would be sent, send nothing")
    settings_flags(p, ["broker", "topic_matches", "topic_dlq", *KAFKA_SECURITY])
    p.set_defaults(func=cmd_dlq)


def cmd_worker(args: argparse.Namespace) -> int:
    """``worker``: consume matches, rate, commit to Redis, emit rating updates."""
    from stream_rater.service.app import run_worker
    from stream_rater.service.auth import check_exposure

    settings = settings_of(args)
    require(settings, "broker", "redis_url")
    check_exposure(settings)
    run_worker(settings, ladders_of(args))
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    """``dev``: the embedded local runtime and a worker, in the foreground until Ctrl-C."""
    from stream_rater.local.runtime import Addresses, ClusterLayout, LocalRuntime
    from stream_rater.service.app import run_worker

    if args.brokers != 1 and args.local_broker != "apache-kafka":
        raise ValueError(f"--brokers {args.brokers} needs --embedded-broker apache-kafka")
    settings = settings_of(args)
    redis = ClusterLayout(3, args.cluster_replicas) if args.redis_cluster else True
    with (
        LocalRuntime(
            topics=settings.topics(),
            topic_configs=settings.topic_configs(),
            broker=args.local_broker,
            brokers=args.brokers,
            redis=redis,
            addresses=Addresses(kafka_port=args.kafka_port, redis_port=args.redis_port),
        ) as runtime,
        ExitStack() as archive,
    ):
        settings = settings.override(
            broker=runtime.broker_url,
            redis_url=runtime.redis_url,
            replication_factor=runtime.replication_factor,
            session_timeout=3.0,
            fetch_max_wait=runtime.fetch_max_wait(settings.fetch_max_wait),
        )
        if args.archive:
            settings = _dev_archive(archive, settings)
        print(
            f"broker   {runtime.broker_url}  ({env_name('broker')})\n"
            f"redis    {runtime.redis_url}  ({env_name('redis_url')})\n"
            f"web      http://{settings.web_host}:{settings.web_port}/\n"
            f"publish: {publish_hint(runtime.broker_url, settings.ladders_file)}",
            file=sys.stderr,
        )
        if runtime.broker_kind == "tansu":
            print(f"clients  {tansu_clients_note()}", file=sys.stderr)
            print(
                f"workers  {env_name('fetch_max_wait')}={settings.fetch_max_wait:g} for any other worker "
                "(Tansu holds a fetch that finds nothing for the whole wait)",
                file=sys.stderr,
            )
        run_worker(settings, ladders_of(args))
    return 0


def _dev_archive(stack: ExitStack, settings: Settings) -> Settings:
    """``dev --archive``: a local PostgreSQL (`stream_rater.local.postgres`) and a ``stream-rater
    archive`` child writing the updates topic into it, both stopped by PID with `stack`; the
    settings with its URL, so that the worker's history and explain read it."""
    import os

    from stream_rater.local.demo import stop_process
    from stream_rater.local.postgres import LocalPostgres
    from stream_rater.local.processes import popen_tied

    url = stack.enter_context(LocalPostgres()).url
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_RATER_")}
    env.update(
        {env_name(n): str(getattr(settings, n)) for n in ("broker", "topic_updates", "session_timeout")}
    )
    env[env_name("archive_url")] = url
    child = popen_tied([sys.executable, "-m", "stream_rater", "archive"], env=env)
    stack.callback(stop_process, child)
    print(
        f"archive  {url}  ({env_name('archive_url')}, stream-rater archive PID {child.pid})", file=sys.stderr
    )
    return settings.override(archive_url=url)


def publish_hint(broker_url: str, ladders_file: str) -> str:
    """The ``publish`` command `dev` suggests: its broker, and its ladders file if it has one
    (publish checks ladder names against the same ladders as the worker)."""
    ladders = f" --ladders-file {shlex.quote(ladders_file)}" if ladders_file else ""
    return f"stream-rater publish --broker {broker_url}{ladders} FILE"


#: The oldest librdkafka that talks to Tansu 0.6 (2.0.2 and 2.1.1 fail; docs: reference/events.md).
TANSU_MIN_LIBRDKAFKA = (2, 2, 0)


def tansu_clients_note() -> str:
    """What `dev` says of the clients Tansu serves: aiokafka, the Java client and librdkafka from
    `TANSU_MIN_LIBRDKAFKA` on (an older one cannot parse Tansu 0.6's ApiVersions answer, whatever
    the client's settings), which flag starts a broker that takes them all, and how long a
    group consumer waits for its partitions (`stream_rater.local.runtime`)."""
    from stream_rater.local.apache_kafka import apache_kafka_missing

    least = ".".join(map(str, TANSU_MIN_LIBRDKAFKA[:2]))
    note = (
        f"Tansu takes aiokafka, Java and librdkafka {least}+ clients (confluent-kafka {least}+ for "
        f"Python, Go or .NET bundles it), not an older one ('ApiVersionRequest failed'; Debian 12's "
        "kcat links 2.0.2, `kcat -V` shows yours); a group consumer gets its partitions after "
        "half its session timeout (librdkafka's and Java's default: 23 s; session.timeout.ms=6000: "
        "3 s); for old librdkafka clients, start `stream-rater dev --embedded-broker apache-kafka`"
    )
    missing = apache_kafka_missing()
    return note if missing is None else f"{note}, which cannot start here: {missing}"


def cmd_demo(args: argparse.Namespace) -> int:
    """``demo``: the README's run command."""
    from pathlib import Path

    from stream_rater.local.demo import default_data_file, run_demo

    data = Path(args.data) if args.data else default_data_file()
    return run_demo(settings_of(args), data, limit=args.limit, top=args.top)


def cmd_publish(args: argparse.Namespace) -> int:
    """``publish``: validate each line, send the good ones keyed by ladder (`contracts.match.match_key`)."""
    from stream_rater.kafka import TopicError, create_service_topics, publish

    settings = settings_of(args)
    require(settings, "broker")
    ladders = ladders_of(args)
    try:  # as the worker would, so that a broker that auto-creates topics never picks the count
        asyncio.run(create_service_topics(settings))
    except TopicError as exc:
        print(f"stream-rater publish: warning: {exc}; publishing anyway", file=sys.stderr)
    with ExitStack() as stack:
        matches, rejected = valid_matches(args, ladders, stack)
        summary = asyncio.run(publish((m.to_dict() for m in matches), settings, rate=args.rate))
    print(f"{summary.line()}; {len(rejected)} bad lines not sent", file=sys.stderr)
    return bad_lines_code(args, rejected)


def cmd_subscribe(args: argparse.Namespace) -> int:
    """``subscribe``: rating-changed events as JSON lines on stdout."""
    from stream_rater.kafka import subscribe

    settings = settings_of(args)
    require(settings, "broker")
    if args.player and not args.ladder:
        raise ValueError("--player needs --ladder")

    def say(what: str) -> None:
        print(f"stream-rater subscribe: {what}", file=sys.stderr, flush=True)

    async def run() -> None:
        seen = 0
        async for event in subscribe(
            settings,
            ladder=args.ladder,
            player=args.player,
            on_bad=lambda where, reason: say(f"skipped the record at {where}: {reason}"),
            on_progress=say,
            from_beginning=args.from_beginning,
            idle_timeout=args.idle_timeout,
        ):
            print(json.dumps(event), flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                return

    asyncio.run(run())
    return 0


def cmd_dlq(args: argparse.Namespace) -> int:
    """``dlq list|redrive``: read the dead letters; re-publish the selected ones once."""
    from stream_rater.offline.dead_letters import dead_letters, redrive

    settings = settings_of(args)
    require(settings, "broker")
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
