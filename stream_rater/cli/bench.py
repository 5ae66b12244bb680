"""``bench``: the benchmarks (speed and memory, never timed tests), one subcommand each, named
after its module (``bench leaderboard`` runs `stream_rater.bench.leaderboard`), each with only
its own flags. A module is imported only when its benchmark runs: the peers some of them
compare against are an optional extra."""

from __future__ import annotations

import argparse
from importlib import import_module
from typing import Any

from stream_rater.cli.common import Subcommands, embedded_broker_flag
from stream_rater.local.runtime_options import BROKERS


def _numbers(kind: type) -> Any:
    """An argparse type: a comma-separated list of `kind` (its name is what a usage error
    calls it: "invalid comma-separated float value")."""

    def numbers(value: str) -> list[Any]:
        return [kind(x) for x in value.split(",")]

    numbers.__name__ = f"comma-separated {kind.__name__}"
    return numbers


def register(sub: Subcommands) -> None:
    """Add ``bench`` and its subcommands to the subcommands `sub`."""
    bench = sub.add_parser("bench", help="benchmarks (speed and memory, never timed tests)")
    benches = bench.add_subparsers(dest="what", required=True, metavar="BENCH")
    for add in (_engines, _e2e, _api, _soak, _rerate, _scale, _capacity, _redis, _leaderboard, _chaos):
        add(benches)
    _modes(benches)


def _runs(module: str, *flags: str) -> dict[str, Any]:
    """`set_defaults` of a subcommand that runs `stream_rater.bench.<module>`'s `run` with the
    values of its `flags` (their argparse names, which are `run`'s parameters)."""

    def run(args: argparse.Namespace) -> int:
        import_module(f"stream_rater.bench.{module}").run(**{flag: getattr(args, flag) for flag in flags})
        return 0

    return {"func": run}


def _engines(benches: Subcommands) -> None:
    p = benches.add_parser("engines", help="µs per rate() of every model against peer packages")
    p.add_argument("--repeat", type=int, default=5, help="timing rounds per shape and engine (best is kept)")
    p.set_defaults(**_runs("engines", "repeat"))


def _e2e(benches: Subcommands) -> None:
    p = benches.add_parser("e2e", help="the worker against a faust pass-through: throughput and latency")
    p.add_argument("--matches", type=int, default=30_000, help="matches in the throughput burst (30000)")
    p.add_argument("--latency-seconds", type=float, default=5.0, help="seconds of each steady phase (5)")
    p.add_argument(
        "--players", type=int, default=1000, help="players the matches are drawn from, two a match (1000)"
    )
    p.add_argument(
        "--rates",
        type=_numbers(float),
        default=[100.0, 500.0, 5000.0],
        metavar="N[,N…]",
        help="matches/s of the steady phases, one latency measurement each (100,500,5000)",
    )
    embedded_broker_flag(
        p,
        dest="broker",
        choices=[*BROKERS, "both"],
        default="tansu",
        help="the embedded runtime's broker: Tansu, a local Apache Kafka (needs java and mvn), or both",
    )
    p.set_defaults(func=_run_e2e)


def _run_e2e(args: argparse.Namespace) -> int:
    """``bench e2e``: on each broker asked for."""
    from stream_rater.bench import e2e

    for broker in BROKERS if args.broker == "both" else (args.broker,):
        load = e2e.Load(args.matches, args.latency_seconds, args.rates, args.players)
        e2e.run(load, broker=broker)
    return 0


def _api(benches: Subcommands) -> None:
    p = benches.add_parser("api", help="the read API under load")
    p.add_argument("--rate", type=float, default=2000.0, help="requests/s offered for the latencies (2000)")
    p.add_argument(
        "--saturation", type=float, default=8000.0, help="requests/s offered for the most answered (8000)"
    )
    p.add_argument("--seconds", type=float, default=5.0, help="seconds of load per phase (5)")
    p.add_argument("--only", default="", metavar="TEXT", help="only the queries whose name contains TEXT")
    p.set_defaults(**_runs("api", "rate", "saturation", "seconds", "only"))


def _soak(benches: Subcommands) -> None:
    p = benches.add_parser("soak", help="one worker for minutes: memory and latency over time")
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of sustained load (10)")
    p.add_argument("--rate", type=float, default=2000.0, help="matches/s (2000)")
    p.add_argument("--plot", metavar="FILE.png", help="draw latency and memory over time")
    embedded_broker_flag(
        p, dest="broker", choices=BROKERS, default="tansu", help="the embedded runtime's broker"
    )
    p.set_defaults(**_runs("soak", "minutes", "rate", "plot", "broker"))


def _rerate(benches: Subcommands) -> None:
    p = benches.add_parser(
        "rerate",
        help="void a match of a ladder with a long history 10,000 back (from a checkpoint) and at the "
        "start, and recover it from a store loss with and without a checkpoint; or (--history-matches 0) "
        "void a football match while the worker rates more",
    )
    p.add_argument("--rate", type=float, default=500.0, help="matches/s published during the re-rate (500)")
    p.add_argument(
        "--history-matches",
        type=int,
        default=1_000_000,
        help="matches of the ladder's history (1000000; 0: football)",
    )
    p.add_argument(
        "--back", type=int, default=10_000, help="how far back the recent void is, in matches (10000)"
    )
    p.add_argument(
        "--gap",
        type=int,
        default=1_000,
        help="matches between the checkpoint and the recent voided match: where the cadence left "
        "the last checkpoint before it (1000)",
    )
    p.set_defaults(**_runs("rerate", "rate", "history_matches", "back", "gap"))


