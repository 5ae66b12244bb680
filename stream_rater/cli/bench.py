"""``bench``: the benchmarks (speed and memory, never timed tests)."""

from __future__ import annotations

import argparse

from stream_rater.cli.common import Subcommands
from stream_rater.local.runtime import BROKERS


def register(sub: Subcommands) -> None:
    """Add ``bench`` to the subcommands `sub`."""
    p = sub.add_parser("bench", help="benchmarks (speed and memory, never timed tests)")
    p.add_argument(
        "what",
        choices=[
            "engines",
            "e2e",
            "api",
            "soak",
            "rerate",
            "scale",
            "capacity",
            "redis",
            "leaderboard",
            "chaos",
        ],
        help="engines: µs per rate() vs peer packages; e2e: worker vs faust pass-through; "
        "api: the read API under load; soak: one worker for minutes, memory and latency over time; "
        "rerate: void a football match while the worker rates more (re-rate speed, switch block); "
        "scale: K ladders over P partitions, 1 → 2 → 4 workers, single Redis and local cluster; "
        "capacity: Redis and Kafka bytes per state, marker, history entry and record, projected; "
        "redis: Redis's CPU per match, in the scripts and per command they call (no Kafka); "
        "leaderboard: eligibility-filtered top-100 reads and ranks on a ladder of --players players; "
        "chaos: a seeded nemesis of combined faults for --minutes, then oracles over the topics and store",
    )
    p.add_argument(
        "--repeat", type=int, default=5, help="engines: timing rounds per shape and engine (best is kept)"
    )
    p.add_argument(
        "--matches",
        type=int,
        default=None,
        help="e2e: matches in the throughput burst (30000); scale: matches per run (60000); "
        "redis: matches applied (40000)",
    )
    p.add_argument(
        "--ladders",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        metavar="N[,N…]",
        help="scale: ladders the matches spread over, one set of runs per count (16); redis: "
        "ladders the matches spread over (1)",
    )
    p.add_argument("--partitions", type=int, default=8, help="scale: partitions of the matches topic")
    p.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="scale: worker counts to run (default 1 2 4); chaos: workers (2)",
    )
    _chaos_flags(p)
    p.add_argument(
        "--redis",
        choices=["single", "cluster", "both"],
        default="both",
        help="scale: the Redis topology of the embedded runtime: a single Redis, the local "
        "3-master Redis Cluster, or both one after the other (default both)",
    )
    p.add_argument("--json", action="store_true", help="scale, chaos: print the result as JSON")
    p.add_argument(
        "--broker",
        choices=[*BROKERS, "both"],
        default=None,
        help="e2e, soak, chaos: the embedded runtime's broker: Tansu (default; chaos: apache-kafka), a "
        "local Apache Kafka (needs java and mvn), or both one after the other (e2e)",
    )
    p.add_argument("--latency-seconds", type=float, default=5.0, help="e2e: seconds of each steady phase (5)")
    p.add_argument(
        "--rates",
        type=lambda v: [float(x) for x in v.split(",")],
        default=[100.0, 500.0, 5000.0],
        metavar="N[,N…]",
        help="e2e: matches/s of the steady phases, one latency measurement each (100,500,5000)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="api: requests/s per query (1000); "
        "soak: matches/s (2000); rerate: matches/s published during the re-rate (500); chaos: matches/s (300)",
    )
    p.add_argument("--seconds", type=float, default=10.0, help="api: seconds of load per query")
    p.add_argument(
        "--minutes",
        type=float,
        default=10.0,
        help="soak: minutes of sustained load; chaos: minutes of faults",
    )
    p.add_argument("--plot", metavar="FILE.png", help="soak: draw latency and memory over time")
    p.add_argument(
        "--players",
        type=int,
        default=None,
        help="capacity: players to project for (10000000); leaderboard: players per ladder (1000000); "
        "scale: players per ladder (1000)",
    )
    p.add_argument(
        "--total-players",
        type=int,
        default=None,
        metavar="N",
        help="scale: N players in all, split evenly over the ladders (instead of --players per ladder), "
        "so that the ladder counts differ only in how the same players are split",
    )
    p.add_argument(
        "--per-day",
        type=lambda v: [float(x) for x in v.split(",")],
        default=[1e6, 20e6],
        metavar="N[,N…]",
        help="capacity: matches per day to project for (1000000,20000000)",
    )
    p.set_defaults(func=cmd_bench)


