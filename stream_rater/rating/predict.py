"""Questions asked of ratings: who wins, how likely a draw is, how fair a match is, and which
split of a pool into teams is fairest. Pure: models and `Rating`s in, numbers out.

- **Win probabilities** are each model's own (`RatingModel.win_probabilities`): the probability
  that a team's performance is the highest.
- **Two TrueSkill teams** (section 4.1 of the paper): performance difference ``d ~ N(Δ, c²)``
  with ``Δ = M₀ − M₁`` and ``c² = Σ (σ² + τ² + β²)`` over both teams, draw margin ``ε``;
  ``P(team 0 wins) = Φ((Δ − ε)/c)``, ``P(team 1 wins) = Φ((−Δ − ε)/c)`` and the draw takes the
  rest, so the three sum to 1. With more teams draws are not predicted (``None``).
- **Elo-family models** (Elo, SPH Elo, Plackett-Luce, Thurstonian, duelling Elo) have no draw
  outcome to predict: a draw is a result they score as half a win. Their draw probability is
  0 for two teams, and the two win probabilities sum to 1.
- **Expected outcome** of a match, per team (`expected`, carried by rating-changed events):
  for two teams the team's win probability and the draw probability, as `predict` gives them;
  for more, the probability of finishing ahead of each other team (`predict` of the pair
  alone, as `evaluate` scores pairs) averaged over the others, and the expected rank
  ``1 + Σ P(another team finishes ahead)`` (1 = first; a draw shares the better rank).
- **Match quality**: TrueSkill's is the paper's eq. (7) (`TrueSkill.quality`). For the other
  models it is the normalised entropy of the first-place distribution,
  ``−Σ p log p / log n`` — 1 when every team is equally likely to win, towards 0 as one
  team becomes certain; for two teams it orders splits as ``1 − |p₀ − p₁|`` does.
- **Calibration**: a model with a `Calibration` (the ladder parameter ``calibration``) has its
  win and draw probabilities mapped through it (`Calibration.apply`: the strength gap and the
  draw band in logits), in `predict` — the one function the read API, ``balance``,
  ``evaluate`` and the quality metrics ask. The quality of the non-TrueSkill models is then the
  evenness of the calibrated probabilities; TrueSkill's eq. (7) does not depend on it.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_rater.rating._gaussian import cdf
from stream_rater.rating._splits import labelled_splits
from stream_rater.rating._splits import splits as _splits
from stream_rater.rating._trueskill_quality import quality_of_terms
from stream_rater.rating.base import GaussianPerformance, Rating, RatingModel, Teams

_MU = operator.attrgetter("mu")

#: Most teams `ranking_probabilities` answers for (24 orders of 4 teams).
MAX_RANKED_TEAMS = 4
#: Samples of the TrueSkill ranking estimate: a standard error below 0.0012 per order.
RANKING_SAMPLES = 200_000

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
class Prediction:
    """What `predict` says of a proposed match, teams in the order given."""

    win_probabilities: list[float]
    draw_probability: float | None
    quality: float


def predict(model: RatingModel, teams: Teams) -> Prediction:
    """Win probabilities, the draw probability (two teams) and the match quality of `teams`,
    the probabilities mapped through the model's `calibration` when it has one."""
    wins, draw = probabilities(model, teams)
    gaussian = model.gaussian()
    if gaussian is None:
        return Prediction(wins, draw, evenness(wins))
    return Prediction(wins, draw, gaussian.quality(teams))


def predict_raw(model: RatingModel, teams: Teams) -> Prediction:
    """`predict` as the model itself gives it, without its calibration (what one is fitted on)."""
    wins, draw = raw_probabilities(model, teams)
    quality = evenness(wins) if (gaussian := model.gaussian()) is None else gaussian.quality(teams)
    return Prediction(wins, draw, quality)


def probabilities(model: RatingModel, teams: Teams) -> tuple[list[float], float | None]:
    """`predict`'s win probabilities and draw probability (calibrated) without the match
    quality (which costs a TrueSkill 1v1 some 11 µs of the 13): what the processor asks of
    every match, for the events' `expected` and the live quality alike."""
    wins, draw = raw_probabilities(model, teams)
    calibration = model.calibration
    return (wins, draw) if calibration is None else calibration.apply(wins, draw)


