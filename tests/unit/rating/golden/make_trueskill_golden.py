"""Regenerate ``trueskill_cases.json``: reference answers from the ``trueskill`` PyPI package.

Run from the repository root with the ``bench`` extra installed::

    python tests/unit/rating/golden/make_trueskill_golden.py

The package runs with its scipy backend (its default backend approximates erfc to ~1e-7,
which would swamp a 1e-6 comparison) and a tiny ``min_delta`` so its EP runs to the end of
its fixed 10 iterations. Cases where it raises FloatingPointError are left out. For matches
with tied teams the reference is the package's result averaged (mean and variance) over
every order of each tied block, which is what our symmetric treatment of ties estimates.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import trueskill

OUT = Path(__file__).with_name("trueskill_cases.json")
PARAMS = [
    {},
    {"draw_probability": 0.0},
    {"draw_probability": 0.3, "tau": 0.0},
    {"mu": 1500.0, "sigma": 500.0, "beta": 250.0, "tau": 5.0, "draw_probability": 0.05},
]


def _env(params: dict) -> trueskill.TrueSkill:
    return trueskill.TrueSkill(backend="scipy", **params)


def _rate(env: trueskill.TrueSkill, teams, ranks, weights):
    groups = [tuple(trueskill.Rating(mu, sigma) for mu, sigma in team) for team in teams]
    rated = env.rate(groups, ranks=ranks, weights=weights, min_delta=1e-12)
    return [[[r.mu, r.sigma] for r in team] for team in rated]


def _rate_tied(env: trueskill.TrueSkill, teams, ranks, weights):
    """The package's posteriors averaged over every order of each tied block."""
    by_rank: dict[float, list[int]] = {}
    for j, rank in enumerate(ranks):
        by_rank.setdefault(rank, []).append(j)
    blocks = [by_rank[rank] for rank in sorted(by_rank)]
    sums = [[[0.0, 0.0] for _ in team] for team in teams]
    count = 0
    for arrangement in itertools.product(*map(itertools.permutations, blocks)):
        listing = [j for block in arrangement for j in block]
        rated = _rate(
            env,
            [teams[j] for j in listing],
            [ranks[j] for j in listing],
            None if weights is None else [weights[j] for j in listing],
        )
        for position, j in enumerate(listing):
            for i, (mu, sigma) in enumerate(rated[position]):
                sums[j][i][0] += mu
                sums[j][i][1] += sigma * sigma
        count += 1
    return [[[mu / count, math.sqrt(var / count)] for mu, var in team] for team in sums]


def _case(rng: random.Random, n_teams: int, params: dict, ties: bool) -> dict | None:
    mu0 = params.get("mu", 25.0)
    sigma0 = params.get("sigma", 25.0 / 3.0)
    teams = [
        [
            [round(mu0 + rng.uniform(-2, 2) * sigma0, 4), round(rng.uniform(0.1, 1.0) * sigma0, 4)]
            for _ in range(rng.randint(1, 3))
        ]
        for _ in range(n_teams)
    ]
    if ties:
        ranks = [rng.randint(0, n_teams - 2) for _ in range(n_teams)]
    else:
        ranks = rng.sample(range(n_teams), n_teams)
    weights = None
    if rng.random() < 0.3:
        weights = [[round(rng.uniform(0.2, 1.0), 3) for _ in team] for team in teams]
    env = _env(params)
    try:
        if len(set(ranks)) < len(ranks) and n_teams > 2:
            expected = _rate_tied(env, teams, ranks, weights)
        else:
            expected = _rate(env, teams, ranks, weights)
    except FloatingPointError:
        return None
    return {
        "params": params,
        "teams": teams,
        "ranks": ranks,
        "weights": weights,
        "expected": expected,
        "quality": env.quality(
            [tuple(trueskill.Rating(mu, sigma) for mu, sigma in team) for team in teams],
            weights=weights,
        ),
    }


def main() -> None:
    rng = random.Random(20240806)
    cases: dict[str, list[dict]] = {"two_teams": [], "many_teams": [], "many_teams_tied": []}
    plan = [
        ("two_teams", 2, False),
        ("two_teams", 2, True),
        ("many_teams", 0, False),
        ("many_teams_tied", 0, True),
    ]
    for name, n_teams, ties in plan:
        for params in PARAMS:
            if ties and params.get("draw_probability") == 0.0:
                continue  # the package cannot rate a draw without a draw margin
            made = 0
            while made < 6:
                case = _case(rng, n_teams or rng.randint(3, 5), params, ties)
                if case is not None:
                    cases[name].append(case)
                    made += 1
    OUT.write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
