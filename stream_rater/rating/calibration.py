"""Calibration of predicted probabilities: a fitted monotone map applied to a model's raw win
and draw probabilities, so that "70 %" happens about 70 % of the time. Pure: numbers in,
numbers out.

**The map.** Two teams' raw probabilities ``p₀`` (first team wins) and ``p₁`` (second wins)
are read as an ordered-logit model: with ``u = logit p₀`` and ``v = logit p₁``,

- ``x = (u − v) / 2`` is the strength gap (in logits), and
- ``w = −(u + v) / 2 ≥ 0`` the half-width of the draw band (0 for a model without draws),

so that ``p₀ = σ(x − w)`` and ``p₁ = σ(−x − w)``. The calibration maps them,
``x' = a·x + b`` and ``w' = e·w``, and answers ``σ(x' − w')``, ``σ(−x' − w')`` and the draw
``1 − p₀' − p₁'`` (never negative, since ``w' ≥ 0``). Each outcome's probability moves
monotonically with the gap, and with ``a = 1, b = 0, e = 1`` nothing changes. For a model
without draws (the Elo family, Glicko) ``w = 0`` and the draw stays 0: the map is Platt
scaling of ``p₀``, ``σ(a·logit p₀ + b)``.

**The ladder parameter** ``calibration`` (`Calibration.parse`) is one or two terms:

- ``"temperature:T"`` — temperature scaling of the gap, ``a = 1/T``, ``b = 0``;
- ``"platt:a,b"`` — Platt scaling of the gap; ``b`` shifts the odds towards the first-listed
  team (the home side of the football data);
- ``"draw:e"`` — the draw band scaled by ``e`` (``e > 1``: more draws), alone or after one of
  the above (``"temperature:1.1 draw:1.3"``). Without it the band is the model's (``e = 1``).

**More than two teams**: the first-place probabilities are tempered, ``pᵢ' ∝ pᵢ^a``, which for
two teams without draws is the same ``a``; ``b`` and ``e`` are not applied (no first-listed
side, no draw among many).

`fit` finds the map by maximum likelihood (scipy) of the observed outcomes (wins, losses and,
for a model that predicts draws, draws) given the raw probabilities. Isotonic regression of the
win probability was measured too (stream_rater/bench/README.md "Accuracy") and did not pay on
held-out data, so it is not offered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: What `fit` may fit: the gap's map (with the draw band, for a model that predicts draws), or the band alone.
KINDS = ("temperature", "platt", "draw")
#: Raw probabilities are clipped to [ε, 1 − ε] before the logit, so 0 and 1 stay finite.
_EPS = 1e-12
_FORMS = "expected 'temperature:T', 'platt:a,b' and/or 'draw:e' (T, a, e > 0)"


@dataclass(frozen=True, slots=True)
class Calibration:
    """``x' = slope·x + intercept``, ``w' = draw·w`` (module docstring); `kind` says how the
    gap's map is written: ``temperature`` (no intercept), ``platt``, or ``draw`` (none)."""

    kind: str
    slope: float = 1.0
    intercept: float = 0.0
    draw: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"calibration kind {self.kind!r}: use one of {', '.join(KINDS)}")
        numbers = (self.slope, self.intercept, self.draw)
        if not (all(math.isfinite(v) for v in numbers) and self.slope > 0 and self.draw > 0):
            raise ValueError("calibration: the slope and the draw scale must be finite and > 0")
        if (self.kind != "platt" and self.intercept != 0.0) or (self.kind == "draw" and self.slope != 1.0):
            raise ValueError(
                f"calibration: a {self.kind} map has no {'slope or ' * (self.kind == 'draw')}intercept"
            )

    @classmethod
    def parse(cls, text: str) -> Calibration:
        """The parameter text (module docstring); ValueError saying the forms."""
        terms: dict[str, list[float]] = {}
        for term in str(text).split():
            kind, _, args = term.partition(":")
            try:
                terms[kind] = [] if kind in terms else [float(v) for v in args.split(",")]
            except ValueError:
                terms[kind] = []
        draw = terms.pop("draw", None)
        kind = next(iter(terms), "draw")
        values = terms.get(kind, [])
        shapes = {"temperature": 1, "platt": 2, "draw": 0}
        shaped = kind in shapes and len(values) == shapes[kind] and (draw is None or len(draw) == 1)
        if not shaped or len(terms) > 1 or (kind == "draw" and draw is None):
            raise ValueError(f"calibration {text!r}: {_FORMS}")
        scale = 1.0 if draw is None else draw[0]
        try:
            if kind == "temperature":
                return cls(kind, 1.0 / values[0] if values[0] > 0 else math.nan, 0.0, scale)
            if kind == "platt":
                return cls(kind, values[0], values[1], scale)
            return cls(kind, draw=scale)
        except ValueError:
            raise ValueError(f"calibration {text!r}: {_FORMS}") from None

    def __str__(self) -> str:
        """The parameter text `parse` reads back (4 significant digits: what `fit` gives)."""
        gap = {
            "temperature": f"temperature:{1.0 / self.slope:.4g}",
            "platt": f"platt:{self.slope:.4g},{self.intercept:.4g}",
            "draw": "",
        }[self.kind]
        band = f"draw:{self.draw:.4g}" if self.draw != 1.0 or self.kind == "draw" else ""
        return " ".join(t for t in (gap, band) if t)

    def rounded(self) -> Calibration:
        """The map its text (`str`) describes."""
        return Calibration.parse(str(self))

    def apply(self, wins: Sequence[float], draw: float | None) -> tuple[list[float], float | None]:
        """The calibrated win probabilities and draw probability of raw `wins` and `draw`."""
        if len(wins) != 2:
            logs = [self.slope * math.log(max(p, _EPS)) for p in wins]
            top = max(logs)
            weights = [math.exp(x - top) for x in logs]
            total = math.fsum(weights)
            return [w / total for w in weights], draw
        if not draw:
            p = _sigmoid(self.slope * _logit(wins[0] / (wins[0] + wins[1])) + self.intercept)
            return [p, 1.0 - p], draw
        u, v = _logit(wins[0]), _logit(wins[1])
        gap = self.slope * (u - v) / 2.0 + self.intercept
        band = self.draw * max(0.0, -(u + v) / 2.0)
        first, second = _sigmoid(gap - band), _sigmoid(-gap - band)
        return [first, second], max(0.0, 1.0 - first - second)


