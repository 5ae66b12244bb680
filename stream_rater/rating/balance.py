"""The fairest split of a pool of players into teams (`balance`): every split scored at once
where there are few enough, else a local search from a snake draft. The split's quality is
`predict`'s (`rating.predict`); numpy scores many splits at once, which is why this module is
apart from `predict`, whose questions the worker asks of every match without numpy.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_rater.rating._splits import labelled_splits
from stream_rater.rating._splits import splits as _splits
from stream_rater.rating._trueskill_quality import quality_of_terms
from stream_rater.rating.base import Rating, RatingModel
from stream_rater.rating.predict import predict

#: Largest number of labelled splits (`labelled_splits`) `balance` searches exhaustively.
EXHAUSTIVE_SPLITS = 50_000
#: Most team scores (splits × teams) `balance` asks of `predict` one split at a time (a model
#: whose quality `_split_scores` does not compute for many splits at once, some 10 µs each):
#: the exhaustive search of such a model stops there, and a local search whose rounds would
#: pass it is refused (`SlowBalance`) rather than holding the server for seconds.
PER_SPLIT_WORK = 20_000


class SlowBalance(ValueError):
    """A balance too slow to search with its model (see `PER_SPLIT_WORK`)."""


@dataclass(frozen=True, slots=True)
class Balance:
    """The fairest split found: indices into the pool per team, its quality, how long the
    search took, whether it was exhaustive and how it searched (`search`, for the answer)."""

    teams: list[list[int]]
    quality: float
    seconds: float
    exhaustive: bool
    search: str = ""


def balance(
    model: RatingModel,
    pool: Sequence[Rating],
    team_sizes: Sequence[int],
    budget: float = 0.5,
    *,
    parties: Sequence[Sequence[int]] = (),
    party_effect: Callable[[int], Rating] | None = None,
) -> Balance:
    """The split of `pool` into teams of `team_sizes` with the highest `predict` quality.

    Exhaustive when there are at most `EXHAUSTIVE_SPLITS` labelled splits (10 players into
    5 v 5: 252; teams of equal size are interchangeable, so each split is scored once): every
    split is scored at once (`_split_scores`: numpy over the splits for TrueSkill). Beyond
    that, a local search: a snake draft by mean rating, then, while it improves the quality
    and `budget` seconds last, the best of every swap of two players between two teams (all
    swaps of a round scored at once). `search` says which in words.

    `parties` (pool indices that queued together) stay on one team; with `party_effect`, each
    team's distinct party sizes n >= 2 add the rating ``party_effect(n)`` as a member, as the
    ladder's ``party_effects`` rule does when it rates. The local search then drafts the
    parties first (largest first, into the team with the most room) and swaps only their
    members' places with no one.
    """
    if len(team_sizes) < 2 or any(size < 1 for size in team_sizes):
        raise ValueError("team_sizes: at least two teams of at least one player")
    if sum(team_sizes) != len(pool):
        raise ValueError(f"team_sizes add up to {sum(team_sizes)}, the pool has {len(pool)} players")
    if parties and max(len(p) for p in parties) > max(team_sizes):
        raise ValueError(f"parties: a party of {max(len(p) for p in parties)} fits in no team")
    started = time.perf_counter()
    sizes = tuple(team_sizes)
    labelled = labelled_splits(sizes)
    at_once = _scored_at_once(model, pool)
    if labelled <= EXHAUSTIVE_SPLITS and (at_once or labelled * len(sizes) <= PER_SPLIT_WORK):
        table = _split_table(sizes)
        scores = _split_scores(model, pool, len(sizes), table, parties, party_effect)
        best = int(np.argmax(scores))
        if scores[best] < 0.0:
            raise ValueError("parties: they fit in no split of team_sizes")
        search = f"exhaustive: every one of the {len(table):,} splits"
        seconds = time.perf_counter() - started
        return Balance(_teams_of(table[best], len(sizes)), float(scores[best]), seconds, True, search)
    swaps = (len(pool) ** 2 - sum(size * size for size in sizes)) // 2
    if not at_once and swaps * len(sizes) > PER_SPLIT_WORK:
        raise SlowBalance(
            f"balance: {len(pool)} players into {len(sizes)} teams is too slow to search with the "
            f"{model.name} model ({swaps:,} splits of {len(sizes)} teams scored one by one per round, "
            f"at most {PER_SPLIT_WORK:,} team scores): ask for fewer players or teams"
        )
    return _local_search(model, pool, sizes, budget, parties, party_effect, started)


def _local_search(
    model: RatingModel,
    pool: Sequence[Rating],
    sizes: tuple[int, ...],
    budget: float,
    parties: Sequence[Sequence[int]],
    party_effect: Callable[[int], Rating] | None,
    started: float,
) -> Balance:
    """`balance` beyond the exhaustive limit: the snake draft, then rounds of the best swap."""
    assignment = np.empty(len(pool), dtype=np.intp)
    for team, members in enumerate(_snake_draft(pool, sizes, parties)):
        assignment[members] = team
    quality = float(_split_scores(model, pool, len(sizes), assignment[None, :], parties, party_effect)[0])
    rounds, optimum = 0, False
    while time.perf_counter() - started < budget:
        swaps = _swaps(assignment, {i for party in parties for i in party})
        scores = _split_scores(model, pool, len(sizes), swaps, parties, party_effect) if len(swaps) else swaps
        best = int(np.argmax(scores)) if len(swaps) else 0
        if not len(swaps) or not scores[best] > quality + 1e-12:
            optimum = True
            break
        assignment, quality, rounds = swaps[best], float(scores[best]), rounds + 1
    search = (
        f"local search: {labelled_splits(sizes):,} labelled splits, more than searched exhaustively; "
        f"a snake draft improved by {rounds} rounds of the best swap of two players, "
        + ("until no swap improved it" if optimum else f"until the {budget:g} s budget ran out")
    )
    return Balance(_teams_of(assignment, len(sizes)), quality, time.perf_counter() - started, False, search)


def _scored_at_once(model: RatingModel, pool: Sequence[Rating]) -> bool:
    """Whether `_split_scores` scores many splits at once (numpy) rather than one by one:
    TrueSkill's eq. (7), with a σ for every player."""
    return model.gaussian() is not None and all(r.sigma is not None for r in pool)


