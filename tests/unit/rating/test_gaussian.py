"""The truncated-Gaussian corrections V and 1 - W (paper, under eq. 6) across their range."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.integrate import quad

from stream_rater.rating._gaussian import cdf, pdf, ppf, truncate_draw, truncate_win


def window_moments(p: float, width: float) -> tuple[float, float]:
    """Mean offset from p and variance of a unit normal on [p, p + width], by quadrature.

    Integrates the shifted density exp(-p*s - s*s/2) on the part of [0, width] that holds
    all but ~e**-60 of the mass, which is well conditioned wherever the window lies.
    """
    reach = 120.0 / (p + math.sqrt(p * p + 240.0)) if p > 0 else 12.0 - p
    top = min(width, reach)

    def density(s: float) -> float:
        return math.exp(-s * (p + 0.5 * s))

    def integral(f) -> float:
        return quad(f, 0.0, top, epsabs=0.0, epsrel=1e-13, limit=200)[0]

    mass = integral(density)
    mean = integral(lambda s: s * density(s)) / mass
    var = integral(lambda s: (s - mean) ** 2 * density(s)) / mass
    return mean, var


@pytest.mark.parametrize("a", [-6.0, -2.0, 0.0, 1.0, 3.9, 4.1, 8.0, 30.0, 1e3, 1e5, 1e8])
def test_win_matches_quadrature_far_into_the_tail(a: float) -> None:
    """V_win and 1 - W_win agree with quadrature to 1e-10 relative, even at a = 1e8."""
    v, omw = truncate_win(-a, 0.0)
    offset, var = window_moments(a, math.inf)
    assert v == pytest.approx(a + offset, rel=1e-10)
    assert omw == pytest.approx(var, rel=1e-10)


@pytest.mark.parametrize("t", [0.0, 0.1, -0.5, 1.0, 3.0, 4.2, -5.0, 10.0, 100.0, 1e4, 1e6])
@pytest.mark.parametrize("eps", [1e-9, 1e-3, 0.03, 0.06, 0.2, 1.0, 3.0])
def test_draw_matches_quadrature_everywhere(t: float, eps: float) -> None:
    """V_draw and 1 - W_draw agree with quadrature for narrow, wide and far-off windows."""
    v, omw = truncate_draw(t, eps)
    p = abs(t) - eps
    offset, var = window_moments(p, 2.0 * eps)
    expected_v = -math.copysign(p + offset, t)
    assert v == pytest.approx(expected_v, rel=1e-9, abs=1e-15)
    assert omw == pytest.approx(var, rel=1e-9)


@given(st.floats(-50, 50), st.floats(0.0, 5.0))
def test_paper_formulas_hold_where_they_are_well_conditioned(t: float, eps: float) -> None:
    """In the bulk the results equal the paper's V and W formulas computed directly."""
    x = t - eps
    if x > -5:
        v = pdf(x) / cdf(x)
        assert truncate_win(t, eps) == pytest.approx((v, 1 - v * (v + x)), abs=1e-9)
    if eps > 0.1 and abs(t) < 4:
        mass = cdf(eps - t) - cdf(-eps - t)
        v = (pdf(-eps - t) - pdf(eps - t)) / mass
        w = v * v + ((eps - t) * pdf(eps - t) + (eps + t) * pdf(eps + t)) / mass
        assert truncate_draw(t, eps) == pytest.approx((v, 1 - w), abs=1e-9)


@given(st.floats(-1e7, 1e7), st.floats(0.0, 1e3))
def test_results_are_finite_and_variance_factor_in_unit_interval(t: float, eps: float) -> None:
    """For any finite input V is finite and 1 - W lies in [0, 1] (in (0, 1] for a win)."""
    v, omw = truncate_win(t, eps)
    assert math.isfinite(v) and 0.0 < omw <= 1.0
    v, omw = truncate_draw(t, eps)
    assert math.isfinite(v) and 0.0 <= omw <= 1.0


@given(st.floats(-1e6, 1e6), st.floats(1e-6, 50.0))
def test_draw_is_odd_in_v_and_even_in_w(t: float, eps: float) -> None:
    """Swapping the two drawn teams negates V exactly and leaves 1 - W unchanged."""
    v, omw = truncate_draw(t, eps)
    assert truncate_draw(-t, eps) == (-v, omw)


def test_even_match_drawn_moves_nobody() -> None:
    """A draw between exactly equal performances gives V = 0 exactly."""
    assert truncate_draw(0.0, 0.01)[0] == 0.0
    assert truncate_draw(0.0, 0.5)[0] == 0.0


def test_zero_draw_margin_pins_the_difference() -> None:
    """With eps = 0 a draw pins the difference at 0: V = -t and no variance is left."""
    assert truncate_draw(1.5, 0.0) == (-1.5, 0.0)


def test_ppf_inverts_cdf() -> None:
    """ppf is the inverse of cdf (the draw margin depends on it)."""
    for p in (0.05, 0.5, 0.55, 0.999):
        assert cdf(ppf(p)) == pytest.approx(p, rel=1e-12)