def fit(
    raw: Sequence[tuple[float, float]], outcomes: Sequence[int], kind: str = "temperature", *, draws: bool
) -> Calibration:
    """The `kind` map that maximises the likelihood of `outcomes` (0: the first team won, 1:
    the second, 2: a draw) given the raw ``(p₀, p₁)`` of each pair. With `draws` (the model
    predicts them; its draws are among the outcomes) the draw band is fitted too, else it is
    left as it is and draws must not be given. ValueError when there is nothing to fit."""
    import numpy as np
    from scipy.optimize import minimize

    if kind not in KINDS:
        raise ValueError(f"calibration kind {kind!r}: use one of {', '.join(KINDS)}")
    if kind == "draw" and not draws:
        raise ValueError("calibration: the model predicts no draws, so there is no draw band to fit")
    seen = np.asarray(outcomes, dtype=int)
    if len(raw) != len(seen) or not len(seen) or not ({0, 1} <= set(seen.tolist())):
        raise ValueError("calibration: needs as many outcomes as predictions, wins of both teams among them")
    if not draws and (seen == 2).any():
        raise ValueError("calibration: draws given for a model that predicts none")
    p = np.clip(np.asarray(raw, dtype=float), _EPS, 1.0 - _EPS)
    u, v = np.log(p[:, 0] / (1 - p[:, 0])), np.log(p[:, 1] / (1 - p[:, 1]))
    gap, band = (u - v) / 2.0, np.maximum(0.0, -(u + v) / 2.0) if draws else 0.0 * u
    free = {"temperature": [0], "platt": [0, 1], "draw": []}[kind] + ([2] if draws else [])

    def unpack(theta: np.ndarray) -> np.ndarray:
        full = np.zeros(3)  # log slope, intercept, log draw scale
        full[free] = theta
        return full

    def loss(theta: np.ndarray) -> float:
        log_slope, intercept, log_draw = unpack(theta)
        g, w = math.exp(log_slope) * gap + intercept, math.exp(log_draw) * band
        first, second = -np.logaddexp(0.0, -(g - w)), -np.logaddexp(0.0, g + w)  # log σ(g − w), log σ(−g − w)
        rest = np.log(np.clip(1.0 - np.exp(first) - np.exp(second), 1e-300, None))
        return float(-np.choose(seen, [first, second, rest]).sum())

    best = unpack(minimize(loss, np.zeros(len(free)), method="BFGS").x)
    slope, draw_scale = float(np.exp(np.clip(best[0], -7, 7))), float(np.exp(np.clip(best[2], -7, 7)))
    return Calibration(kind, 1.0 if kind == "draw" else slope, float(best[1]), draw_scale)


def _logit(p: float) -> float:
    p = min(max(p, _EPS), 1.0 - _EPS)
    return math.log(p / (1.0 - p))


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)
