"""Calibration of predicted probabilities: a fitted monotone map applied to a model's raw win
probabilities, so that "70 %" happens about 70 % of the time. Pure: numbers in, numbers out.

A ladder holds it as the parameter ``calibration`` (text, `Calibration.parse`):

- ``"temperature:T"`` — temperature scaling: ``logit q' = logit q / T`` (T > 1 softens
  over-confident predictions, T < 1 sharpens them);
- ``"platt:a,b"`` — Platt scaling: ``logit q' = a · logit q + b``; ``b`` shifts the odds
  towards the first-listed team (the home side of the football data), so it is fitted only
  where the first-listed position means something.

What is mapped (`Calibration.apply`), the draw kept as the model gives it:

- **Two teams**: ``q = p₀ / (p₀ + p₁)``, the first team's share of the decisive outcomes, is
  mapped to ``q'``; the draw probability ``d`` is kept and the wins become ``(1 − d)·q'`` and
  ``(1 − d)·(1 − q')``, so the three still sum to 1 and "who wins if someone wins" is what is
  calibrated. With ``d = 0`` (the Elo family) this is plain Platt/temperature scaling of ``p₀``.
- **More teams**: the first-place probabilities are tempered, ``pᵢ' ∝ pᵢ^a`` (``a = 1/T``),
  which for two teams is the same logit scaling; the intercept ``b`` is not applied (there is
  no first-listed side among many).

`fit` finds the map by maximum likelihood (scipy) on decisive pairs: raw probabilities in,
who won out. Isotonic regression was measured too (stream_rater/bench/README.md "Accuracy")
and did not pay on held-out data, so it is not offered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

KINDS = ("temperature", "platt")
#: Raw probabilities are clipped to [ε, 1 − ε] before the logit, so 0 and 1 stay finite.
_EPS = 1e-12
#: Fitted slope bounds: a map stays monotone increasing and finite.
_SLOPE = (1e-3, 1e3)


@dataclass(frozen=True, slots=True)
class Calibration:
    """A monotone map of win probabilities: ``logit q' = slope · logit q + intercept``."""

    kind: str
    slope: float
    intercept: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"calibration kind {self.kind!r}: use one of {', '.join(KINDS)}")
        if not (math.isfinite(self.slope) and self.slope > 0 and math.isfinite(self.intercept)):
            raise ValueError("calibration: the slope must be finite and > 0, the intercept finite")
        if self.kind == "temperature" and self.intercept != 0.0:
            raise ValueError("calibration: temperature scaling has no intercept")

    @classmethod
    def parse(cls, text: str) -> Calibration:
        """``temperature:T`` or ``platt:a,b`` (module docstring); ValueError saying what is wrong."""
        kind, _, args = str(text).strip().partition(":")
        try:
            values = [float(v) for v in args.split(",")] if args.strip() else []
        except ValueError:
            values = []
        if kind == "temperature" and len(values) == 1 and values[0] > 0:
            return cls("temperature", 1.0 / values[0])
        if kind == "platt" and len(values) == 2:
            return cls("platt", values[0], values[1])
        raise ValueError(f"calibration {text!r}: expected 'temperature:T' (T > 0) or 'platt:a,b'")

    def __str__(self) -> str:
        """The parameter text `parse` reads back (4 significant digits are what `fit` gives)."""
        if self.kind == "temperature":
            return f"temperature:{1.0 / self.slope:.4g}"
        return f"platt:{self.slope:.4g},{self.intercept:.4g}"

    def rounded(self) -> Calibration:
        """The map its text (`str`) describes."""
        return Calibration.parse(str(self))

    def share(self, q: float) -> float:
        """The calibrated probability of a raw two-way probability `q`."""
        return _sigmoid(self.slope * _logit(q) + self.intercept)

    def apply(self, wins: Sequence[float], draw: float | None) -> list[float]:
        """The calibrated win probabilities of raw `wins` (draw probability `draw` kept)."""
        if len(wins) == 2:
            decisive = wins[0] + wins[1]
            if decisive <= 0.0:
                return list(wins)
            q = self.share(wins[0] / decisive)
            return [decisive * q, decisive * (1.0 - q)]
        logs = [self.slope * math.log(max(p, _EPS)) for p in wins]
        top = max(logs)
        weights = [math.exp(x - top) for x in logs]
        total = math.fsum(weights)
        return [w / total for w in weights]


def fit(raw: Sequence[float], first_won: Sequence[bool], kind: str = "platt") -> Calibration:
    """The `kind` map that maximises the likelihood of `first_won` given the raw two-way
    probabilities `raw` (each P(first team wins | someone wins)); ValueError when there is
    nothing to fit on or only one outcome was seen."""
    import numpy as np
    from scipy.optimize import minimize

    if kind not in KINDS:
        raise ValueError(f"calibration kind {kind!r}: use one of {', '.join(KINDS)}")
    if len(raw) != len(first_won) or not raw:
        raise ValueError("calibration: needs the same positive number of probabilities and outcomes")
    won = np.asarray(first_won, dtype=float)
    if won.min() == won.max():
        raise ValueError("calibration: needs both outcomes among the decisive pairs")
    x = np.clip(np.asarray(raw, dtype=float), _EPS, 1.0 - _EPS)
    x = np.log(x / (1.0 - x))
    sign = 2.0 * won - 1.0  # +1: the first team won

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        slope, intercept = theta[0], theta[1] if kind == "platt" else 0.0
        z = sign * (slope * x + intercept)
        nll = float(np.logaddexp(0.0, -z).sum())
        g = -sign / (1.0 + np.exp(z))  # d nll / d (slope·x + intercept)
        grad = [float((g * x).sum())] + ([float(g.sum())] if kind == "platt" else [])
        return nll, np.asarray(grad)

    start = np.array([1.0, 0.0] if kind == "platt" else [1.0])
    bounds = [_SLOPE] + ([(-50.0, 50.0)] if kind == "platt" else [])
    best = minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds).x
    return Calibration(kind, float(best[0]), float(best[1]) if kind == "platt" else 0.0)


def _logit(p: float) -> float:
    p = min(max(p, _EPS), 1.0 - _EPS)
    return math.log(p / (1.0 - p))


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)
