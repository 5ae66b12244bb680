"""Rating-engine micro-benchmark: microseconds per ``rate()`` call, ours vs reference packages.

Times our `TrueSkill` against the ``trueskill`` package and openskill's ``PlackettLuce`` on
the same match shapes in one run (best of ``repeat`` timeit rounds of CPU time, each long
enough to be measurable), and prints a table with the ratios ``trueskill / ours`` and
``openskill / ours`` plus our 1v1 updates per second. Then our Glicko-1 and Glicko-2 on a
1-vs-1 (both players updated, one rating period) beside the ``glicko2`` package doing the same
(two players made from the stored values and updated, the way a per-game ladder uses it).
Missing reference packages (the ``bench`` extra) are reported and skipped.
"""

from __future__ import annotations

import importlib
import sys
import time
import timeit
from collections.abc import Callable
from functools import partial
from typing import Any, TextIO

from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.glicko import Glicko, Glicko2
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


def _glicko_rows(repeat: int, out: TextIO) -> list[dict[str, Any]]:
    """Our Glicko-1 and Glicko-2 1-vs-1 updates, and the ``glicko2`` package's; print them."""
    a, b = Rating(1620.0, 80.0, 0.06), Rating(1500.0, 150.0, 0.059)
    outcome = Outcome(ranks=[0, 1])
    rows: list[dict[str, Any]] = []
    models: list[Glicko | Glicko2] = [Glicko(), Glicko2()]
    for model in models:
        rows.append(
            {
                "shape": f"{model.name} 1v1",
                "ours_us": _best_us(partial(model.rate_match, [[a], [b]], outcome), repeat),
            }
        )
    try:
        package = importlib.import_module("glicko2")  # untyped: imported as a module object
    except ImportError:
        print("glicko2 is not installed (pip install 'stream_rater[bench]'): skipped", file=out)
        theirs = None
    else:

        def their_duel() -> None:
            first = package.Player(a.mu, a.sigma, a.extra)
            second = package.Player(b.mu, b.sigma, b.extra)
            first.update_player([b.mu], [b.sigma], [1.0])
            second.update_player([a.mu], [a.sigma], [0.0])

        theirs = _best_us(their_duel, repeat)
    for row in rows:
        row["glicko2_us"] = theirs if row["shape"] == "glicko2 1v1" else None
        row["glicko2_ratio"] = None if row["glicko2_us"] is None else row["glicko2_us"] / row["ours_us"]
    print(f"{'model':12}{'ours µs':>12}{'glicko2 µs':>14}{'glicko2/ours':>15}", file=out)
    for row in rows:
        their_us = "" if row["glicko2_us"] is None else f"{row['glicko2_us']:.1f}"
        ratio = "" if row["glicko2_ratio"] is None else f"{row['glicko2_ratio']:.1f}x"
        print(f"{row['shape']:12}{row['ours_us']:12.1f}{their_us:>14}{ratio:>15}", file=out)
    return rows


def run(repeat: int = 5, out: TextIO = sys.stdout) -> list[dict[str, Any]]:
    """Time every shape for every available engine; print the tables; return their rows.

    Each TrueSkill row: ``shape``, ``ours_us``, ``trueskill_us``, ``openskill_us`` (None when
    that package is not installed) and the ratios ``trueskill_ratio``, ``openskill_ratio``
    (their time / ours). Then the Glicko rows (``shape`` "glicko 1v1" / "glicko2 1v1"):
    ``ours_us``, ``glicko2_us`` and ``glicko2_ratio`` (the package's, Glicko-2 only).
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
    return rows + _glicko_rows(repeat, out)
