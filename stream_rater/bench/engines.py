"""Rating-engine micro-benchmark: microseconds per ``rate()`` call, ours vs reference packages.

Times our `TrueSkill` against the ``trueskill`` package and openskill's ``PlackettLuce`` on
the same match shapes in one run (best of ``repeat`` timeit rounds of CPU time, each long
enough to be measurable), and prints a table with the ratios ``trueskill / ours`` and
``openskill / ours`` plus our 1v1 updates per second. Missing reference packages (the
``bench`` extra) are reported and skipped.
"""

from __future__ import annotations

import sys
import time
import timeit
from collections.abc import Callable
from typing import Any, TextIO

from stream_rater.rating.base import Rating
from stream_rater.rating.trueskill import TrueSkill

#: (name, team sizes, ranks): the shapes the issue asks for.
SHAPES: list[tuple[str, list[int], list[int]]] = [
    ("1v1", [1, 1], [0, 1]),
    ("2v2", [2, 2], [0, 1]),
    ("4v4", [4, 4], [0, 1]),
    ("ffa8", [1] * 8, list(range(8))),
    ("3x2 draw", [2, 2, 2], [0, 1, 1]),
]


def _priors(sizes: list[int]) -> list[list[tuple[float, float]]]:
    """Deterministic, varied (mu, sigma) priors for a shape."""
    priors, n = [], 0
    for size in sizes:
        team = []
        for _ in range(size):
            team.append((20.0 + (n * 7 % 11), 3.0 + (n * 5 % 6)))
            n += 1
        priors.append(team)
    return priors


def _best_us(call: Callable[[], Any], repeat: int) -> float:
    """Best-of-`repeat` CPU microseconds per call, each round lasting at least ~0.2 s.

    CPU time of this process (not wall time), so that other work on a shared machine
    inflates the numbers less; all engines are timed the same way.
    """
    timer = timeit.Timer(call, timer=time.process_time)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def _contenders(
    priors: list[list[tuple[float, float]]], ranks: list[int]
) -> dict[str, Callable[[], Any] | None]:
    """One zero-argument rate() call per engine; None when the package is missing."""
    ours = TrueSkill()
    teams = [[Rating(mu, sigma) for mu, sigma in team] for team in priors]
    calls: dict[str, Callable[[], Any] | None] = {"ours": lambda: ours.rate(teams, ranks)}
    try:
        import trueskill
    except ImportError:
        calls["trueskill"] = None
    else:
        env = trueskill.TrueSkill()
        groups = [tuple(env.create_rating(mu, sigma) for mu, sigma in team) for team in priors]
        calls["trueskill"] = lambda: env.rate(groups, ranks)
    try:
        from openskill.models import PlackettLuce
    except ImportError:
        calls["openskill"] = None
    else:
        model = PlackettLuce()
        os_teams = [[model.rating(mu=mu, sigma=sigma) for mu, sigma in team] for team in priors]
        os_ranks = [float(rank) for rank in ranks]
        calls["openskill"] = lambda: model.rate(os_teams, ranks=os_ranks)
    return calls


def run(repeat: int = 5, out: TextIO = sys.stdout) -> list[dict[str, Any]]:
    """Time every shape for every available engine; print the table; return its rows.

    Each row: ``shape``, ``ours_us``, ``trueskill_us``, ``openskill_us`` (None when that
    package is not installed) and the ratios ``trueskill_ratio``, ``openskill_ratio``
    (their time / ours).
    """
    rows: list[dict[str, Any]] = []
    missing: set[str] = set()
    for name, sizes, ranks in SHAPES:
        calls = _contenders(_priors(sizes), ranks)
        row: dict[str, Any] = {"shape": name}
        for engine, call in calls.items():
            if call is None:
                missing.add(engine)
            row[f"{engine}_us"] = None if call is None else _best_us(call, repeat)
        for engine in ("trueskill", "openskill"):
            theirs = row[f"{engine}_us"]
            row[f"{engine}_ratio"] = None if theirs is None else theirs / row["ours_us"]
        rows.append(row)
    for engine in sorted(missing):
        print(f"{engine} is not installed (pip install 'stream_rater[bench]'): skipped", file=out)
    columns = [("ours µs", "ours_us", "{:9.1f}")]
    for engine in ("trueskill", "openskill"):
        if engine not in missing:
            columns += [
                (f"{engine} µs", f"{engine}_us", "{:12.1f}"),
                (f"{engine}/ours", f"{engine}_ratio", "{:14.1f}x"),
            ]
    print(f"{'shape':10}" + "".join(f"{title:>15}" for title, _, _ in columns), file=out)
    for row in rows:
        cells = "".join(f"{fmt.format(row[key]):>15}" for _, key, fmt in columns)
        print(f"{row['shape']:10}{cells}", file=out)
    one = rows[0]["ours_us"]
    print(f"ours 1v1: {1e6 / one:,.0f} updates/s ({one:.2f} µs per update)", file=out)
    return rows