def _teams_of(assignment: Any, teams: int) -> list[list[int]]:
    """Pool indices per team of a split given as each player's team."""
    return [np.flatnonzero(assignment == t).tolist() for t in range(teams)]


def _swaps(assignment: Any, fixed: set[int]) -> Any:
    """Every split one swap of two players of different teams away from `assignment` (party
    members, `fixed`, never move), one per row."""
    free = [i for i in range(len(assignment)) if i not in fixed]
    pairs = [(i, j) for i, j in itertools.combinations(free, 2) if assignment[i] != assignment[j]]
    if not pairs:
        return np.empty((0, len(assignment)), dtype=np.intp)
    rows = np.repeat(assignment[None, :], len(pairs), axis=0)
    first, second = np.array(pairs).T
    at = np.arange(len(pairs))
    rows[at, first], rows[at, second] = assignment[second], assignment[first]
    return rows


@functools.lru_cache(maxsize=32)
def _split_table(team_sizes: tuple[int, ...]) -> Any:
    """Every split (`_splits`) of players 0..n−1 into teams of `team_sizes`, one row per split
    giving each player's team; made once per shape."""
    splits = list(_splits(list(range(sum(team_sizes))), list(team_sizes)))
    table = np.empty((len(splits), sum(team_sizes)), dtype=np.intp)
    for row, split in zip(table, splits):
        for team, members in enumerate(split):
            row[members] = team
    table.setflags(write=False)
    return table