def raw_probabilities(model: RatingModel, teams: Teams) -> tuple[list[float], float | None]:
    """The model's own win and draw probabilities of `teams`, before any calibration."""
    if len(teams) < 2 or not all(teams):
        raise ValueError("a match needs at least two teams, each with a player")
    gaussian = model.gaussian()
    if gaussian is None:
        return list(model.win_probabilities(teams)), 0.0 if len(teams) == 2 else None
    if len(teams) != 2:
        return gaussian.win_probabilities(teams), None
    delta = math.fsum(r.mu for r in teams[0]) - math.fsum(r.mu for r in teams[1])
    c = math.sqrt(math.fsum(v for row in gaussian.performance_variances(teams) for v in row))
    eps = gaussian.draw_margin(len(teams[0]) + len(teams[1]))
    wins = [cdf((delta - eps) / c), cdf((-delta - eps) / c)]
    return wins, max(0.0, 1.0 - wins[0] - wins[1])


def as_read(model: RatingModel, teams: Teams, elapsed: Sequence[Sequence[float | None]] | None) -> Teams:
    """`teams` as a read at the match's time sees them: each rating `RatingModel.as_of` its
    idle time in `elapsed` (None: no previous match, or no idle time known); `teams` itself
    when nothing changes them (no `elapsed`, or a model whose `as_of` changes no rating)."""
    if elapsed is None or not model.ages:
        return teams
    return [
        [r if gap is None else model.as_of(r, gap) for r, gap in zip(team, gaps)]
        for team, gaps in zip(teams, elapsed)
    ]


#: (team i, team j) with i < j → the pair's `probabilities` asked alone: P(i wins), P(j
#: wins), P(draw) (0 for a model without draws).
Pairs = dict[tuple[int, int], tuple[float, float, float]]


def pairwise(model: RatingModel, teams: Teams) -> Pairs:
    """`probabilities` of every pair of `teams` asked alone (of the match, for two teams):
    what `expected` and `rating.scoring.score_match` both read, computed once per match."""
    gaussian = model.gaussian()
    if gaussian is not None and len(teams) == 2 and len(teams[0]) == 1 == len(teams[1]):
        (a,), (b,) = teams  # a 1v1, the commonest match: `GaussianPerformance.duel_probabilities`
        win_a, win_b, tie = gaussian.duel_probabilities(a, b)
        return {
            (0, 1): (win_a, win_b, tie)
            if gaussian.calibration is None
            else _calibrated(gaussian, win_a, win_b, tie)
        }
    if gaussian is not None and len(teams) >= 2 and all(teams):
        return _trueskill_pairs(gaussian, teams)
    pairs: Pairs = {}
    for i, j in itertools.combinations(range(len(teams)), 2):
        (p_i, p_j), draw = probabilities(model, [teams[i], teams[j]])
        pairs[i, j] = (p_i, p_j, draw or 0.0)
    return pairs


def _trueskill_pairs(model: GaussianPerformance, teams: Teams) -> Pairs:
    """`pairwise` of TrueSkill, each pair as `raw_probabilities` computes it (section 4.1,
    the same operations on the same numbers, so the same bits), each team's mean and
    performance variances computed once instead of once per pair it is in. (`pairwise`
    asks a 1v1 of `GaussianPerformance.duel_probabilities`: the same without the lists.)"""
    variances = model.performance_variances(teams)
    means = [math.fsum(map(_MU, team)) for team in teams]
    pairs: Pairs = {}
    for i, j in ((0, 1),) if len(teams) == 2 else itertools.combinations(range(len(teams)), 2):
        var = math.fsum(variances[i] + variances[j])
        pairs[i, j] = _pair(model, means[i] - means[j], var, len(teams[i]) + len(teams[j]))
    return pairs


def _pair(model: GaussianPerformance, delta: float, var: float, players: int) -> tuple[float, float, float]:
    """P(i wins), P(j wins) and P(draw) of a pair of teams with mean difference `delta`,
    performance variance `var` in all and `players` players (`_trueskill_pairs`)."""
    c, eps = math.sqrt(var), model.draw_margin(players)
    win_i, win_j = cdf((delta - eps) / c), cdf((-delta - eps) / c)
    rest = 1.0 - win_i - win_j
    draw = rest if rest > 0.0 else 0.0  # `max(0.0, rest)` without the call
    if model.calibration is None:  # no list of the wins to make
        return (win_i, win_j, draw)
    return _calibrated(model, win_i, win_j, draw)