def _scale(benches: Subcommands) -> None:
    p = benches.add_parser("scale", help="K ladders over P partitions, 1 → 2 → 4 workers")
    p.add_argument(
        "--ladders",
        type=_numbers(int),
        default=[16],
        metavar="N[,N…]",
        help="ladders the matches spread over, one set of runs per count (16)",
    )
    p.add_argument("--partitions", type=int, default=8, help="partitions of the matches topic (8)")
    p.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2, 4], metavar="N", help="worker counts (1 2 4)"
    )
    p.add_argument("--matches", type=int, default=60_000, help="matches per run (60000)")
    p.add_argument(
        "--redis",
        choices=["single", "cluster", "both"],
        default="both",
        help="a single Redis, the local 3-master Redis Cluster, or both one after the other (both)",
    )
    p.add_argument("--players", type=int, default=None, help="players per ladder (1000)")
    p.add_argument(
        "--total-players",
        type=int,
        default=None,
        metavar="N",
        help="N players in all, split evenly over the ladders (instead of --players per ladder), "
        "so that the ladder counts differ only in how the same players are split",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_run_scale)


def _run_scale(args: argparse.Namespace) -> int:
    """``bench scale``: 1 when a run's states differ from a replay."""
    from stream_rater.bench import scale

    if args.players and args.total_players:
        raise ValueError("--players and --total-players: give one (players per ladder, or in all)")
    runs = scale.run(
        ladders=args.ladders,
        partitions=args.partitions,
        workers=args.workers,
        matches=args.matches,
        stores=scale.STORES if args.redis == "both" else (args.redis,),
        players=args.players or scale.PLAYERS,
        as_json=args.json,
        total_players=args.total_players,
    )
    return 1 if any(r.differences for r in runs) else 0


def _capacity(benches: Subcommands) -> None:
    p = benches.add_parser("capacity", help="Redis and Kafka bytes of a real load, projected")
    p.add_argument("--players", type=int, default=10_000_000, help="players to project for (10000000)")
    p.add_argument(
        "--per-day",
        type=_numbers(float),
        default=[1e6, 20e6],
        metavar="N[,N…]",
        help="matches per day to project for (1000000,20000000)",
    )
    p.add_argument(
        "--load-players", type=int, default=1_000_000, help="players of the measured load (1000000)"
    )
    p.add_argument(
        "--load-matches", type=int, default=10_000_000, help="matches of the measured load (10000000)"
    )
    p.add_argument("--json", dest="as_json", action="store_true", help="print the result as JSON")
    p.set_defaults(**_runs("capacity", "players", "per_day", "load_players", "load_matches", "as_json"))


def _redis(benches: Subcommands) -> None:
    p = benches.add_parser("redis", help="Redis's CPU per match, in the scripts and per command (no Kafka)")
    p.add_argument("--matches", type=int, default=40_000, help="matches applied (40000)")
    p.add_argument("--ladders", type=int, default=1, help="ladders the matches spread over (1)")
    p.add_argument(
        "--shadows", type=int, default=0, help="shadow models per ladder (0; README 'Shadow models')"
    )
    p.add_argument("--players", type=int, default=1000, help="players per ladder, two a match (1000)")
    p.set_defaults(**_runs("redis", "matches", "ladders", "shadows", "players"))


def _leaderboard(benches: Subcommands) -> None:
    p = benches.add_parser(
        "leaderboard", help="rank, around, top-100, player and totals reads of an eligible-only leaderboard"
    )
    p.add_argument("--players", type=int, default=1_000_000, help="players of the ladder (1000000)")
    p.add_argument("--repeat", type=int, default=200, help="timed calls of each read (200)")
    p.add_argument("--json", dest="as_json", action="store_true", help="print the result as JSON")
    p.set_defaults(**_runs("leaderboard", "players", "repeat", "as_json"))


def _modes(benches: Subcommands) -> None:
    p = benches.add_parser(
        "modes",
        help="football by competition class (issue 48): one ladder, one per mode, and modes sharing "
        "what they know; held-out wrong order, log-loss and ECE",
    )
    p.add_argument("--path", help="the football results CSV (default: the shipped one)")
    p.add_argument("--experience", action="store_true", help="also fit the experience effect")
    p.add_argument("--json", dest="as_json", action="store_true", help="print the results as JSON")
    p.set_defaults(**_runs("modes", "path", "experience", "as_json"))


def _chaos(benches: Subcommands) -> None:
    p = benches.add_parser(
        "chaos", help="a seeded nemesis of combined faults, then oracles over the topics and store"
    )
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of faults (10)")
    p.add_argument("--seed", type=int, default=1, help="the seed of the matches and the faults (1)")
    embedded_broker_flag(
        p, dest="broker", choices=BROKERS, default="apache-kafka", help="the embedded runtime's broker"
    )
    p.add_argument("--brokers", type=int, default=3, help="Apache Kafka brokers (3; replication min(3, N))")
    p.add_argument("--workers", type=int, default=2, help="workers (2)")
    p.add_argument("--rate", type=float, default=300.0, help="matches/s (300)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--failure-file",
        metavar="FILE.json",
        help="where a violation writes the seed and the schedule (chaos-failure-seed-S.json)",
    )
    p.set_defaults(func=_run_chaos)


def _run_chaos(args: argparse.Namespace) -> int:
    """``bench chaos``: the nemesis; exit 1 on any violation."""
    from stream_rater.bench import chaos

    if args.workers < 1 or args.brokers < 1:
        raise ValueError("--workers, --brokers: at least 1")
    options = chaos.Options(
        minutes=args.minutes,
        seed=args.seed,
        broker=args.broker,
        brokers=args.brokers,
        workers=args.workers,
        rate=args.rate,
        as_json=args.json,
        failure_file=args.failure_file,
    )
    return 0 if chaos.run(options).passed else 1
