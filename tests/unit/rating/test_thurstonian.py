"""Kerby's Thurstonian model (§3.3) and the log-space integration of Gaussian orders it rests on
(stream_rater.rating._latent)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from stream_rater.rating._latent import first_place_probabilities, gaussian_order_loglik_gradient
from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.elo import Elo
from stream_rater.rating.thurstonian import Thurstonian
from tests.unit.rating.ratings import deltas, solo

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
