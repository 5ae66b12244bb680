"""Kerby's multiplayer Plackett-Luce model (§3.2): his formula, its orientations, draws and teams."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.elo import Elo
from stream_rater.rating.plackett_luce import PlackettLuce
from tests.unit.rating.ratings import deltas, solo


def kerby_update(r: list[float], eta: float) -> list[float]:
    """Kerby §3.2's closing formula, literally; r listed from last place to first."""
    n = len(r)
    out = []
    for k in range(n):
        s = sum(math.exp(-r[k]) / sum(math.exp(-r[j]) for j in range(i, n)) for i in range(k + 1))
        out.append(eta * (-1.0 + s))
    return out


# --- Plackett-Luce -----------------------------------------------------------------------


def test_plackett_luce_is_kerby_formula():
    """Kerby §3.2: r_k' = r_k + η(−1 + Σ_{i≤k} e^(−r_k)/Σ_{j≥i} e^(−r_j)), order from last to first."""
    r = [0.3, -0.8, 1.1, 0.0]  # last, third, second, first
    ranks = [4, 3, 2, 1]
    got = deltas(PlackettLuce(eta=2.0, scale=1.0), solo(*r), ranks)
    assert got == pytest.approx(kerby_update(r, 2.0), abs=1e-12)


def test_reversed_is_negated_scale_read_from_the_top():
    """Reversed orientation: Kerby's formula with r → −r and the order read from first place."""
    r = [0.3, -0.8, 1.1, 0.0]
    ranks = [4, 3, 2, 1]
    got = deltas(PlackettLuce(eta=2.0, scale=1.0, reversed=True), solo(*r), ranks)
    expected = [-d for d in kerby_update([-x for x in r[::-1]], 2.0)][::-1]
    assert got == pytest.approx(expected, abs=1e-12)


def test_plackett_luce_two_players_is_logistic_elo():
    """For two players both orientations equal logistic Elo (Kerby §2.1)."""
    teams = solo(1620.0, 1500.0)
    elo = deltas(Elo(k=32.0), teams, [2, 1])
    for rev in (False, True):
        assert deltas(PlackettLuce(eta=32.0, reversed=rev), teams, [2, 1]) == pytest.approx(elo, abs=1e-12)


def test_plackett_luce_bounds():
    """Kerby §3.2: the loser's update lies in (−η, 0] and the winner's in [0, η(n−1)); reversed mirrors it."""
    underdog_wins = solo(0.0, 30.0, 25.0, 20.0, 35.0)
    fwd = deltas(PlackettLuce(eta=1.0, scale=1.0), underdog_wins, [1, 5, 4, 3, 2])
    assert 3.99 < fwd[0] < 4.0 and -1.0 < fwd[1] < -0.99
    favourite_last = solo(0.0, -30.0, -25.0, -20.0, -35.0)
    rev = deltas(PlackettLuce(eta=1.0, scale=1.0, reversed=True), favourite_last, [5, 1, 2, 3, 4])
    assert -4.0 < rev[0] < -3.99 and 0.99 < rev[1] < 1.0


def test_orientations_differ_beyond_two_players():
    """Kerby §3.2: for n > 2 the reversed orientation is a different system, not a negation."""
    teams = solo(0.0, 0.0, 0.0)
    fwd = deltas(PlackettLuce(eta=6.0, scale=1.0), teams, [1, 2, 3])
    rev = deltas(PlackettLuce(eta=6.0, scale=1.0, reversed=True), teams, [1, 2, 3])
    assert fwd == pytest.approx([5.0, -1.0, -4.0])  # winner −1 + 1/3 + 1/2 + 1, last −1 + 1/3
    assert rev == pytest.approx([4.0, 1.0, -5.0])


def test_plackett_luce_draw_is_breslow():
    """A two-player draw (Breslow tie) moves each side by η(1 − 2P(win)); equal players do not move."""
    model = PlackettLuce(eta=1.0, scale=1.0)
    p_win = 1.0 / (1.0 + math.exp(-0.6))
    assert deltas(model, solo(0.6, 0.0), [1, 1]) == pytest.approx([1.0 - 2.0 * p_win, 2.0 * p_win - 1.0])
    assert deltas(model, solo(0.0, 0.0, 0.0), [1, 2, 2]) == pytest.approx([2 / 3, -1 / 3, -1 / 3])


def test_plackett_luce_team_rating_is_sum():
    """A team plays as one entrant whose ρ is the sum of its members' and every member gets its update."""
    model = PlackettLuce(eta=1.0, scale=1.0)
    teams = [[Rating(0.2), Rating(0.5)], [Rating(0.7)], [Rating(-0.1), Rating(0.0)]]
    result = model.rate_match(teams, Outcome(ranks=[3, 1, 2]))
    last, second, first = kerby_update([0.7, -0.1, 0.7], 1.0)  # teams 0, 2, 1
    got = [[new.mu - old.mu for new, old in zip(nt, ot)] for nt, ot in zip(result, teams)]
    assert got[0] == pytest.approx([last, last])
    assert got[1] == pytest.approx([first])
    assert got[2] == pytest.approx([second, second])


def test_plackett_luce_win_probabilities_exact():
    """First-place probabilities: softmax(ρ) reversed; P(longest survival) by inclusion-exclusion in Kerby's orientation."""
    rho = [0.4, -0.3, 1.0, 0.0]
    teams = solo(*rho)
    rev = PlackettLuce(scale=1.0, reversed=True).win_probabilities(teams)
    soft = np.exp(rho) / np.exp(rho).sum()
    assert rev == pytest.approx(list(soft), abs=1e-12)
    lam = [math.exp(-r) for r in rho]
    exact = []
    for a in range(4):
        others = [lam[b] for b in range(4) if b != a]
        exact.append(
            sum(
                (-1) ** len(s) * lam[a] / (lam[a] + sum(s))
                for k in range(4)
                for s in itertools.combinations(others, k)
            )
        )
    fwd = PlackettLuce(scale=1.0).win_probabilities(teams)
    assert fwd == pytest.approx(exact, abs=1e-6)
