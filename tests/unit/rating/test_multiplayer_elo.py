"""Kerby's multiplayer models: Plackett-Luce (§3.2) and Thurstonian (§3.3), and the
log-space integration they share."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate

from stream_rater.rating._latent import first_place_probabilities, gaussian_order_loglik_gradient
from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.elo import Elo
from stream_rater.rating.plackett_luce import PlackettLuce
from stream_rater.rating.thurstonian import Thurstonian


def solo(*mus: float) -> list[list[Rating]]:
    return [[Rating(m)] for m in mus]


def deltas(model, teams, ranks) -> list[float]:
    result = model.rate_match(teams, Outcome(ranks=ranks))
    return [new[0].mu - old[0].mu for new, old in zip(result, teams)]


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


# --- Thurstonian -------------------------------------------------------------------------


def _pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _log_p_three(loc: list[float]) -> float:
    """log P(X_0 < X_1 < X_2) for unit-variance Gaussians: ∫ f_1(x) P(X_0 < x) P(X_2 > x) dx by quadrature."""
    value = integrate.quad(
        lambda x: _pdf(x - loc[1]) * _cdf(x - loc[0]) * _cdf(loc[2] - x),
        -np.inf,
        np.inf,
        epsabs=0,
        epsrel=1e-12,
    )[0]
    return math.log(value)


def test_thurstonian_loglik_and_gradient_against_quadrature():
    """The log-space grid gives log P(order) and its gradient as nested quadrature and finite differences do."""
    loc = [0.3, -0.5, 1.2]
    log_p, gradient = gaussian_order_loglik_gradient(loc, [1.0, 1.0, 1.0], [[0], [1], [2]])
    assert log_p == pytest.approx(_log_p_three(loc), abs=1e-3)
    eps = 1e-4
    fd = []
    for i in range(3):
        up = [x + (eps if j == i else 0.0) for j, x in enumerate(loc)]
        down = [x - (eps if j == i else 0.0) for j, x in enumerate(loc)]
        fd.append((_log_p_three(up) - _log_p_three(down)) / (2 * eps))
    assert gradient == pytest.approx(fd, abs=1e-4)


def test_thurstonian_update_uses_grid_gradient():
    """For three or more teams the update is η times the centred log-likelihood gradient."""
    model = Thurstonian(eta=1.0, scale=1.0)
    loc = [0.3, -0.5, 1.2]
    _, gradient = gaussian_order_loglik_gradient(loc, [1.0, 1.0, 1.0], [[0], [1], [2]])
    mean = sum(gradient) / 3
    assert deltas(model, solo(*loc), [3, 2, 1]) == pytest.approx([g - mean for g in gradient], abs=1e-12)


def test_thurstonian_two_players_is_gaussian_ml_elo():
    """For two players the Thurstonian update is the maximum-likelihood Gaussian Elo step (Kerby §2.2)."""
    teams = solo(1620.0, 1500.0)
    elo = Elo(k=32.0, kind="gaussian", update="ml")
    for ranks in ([1, 2], [2, 1]):
        assert deltas(Thurstonian(eta=32.0), teams, ranks) == pytest.approx(
            deltas(elo, teams, ranks), abs=1e-12
        )


def test_thurstonian_grid_agrees_with_two_team_closed_form():
    """The grid integration reproduces the two-player closed form, for a win and for a tie."""
    _, g = gaussian_order_loglik_gradient([0.8, 0.0], [1.0, 1.0], [[0], [1]])
    z = -0.8 / math.sqrt(2.0)
    expected = _pdf(z) / _cdf(z) / math.sqrt(2.0)
    assert g == pytest.approx([-expected, expected], rel=1e-5)
    _, g = gaussian_order_loglik_gradient([0.8, 0.0], [1.0, 1.0], [[0, 1]])
    assert g == pytest.approx([-0.4, 0.4], rel=1e-5)


def test_thurstonian_draw_pulls_together():
    """A two-player draw (shared performance, ε → 0) pulls both ratings together by η·Δρ/2."""
    model = Thurstonian(eta=1.0, scale=1.0)
    assert deltas(model, solo(1.0, 0.0), [1, 1]) == pytest.approx([-0.5, 0.5])


def test_thurstonian_all_tied_closed_form_matches_grid():
    """Everybody tied: the closed-form shared-performance posterior equals the grid's."""
    loc = [0.5, -0.25, 1.0, 0.0]
    _, grid = gaussian_order_loglik_gradient(loc, [1.0, 2.0, 1.0, 1.0], [[0, 1, 2, 3]])
    model = Thurstonian(eta=1.0, scale=1.0)
    teams = [[Rating(0.5)], [Rating(-0.25), Rating(0.0)], [Rating(1.0)], [Rating(0.0)]]
    result = model.rate_match(teams, Outcome(ranks=[1, 1, 1, 1]))
    got = [result[0][0].mu - 0.5, result[1][0].mu + 0.25, result[2][0].mu - 1.0, result[3][0].mu]
    mean = sum(grid) / 4
    assert got == pytest.approx([g - mean for g in grid], abs=1e-5)


def test_thurstonian_win_probabilities_against_quadrature():
    """First-place probabilities for three Gaussian teams match direct quadrature of ∫ f_a Π F_b."""
    loc, sd = [0.3, -0.5, 1.2], [1.0, math.sqrt(2.0), 1.0]
    got = first_place_probabilities(loc, sd, "normal")
    for a in range(3):
        expected = integrate.quad(
            lambda x: (
                _pdf((x - loc[a]) / sd[a])  # noqa: B023
                / sd[a]  # noqa: B023
                * math.prod(_cdf((x - loc[b]) / sd[b]) for b in range(3) if b != a)  # noqa: B023
            ),
            -np.inf,
            np.inf,
        )[0]
        assert got[a] == pytest.approx(expected, abs=1e-7)


def test_thurstonian_hundred_players_no_underflow():
    """A 100-player order whose probability is far below 1e-308 still gives a finite, centred update."""
    loc = list(np.linspace(-6.0, 6.0, 100))
    log_p, _ = gaussian_order_loglik_gradient(loc, [1.0] * 100, [[i] for i in range(100)][::-1])
    assert -math.inf < log_p < math.log(1e-308)
    model = Thurstonian(eta=1.0, scale=1.0)
    d = deltas(model, solo(*loc), list(range(100)))  # the weakest wins, the strongest is last
    assert all(math.isfinite(x) for x in d)
    assert d[0] > 0.0 > d[-1] and sum(d) == pytest.approx(0.0, abs=1e-9)
