"""Fixed, seeded processor workloads on the memory store: the cases the instruction budget
counts (`CASES`) and the mix the golden digest covers (`golden_digest`).

``python -m tests.unit.perf.workload CASE [N]`` prints the processor's CPU µs per match of a
replay of `N` matches of `CASE` (best of 5); ``--count CASE N`` runs it once as the budget
test counts it (under callgrind: `tests.unit.perf.callgrind`).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished, parse_match
from stream_rater.offline.replay import replay
from stream_rater.processor import MatchResult, Processor
from stream_rater.store.memory import MemoryStore

#: The processor's clock in every workload: events carry the same ``processed_at``.
CLOCK = 1_700_000_000.0

#: Every rule of `config.rules` (seasons by season-start records), as the ``rules`` case sets them.
RULES = {
    "provisional_games": 5,
    "provisional_sigma": 6.0,
    "leaderboard_min_games": 3,
    "leaderboard_active_days": 30.0,
    "min_duration": 60.0,
    "min_players": 2,
    "season_shrink": 0.8,
    "season_sigma": 1.0,
    "rating_floor": 0.0,
}


def _ladders() -> Ladders:
    shadow = Ladder("rules~elo", "elo", {"k": 24.0, **RULES}, shadow_of="rules")
    return Ladders(
        [
            Ladder("duel", "trueskill"),
            Ladder("teams", "trueskill"),
            Ladder("ffa", "trueskill"),
            Ladder("rules", "trueskill", RULES, shadows=(shadow,)),
        ]
    )


LADDERS = _ladders()


def _ranks(rng: random.Random, teams: int) -> list[int]:
    """Competition ranks of `teams` teams, with an occasional draw of the first two."""
    order = rng.sample(range(teams), teams)
    ranks = [0] * teams
    for place, team in enumerate(order):
        ranks[team] = place
    if rng.random() < 0.1:
        ranks[order[1]] = 0
    return ranks


def team_games(ladder: str, n: int, teams: int, size: int, players: int, seed: int) -> list[dict[str, Any]]:
    """`n` wire matches of `teams` teams of `size` on `ladder`, drawn from `players` players,
    one a minute."""
    rng = random.Random(seed)
    ids = [f"{ladder}-p{i}" for i in range(players)]
    out = []
    for i in range(n):
        chosen = rng.sample(ids, teams * size)
        ranks = _ranks(rng, teams)
        out.append(
            {
                "match_id": f"{ladder}-{i}",
                "ladder": ladder,
                "finished_at": 1_600_000_000 + 60 * i,
                "teams": [
                    {"rank": ranks[t], "players": [{"id": p} for p in chosen[t * size : (t + 1) * size]]}
                    for t in range(teams)
                ],
            }
        )
    return out


def ruled_games(ladder: str, n: int, seed: int) -> list[dict[str, Any]]:
    """`n` records of `ladder` that exercise every rule: 1v1 and 2v2 matches with durations
    (some too short), some unrated, some late, and a season start every 700 records."""
    rng = random.Random(seed)
    games = team_games(ladder, n, 2, 1, 300, seed)
    for i, game in enumerate(games):
        if i % 3 == 1:
            game["teams"] = team_games(ladder, 1, 2, 2, 300, seed + i)[0]["teams"]
        game["duration"] = rng.choice([30, 600, 900, 1200])
        game["finished_at"] = 1_600_000_000 + 3600 * i - (7200 if i % 50 == 7 else 0)
        if i % 40 == 3:
            game["rated"] = False
        if i % 700 == 699:
            games[i] = {
                "kind": "season",
                "match_id": f"{ladder}-s{i}",
                "ladder": ladder,
                "finished_at": game["finished_at"],
            }
    return games


#: The budget's cases: the wire matches of each, given how many.
CASES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "duel": lambda n: team_games("duel", n, 2, 1, 500, 1),
    "teams": lambda n: team_games("teams", n, 2, 4, 400, 2),
    "ffa": lambda n: team_games("ffa", n, 8, 1, 400, 3),
    "rules": lambda n: ruled_games("rules", n, 4),
}


def parsed(events: Iterable[dict[str, Any]], ladders: Ladders = LADDERS) -> list[MatchFinished]:
    """`events` validated: what the processor takes."""
    return [parse_match(e, ladders) for e in events]


@dataclass
class Run:
    """One replay's results, its store and its processor."""

    results: list[MatchResult]
    store: MemoryStore
    skipped: int


def run(matches: list[MatchFinished], ladders: Ladders = LADDERS, batch_size: int = 1000) -> Run:
    """Replay `matches` through a `Processor` on a fresh memory store (fixed clock)."""
    store = MemoryStore()
    results: list[MatchResult] = []
    skips: list[Any] = []
    processor = Processor(ladders, store, clock=lambda: CLOCK)
    asyncio.run(
        replay(matches, processor, batch_size=batch_size, on_result=results.append, on_skip=skips.append)
    )
    return Run(results, store, len(skips))


def cpu_us_per_match(case: str, n: int, repeat: int = 5) -> float:
    """The processor's CPU µs per match of `n` matches of `case` (best of `repeat`)."""
    matches = parsed(CASES[case](n))
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        run(matches)
        best = min(best, time.process_time() - started)
    return best / n * 1e6


def main(argv: list[str]) -> None:
    """The command line of the module docstring."""
    if argv[0] == "--count":
        from tests.unit.perf.callgrind import counted_run

        counted_run(argv[1], int(argv[2]))
        return
    n = int(argv[1]) if len(argv) > 1 else 50_000
    print(f"{argv[0]}: {cpu_us_per_match(argv[0], n):.1f} µs per match (processor CPU, {n} matches)")


if __name__ == "__main__":
    main(sys.argv[1:])