def _chaos_flags(p: argparse.ArgumentParser) -> None:
    """The flags only ``bench chaos`` takes."""
    p.add_argument("--seed", type=int, default=1, help="chaos: the seed of the matches and the faults (1)")
    p.add_argument(
        "--brokers", type=int, default=3, help="chaos: Apache Kafka brokers (3; replication min(3, N))"
    )
    p.add_argument(
        "--failure-file",
        metavar="FILE.json",
        help="chaos: where a violation writes the seed and the schedule (chaos-failure-seed-S.json)",
    )


def cmd_bench(args: argparse.Namespace) -> int:
    """``bench``: run a benchmark and print its table."""
    if args.what == "chaos":
        return _chaos(args)
    args.broker = args.broker or "tansu"
    args.workers = args.workers or [1, 2, 4]
    if args.what == "engines":
        from stream_rater.bench import engines

        engines.run(repeat=args.repeat)
    elif args.what == "soak":
        from stream_rater.bench import soak

        if args.broker == "both":
            raise ValueError("--broker both: soak runs on one broker")
        soak.run(minutes=args.minutes, rate=args.rate or 2000.0, plot=args.plot, broker=args.broker)
    elif args.what == "rerate":
        from stream_rater.bench import rerate

        rerate.run(rate=args.rate or 500.0)
    elif args.what == "api":
        from stream_rater.bench import api

        api.run(rate=args.rate or 1000.0, seconds=args.seconds)
    elif args.what == "scale":
        from stream_rater.bench import scale

        stores = scale.STORES if args.redis == "both" else (args.redis,)
        if args.players and args.total_players:
            raise ValueError("--players and --total-players: give one (players per ladder, or in all)")
        runs = scale.run(
            ladders=args.ladders or [16],
            partitions=args.partitions,
            workers=args.workers,
            matches=args.matches or 60_000,
            stores=stores,
            players=args.players or scale.PLAYERS,
            as_json=args.json,
            total_players=args.total_players,
        )
        return 1 if any(r.differences for r in runs) else 0
    elif args.what == "redis":
        from stream_rater.bench import redis_cpu

        redis_cpu.run(matches=args.matches or 40_000, ladders=(args.ladders or [1])[0])
    elif args.what == "leaderboard":
        from stream_rater.bench import eligibility

        eligibility.run(players=args.players or 1_000_000)
    elif args.what == "capacity":
        from stream_rater.bench import capacity

        capacity.run(players=args.players or 10_000_000, per_day=args.per_day)
    else:
        _e2e(args)
    return 0


def _e2e(args: argparse.Namespace) -> None:
    """``bench e2e``: on each broker asked for."""
    from stream_rater.bench import e2e

    for broker in BROKERS if args.broker == "both" else (args.broker,):
        e2e.run(
            matches=args.matches or 30_000,
            latency_seconds=args.latency_seconds,
            rates=args.rates,
            broker=broker,
        )


def _chaos(args: argparse.Namespace) -> int:
    """``bench chaos``: the nemesis; exit 1 on any violation."""
    from stream_rater.bench import chaos

    if args.broker == "both":
        raise ValueError("--broker both: chaos runs on one broker")
    workers = args.workers or [2]
    if len(workers) != 1 or workers[0] < 1 or args.brokers < 1:
        raise ValueError("--workers: chaos takes one count of at least 1 (and --brokers at least 1)")
    options = chaos.Options(
        minutes=args.minutes,
        seed=args.seed,
        broker=args.broker or "apache-kafka",
        brokers=args.brokers,
        workers=workers[0],
        rate=args.rate or 300.0,
        as_json=args.json,
        failure_file=args.failure_file,
    )
    return 0 if chaos.run(options).passed else 1