def _split_scores(
    model: RatingModel,
    pool: Sequence[Rating],
    teams: int,
    table: Any,
    parties: Sequence[Sequence[int]],
    party_effect: Callable[[int], Rating] | None,
) -> Any:
    """`predict`'s quality of each split of `table` (a row per split: each player's team), −1
    where a party is split over teams. TrueSkill's eq. (7) is computed for all the splits at
    once (`quality_of_terms` over arrays); another model's quality asks `predict` per split."""
    whole = np.ones(len(table), dtype=bool)
    for party in parties:
        whole &= (table[:, party] == table[:, party[:1]]).all(axis=1)
    effects = _effect_members(table, teams, parties, party_effect)
    sigmas = [r.sigma for r in pool] + [r.sigma for _, r in effects]
    gaussian = model.gaussian()
    if gaussian is not None and None not in sigmas:
        # only here: _portable needs scipy, importing predict stays light
        from stream_rater.rating._portable import exp, log

        variance = np.square(np.array(sigmas, dtype=float))
        means = _team_sums(table, teams, np.array([r.mu for r in pool]))
        spread = _team_sums(table, teams, variance[: len(pool)])
        count = _team_sums(table, teams, np.ones(len(pool)))
        for (has, rating), effect_variance in zip(effects, variance[len(pool) :]):
            means, spread, count = means + has * rating.mu, spread + has * effect_variance, count + has
        noise = gaussian.beta**2 * count
        columns = [means[:, t] for t in range(teams)], [noise[:, t] for t in range(teams)]
        scores = quality_of_terms(
            *columns, [noise[:, t] + spread[:, t] for t in range(teams)], log, exp, np.minimum
        )
    else:
        scores = np.array(
            [
                _quality_of(model, pool, teams, row, [(h[k], r) for h, r in effects])
                for k, row in enumerate(table)
            ]
        )
    return np.where(whole, scores, -1.0)


def _team_sums(table: Any, teams: int, values: Any) -> Any:
    """Per split (row of `table`) and team, the sum of `values` over the team's players."""
    flat = (np.arange(len(table))[:, None] * teams + table).ravel()
    return np.bincount(flat, weights=np.tile(values, len(table)), minlength=len(table) * teams).reshape(
        -1, teams
    )


def _effect_members(
    table: Any, teams: int, parties: Sequence[Sequence[int]], party_effect: Callable[[int], Rating] | None
) -> list[tuple[Any, Rating]]:
    """Per distinct party size n >= 2 (with `party_effect`): which teams of each split hold a
    party of that size (split × team booleans) and the effect ``party_effect(n)`` they add."""
    if party_effect is None:
        return []
    found = []
    for n in sorted({len(p) for p in parties if len(p) >= 2}):
        has = np.zeros((len(table), teams), dtype=bool)
        for party in (p for p in parties if len(p) == n):
            has |= table[:, party[0]][:, None] == np.arange(teams)[None, :]
        found.append((has, party_effect(n)))
    return found


def _quality_of(
    model: RatingModel, pool: Sequence[Rating], teams: int, row: Any, effects: Sequence[tuple[Any, Rating]]
) -> float:
    """`predict`'s quality of one split (each player's team in `row`) with the effects its
    teams hold (a team × boolean row and the effect's rating each)."""
    members = [[pool[i] for i in np.flatnonzero(row == t).tolist()] for t in range(teams)]
    for has, rating in effects:
        for t in np.flatnonzero(has).tolist():
            members[t].append(rating)
    return predict(model, members).quality


def _snake_draft(
    pool: Sequence[Rating], team_sizes: Sequence[int], parties: Sequence[Sequence[int]] = ()
) -> list[list[int]]:
    """The `parties` first, each into a team with room (`_pack`; `ValueError` if they fit in no
    split); then the other players by mean rating, best first, dealt 0, 1, …,
    n−1, n−1, …, 0 to teams with room."""
    teams: list[list[int]] = [[] for _ in team_sizes]
    ordered = sorted(parties, key=len, reverse=True)
    placement = _pack([len(p) for p in ordered], list(team_sizes))
    if placement is None:
        raise ValueError("parties: they fit in no split of team_sizes")
    for party, team in zip(ordered, placement):
        teams[team].extend(party)
    placed = {i for party in parties for i in party}
    order = sorted((i for i in range(len(pool)) if i not in placed), key=lambda i: -pool[i].mu)
    turn = itertools.cycle(list(range(len(team_sizes))) + list(reversed(range(len(team_sizes)))))
    for player in order:
        team = next(t for t in turn if len(teams[t]) < team_sizes[t])
        teams[team].append(player)
    return teams


def _pack(sizes: list[int], room: list[int]) -> list[int] | None:
    """A team for each party of `sizes` (largest first) within the teams' `room`, or None when
    there is none: a depth-first search that tries each distinct room left once per party."""
    if not sizes:
        return []
    tried = set()
    for team, left in enumerate(room):
        if left < sizes[0] or left in tried:
            continue
        tried.add(left)
        room[team] -= sizes[0]
        rest = _pack(sizes[1:], room)
        room[team] += sizes[0]
        if rest is not None:
            return [team, *rest]
    return None
