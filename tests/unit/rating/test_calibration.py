"""Calibration maps: the fit recovers a known miscalibration from synthetic outcomes (win
logits, Platt's shift and the draw band), the map is the identity at its neutral values and
sums to 1, and its parameter text reads back to the same map."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream_rater.rating.calibration import Calibration, fit


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def synthetic(slope: float, shift: float, band: float, draw_scale: float, n: int = 60_000, seed: int = 3):
    """Raw predictions of an ordered-logit model (gap x ~ N(0, 1.5²), draw half-width `band`)
    whose outcomes happen with gap ``slope·x + shift`` and half-width ``draw_scale·band``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 1.5, n)
    raw = list(zip(sigmoid(x - band), sigmoid(-x - band)))
    first, second = (
        sigmoid(slope * x + shift - draw_scale * band),
        sigmoid(-slope * x - shift - draw_scale * band),
    )
    r = rng.random(n)
    outcomes = np.where(r < first, 0, np.where(r < first + second, 1, 2))
    return raw, list(outcomes)


def test_temperature_fit_recovers_a_known_temperature():
    """No draws; outcomes drawn with p = sigmoid(x / 1.6) while the model says sigmoid(x): T ≈ 1.6."""
    raw, outcomes = synthetic(1 / 1.6, 0.0, 0.0, 1.0)
    fitted = fit(raw, outcomes, "temperature", draws=False)
    assert 1.0 / fitted.slope == pytest.approx(1.6, abs=0.05)
    assert (fitted.intercept, fitted.draw) == (0.0, 1.0)


def test_platt_fit_recovers_a_known_slope_and_shift():
    """No draws; p = sigmoid(0.7 x + 0.25): a ≈ 0.7, b ≈ 0.25; on calibrated outcomes the identity."""
    fitted = fit(*synthetic(0.7, 0.25, 0.0, 1.0), "platt", draws=False)
    assert fitted.slope == pytest.approx(0.7, abs=0.03) and fitted.intercept == pytest.approx(0.25, abs=0.03)
    identity = fit(*synthetic(1.0, 0.0, 0.0, 1.0, seed=5), "platt", draws=False)
    assert identity.slope == pytest.approx(1.0, abs=0.03) and identity.intercept == pytest.approx(
        0.0, abs=0.03
    )


def test_the_draw_band_is_recovered_with_the_temperature_or_alone():
    """A model whose draw band is 1.5 times too narrow and whose gap is 1.25 times too wide:
    ``temperature`` finds T ≈ 1.25 and e ≈ 1.5; ``draw`` finds e alone (gap untouched)."""
    raw, outcomes = synthetic(0.8, 0.0, 0.4, 1.5)
    both = fit(raw, outcomes, "temperature", draws=True)
    assert 1.0 / both.slope == pytest.approx(1.25, abs=0.05) and both.draw == pytest.approx(1.5, abs=0.08)
    raw, outcomes = synthetic(1.0, 0.0, 0.4, 1.5, seed=4)
    alone = fit(raw, outcomes, "draw", draws=True)
    assert alone.slope == 1.0 and alone.draw == pytest.approx(1.5, abs=0.08)


@given(
    st.floats(0.01, 0.98),
    st.floats(0.0, 1.0),
    st.floats(0.2, 3.0),
    st.floats(-1.0, 1.0),
    st.floats(0.3, 3.0),
)
def test_two_teams_map_the_gap_and_the_band_in_logits(p0, share, slope, shift, draw_scale):
    """``apply`` on (p₀, p₁, d): the three sum to 1, the draw is ≥ 0, and the answers are
    ``σ(x' ∓ w')`` of the mapped gap and band."""
    wins = [p0, (1.0 - p0) * share * 0.999]
    draw = 1.0 - sum(wins)
    (a, b), d = Calibration("platt", slope, shift, draw_scale).apply(wins, draw)
    u, v = (math.log(p / (1 - p)) if p > 1e-12 else math.log(1e-12) for p in wins)
    gap, band = slope * (u - v) / 2 + shift, draw_scale * max(0.0, -(u + v) / 2)
    assert a == pytest.approx(1 / (1 + math.exp(-(gap - band))), abs=1e-9)
    assert b == pytest.approx(1 / (1 + math.exp(gap + band)), abs=1e-9)
    assert d >= 0.0 and a + b + d == pytest.approx(1.0, abs=1e-12)


def test_neutral_values_change_nothing_and_a_model_without_draws_keeps_none():
    """``a = 1, b = 0, e = 1`` is the identity; without draws the draw stays 0 and the first
    team's chance is Platt's ``σ(a·logit p + b)``."""
    (a, b), d = Calibration("platt", 1.0, 0.0).apply([0.5, 0.3], 0.2)
    assert (a, b, d) == pytest.approx((0.5, 0.3, 0.2), abs=1e-12)
    (a, b), d = Calibration("platt", 0.5, 0.2).apply([0.8, 0.2], 0.0)
    assert a == pytest.approx(1 / (1 + math.exp(-(0.5 * math.log(4) + 0.2))), abs=1e-12)
    assert (a + b, d) == (1.0, 0.0)


def test_many_teams_are_tempered_and_renormalised():
    """First-place probabilities of three teams become ``pᵢ^a / Σ pⱼ^a`` (no shift, no band)."""
    wins, draw = Calibration("platt", 0.5, 3.0, 2.0).apply([0.6, 0.3, 0.1], None)
    roots = [math.sqrt(p) for p in (0.6, 0.3, 0.1)]
    assert wins == pytest.approx([r / sum(roots) for r in roots], abs=1e-12) and draw is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("platt:0.8123,-0.0456", Calibration("platt", 0.8123, -0.0456)),
        ("temperature:1.25", Calibration("temperature", 0.8)),
        ("temperature:1.25 draw:1.31", Calibration("temperature", 0.8, 0.0, 1.31)),
        ("draw:1.353", Calibration("draw", draw=1.353)),
    ],
)
def test_the_parameter_text_reads_back(text, expected):
    """``parse`` and ``str`` are inverse on the text form."""
    assert Calibration.parse(text) == expected
    assert str(Calibration.parse(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "platt:1",
        "platt:a,b",
        "temperature:0",
        "temperature:-1",
        "draw:0",
        "draw:1 draw:2",
        "platt:1,0 temperature:2",
        "isotonic:1",
        "1.2",
    ],
)
def test_bad_parameter_text_is_refused(text):
    """Anything but the documented terms is a ValueError naming the forms."""
    with pytest.raises(ValueError, match="expected 'temperature:T'"):
        Calibration.parse(text)


def test_a_fit_needs_wins_of_both_sides_and_draws_only_where_predicted():
    """Outcomes of one kind have no finite optimum; draws (or a draw fit) for a model without
    draws make no sense: refused."""
    with pytest.raises(ValueError, match="wins of both teams"):
        fit([(0.6, 0.4), (0.7, 0.3)], [0, 0], draws=False)
    with pytest.raises(ValueError, match="predicts none"):
        fit([(0.6, 0.4), (0.7, 0.3), (0.5, 0.5)], [0, 1, 2], draws=False)
    with pytest.raises(ValueError, match="no draw band"):
        fit([(0.6, 0.4), (0.7, 0.3)], [0, 1], "draw", draws=False)