def _calibrated(
    model: GaussianPerformance, win_i: float, win_j: float, draw: float
) -> tuple[float, float, float]:
    """A pair's P(i wins), P(j wins) and P(draw) mapped through the model's calibration."""
    assert model.calibration is not None  # (the callers' test)
    (win_i, win_j), calibrated = model.calibration.apply([win_i, win_j], draw)
    return (win_i, win_j, calibrated or 0.0)


def expected(model: RatingModel, teams: Teams, pairs: Pairs | None = None) -> list[dict[str, float]]:
    """Per team, what `predict` expected of it: ``{"win", "draw"}`` for two teams,
    ``{"ahead", "rank"}`` for more (see the module docstring); `pairs`: `pairwise` of
    `teams`, if known."""
    if pairs is None:
        pairs = pairwise(model, teams)
    if len(teams) == 2:
        p_0, p_1, draw = pairs[0, 1]
        return [{"win": p_0, "draw": draw}, {"win": p_1, "draw": draw}]
    n = len(teams)
    ahead = [[0.0] * n for _ in range(n)]  # ahead[i][j]: P(team i finishes ahead of team j)
    for (i, j), (p_i, p_j, _) in pairs.items():
        ahead[i][j], ahead[j][i] = p_i, p_j
    return [
        {"ahead": math.fsum(row) / (n - 1), "rank": 1.0 + math.fsum(column)}
        for row, column in zip(ahead, zip(*ahead))  # column i: P(each team finishes ahead of i)
    ]


def ranking_probabilities(model: RatingModel, teams: Teams, seed: int = 0) -> dict[tuple[int, ...], float]:
    """P(each full strict ranking), best team first, for up to `MAX_RANKED_TEAMS` teams.

    TrueSkill: team performances are sampled (``RANKING_SAMPLES``, seeded, so an answer is
    reproducible) as ``N(M_j, S_j²)`` with ``S_j² = Σ (σ² + τ² + β²)``; draws are not counted.
    Other models: sequential choice, ``Π_k P(team π_k first among π_k…π_n)`` with the model's
    own first-place probabilities — an approximation (the Elo variants define first-place and
    pairwise probabilities, not a distribution over full rankings) whose first-place
    marginals are exactly the model's.
    """
    if not 2 <= len(teams) <= MAX_RANKED_TEAMS:
        raise ValueError(f"ranking probabilities are given for 2 to {MAX_RANKED_TEAMS} teams")
    orders = list(itertools.permutations(range(len(teams))))
    gaussian = model.gaussian()
    if gaussian is not None:
        means = [math.fsum(r.mu for r in team) for team in teams]
        stds = [math.sqrt(math.fsum(row)) for row in gaussian.performance_variances(teams)]
        draws = np.random.default_rng(seed).normal(means, stds, size=(RANKING_SAMPLES, len(teams)))
        ranked = np.argsort(-draws, axis=1)
        codes = (ranked * len(teams) ** np.arange(len(teams))).sum(axis=1)
        counts = np.bincount(codes, minlength=len(teams) ** len(teams))
        base = [len(teams) ** k for k in range(len(teams))]
        return {order: counts[sum(t * b for t, b in zip(order, base))] / RANKING_SAMPLES for order in orders}
    result: dict[tuple[int, ...], float] = {}
    for order in orders:
        p = 1.0
        for k in range(len(order) - 1):
            p *= model.win_probabilities([teams[t] for t in order[k:]])[0]
        result[order] = p
    return result


def evenness(probabilities: Sequence[float]) -> float:
    """Normalised entropy of a distribution over n ≥ 2 outcomes, in [0, 1]."""
    total = math.fsum(probabilities)
    entropy = -math.fsum(p / total * math.log(p / total) for p in probabilities if p > 0)
    return min(1.0, max(0.0, entropy / math.log(len(probabilities))))


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
