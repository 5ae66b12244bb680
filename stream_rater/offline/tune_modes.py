"""Fit a ladder with modes (issue 48) on the first part of a labelled match history:
the coupling of its modes by a bounded scalar search (scipy) of a prediction metric of the raw
probabilities on the fit part, optionally TrueSkill 2's experience effect, then each mode's
calibration — a per-mode parameter, fitted on the mode's own scored pairs as `tune --calibrate`
fits a ladder's. Reported per part (fit, rest) over all modes and per mode, before (coupling 0,
no calibration) and after. `offline.modes` replays; ``bench modes`` runs the football study.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from stream_rater.config.ladders import Ladder
from stream_rater.offline.evaluate import Summary
from stream_rater.offline.modes import Moded, ModesScore, mode_models, score_modes
from stream_rater.offline.tune import (
    _BACKWARD,
    _FORWARD,
    _STEP,
    DEFAULT_SCORING,
    OBJECTIVES,
    SPACES,
    Scoring,
    Trial,
    _metrics,
    _round,
    _toml,
)
from stream_rater.rating.calibration import Calibration
from stream_rater.rating.calibration import fit as fit_calibration
from stream_rater.rating.scoring import predicts_draws

#: The coupling's search: a bounded scalar search over [0, 1] stopping at this step.
COUPLING_TOLERANCE = 0.002
#: Where `tune_modes` looks for the experience effect (rating units per early game).
EXPERIENCE_RANGE = (-1.0, 2.0)


@dataclass(frozen=True, slots=True)
class ModesTuneResult:
    """What `tune_modes` found: the coupling, each mode's parameters (its overrides and, when
    calibrated, its ``calibration``), and the metrics before (the configured coupling, no new
    calibration) and after, per part (fit, rest) over all modes and per mode."""

    ladder: str
    form: str
    fit_matches: int
    matches: int
    coupling: float
    experience: float
    modes: dict[str, dict[str, Any]]
    trials: list[Trial]
    baseline: ModesScore
    tuned: ModesScore

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the fitted values, and per part the metrics before and after,
        over all modes and per mode."""
        return {
            "ladder": self.ladder,
            "form": self.form,
            "fit_matches": self.fit_matches,
            "matches": self.matches,
            "coupling": self.coupling,
            "experience": self.experience,
            "modes": self.modes,
            "trials": len(self.trials),
            **{
                name: [
                    {"all": _metrics(whole), **{m: _metrics(s) for m, s in modes.items()}}
                    for whole, modes in zip(score.whole, score.modes)
                ]
                for name, score in (("baseline", self.baseline), ("tuned", self.tuned))
            },
        }

    def report(self) -> str:
        """A human-readable table: per part and mode, wrong order, log-loss and ECE before and after."""
        lines = [
            (
                f"{self.form} form: coupling {self.coupling:.4g} after {len(self.trials)} trials, "
                f"fitted on the first {self.fit_matches} of {self.matches} matches"
            ),
            "",
            f"{'part':<6}{'mode':<12}{'matches':>8}" + f"{'wrong order':>24}{'log-loss':>20}{'ECE':>18}",
            f"{'':<26}" + f"{'before':>12}{'after':>12}{'before':>10}{'after':>10}{'before':>9}{'after':>9}",
        ]
        for k, part in enumerate(("fit", "rest")):
            rows = [("all", self.baseline.whole[k], self.tuned.whole[k])]
            rows += [(m, self.baseline.modes[k][m], self.tuned.modes[k][m]) for m in self.tuned.modes[k]]
            for mode, before, after in rows:
                lines.append(f"{part:<6}{mode:<12}{after.matches:>8}" + _cells(before, after))
        if self.experience:
            lines += [
                "",
                f"experience {self.experience:.4g} (offline only: the service has no experience effect)",
            ]
        lines += ["", "ladders file:", *_modes_toml(self.ladder, self.coupling, self.modes)]
        return "\n".join(lines)


def _cells(before: Summary, after: Summary) -> str:
    out = ""
    for name, width, fmt in (("wrong_order", 12, "{:.3%}"), ("log_loss", 10, "{:.4f}"), ("ECE", 9, "{:.4f}")):
        for s in (before, after):
            value = s.expected_calibration_error if name == "ECE" else getattr(s, name)
            out += f"{'n/a' if value is None else fmt.format(value):>{width}}"
    return out


def _modes_toml(ladder: str, coupling: float, modes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The ladders-file lines of a tuned ladder with modes."""
    lines = [f"[ladders.{ladder}]", f"coupling = {coupling}"]
    for mode, params in modes.items():
        lines += ["", f"[ladders.{ladder}.modes.{mode}]", *(f"{k} = {_toml(v)}" for k, v in params.items())]
    return lines


def tune_modes(
    matches: Sequence[Moded],
    ladder: Ladder,
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    coupling: float | None = None,
    form: str = "prior",
    scoring: Scoring = DEFAULT_SCORING,
    calibrate: str | None = "draw",
    experience: float | None = 0.0,
) -> ModesTuneResult:
    """Fit a ladder with modes on the fit part of `matches` (``(mode, match)``, `scoring`'s):
    the coupling (unless given) by a bounded search minimising its objective of the raw
    probabilities, then, with `calibrate`, each mode's calibration of that kind (a per-mode
    parameter, fitted on the mode's own pairs). `experience` None: fit it too, after the
    coupling, over `EXPERIENCE_RANGE`. `ladder` has the model and its parameters,
    `overrides` each mode's own; `form` the sharing (`offline.modes.FORMS`). The baseline is
    the configured parameters with coupling 0 and no experience effect."""
    fit_fraction, objective = scoring.fit_fraction, scoring.objective
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
    fit = round(len(matches) * fit_fraction)
    if not 0 < fit < len(matches):
        raise ValueError(f"fit fraction {fit_fraction} of {len(matches)} matches leaves a part empty")
    names = sorted({mode for mode, _ in matches})
    params = {m: {**(overrides or {}).get(m, {})} for m in names}
    raw = {m: mode_models(ladder, {m: {**p, "calibration": None}})[m] for m, p in params.items()}
    parts = [matches[:fit], matches[fit:]]
    trials: list[Trial] = []

    def objective_at(value: float, experience: float, name: str = "coupling") -> float:
        at = {"coupling": value, "experience": experience}
        summary = score_modes([parts[0]], raw, at["coupling"], form=form, experience=at["experience"]).whole[
            0
        ]
        trials.append(Trial(len(trials) + 1, {name: at[name]}, summary.metric(objective)))
        return trials[-1].value

    if coupling is None:
        coupling = _bounded(lambda c: objective_at(c, experience or 0.0), (0.0, 1.0))
    if experience is None:
        experience = _bounded(lambda e: objective_at(coupling, e, "experience"), EXPERIENCE_RANGE)
    baseline = score_modes(parts, mode_models(ladder, params), 0.0, form=form)
    if calibrate is not None:
        pairs = score_modes([parts[0]], raw, coupling, form=form, keep_raw=True, experience=experience).raw[0]
        for m in names:
            if pairs.get(m):  # a mode not played in the fit part keeps its model's probabilities
                params[m]["calibration"] = str(_fit_pairs(pairs[m], calibrate, predicts_draws(raw[m])))
    tuned = score_modes(parts, mode_models(ladder, params), coupling, form=form, experience=experience)
    return ModesTuneResult(
        ladder.name, form, fit, len(matches), coupling, experience, params, trials, baseline, tuned
    )


def fit_jointly(
    matches: Sequence[Moded],
    ladder: Ladder,
    names: Sequence[str],
    *,
    form: str = "prior",
    coupling: float | None = None,
    scoring: Scoring = DEFAULT_SCORING,
    max_trials: int = 80,
) -> tuple[dict[str, float], float, list[Trial]]:
    """The model parameters `names` of `ladder` and, unless `coupling` is given, the
    coupling, fitted together on the fit part of `matches` (`scoring`'s) by the search
    `offline.tune` uses (Nelder-Mead from the configured values in each parameter's transform,
    the coupling in ``logit`` from 0.9), minimising its objective of the raw probabilities of
    the `form` replay. So every alternative of a study is tuned the same way: one ladder
    (every match in one mode), one per mode (coupling 0) and each form of sharing. Returns the
    parameters, the coupling and the trials (values rounded as `tune` rounds them)."""
    fit, objective = round(len(matches) * scoring.fit_fraction), scoring.objective
    part = [matches[:fit]]
    modes = sorted({mode for mode, _ in matches})
    space = SPACES[ladder.model]
    transforms = [space[n] for n in names] + ([] if coupling is not None else ["logit"])
    keys = [*names, *([] if coupling is not None else ["coupling"])]
    start = {n: float(ladder.params[n]) for n in names} | ({} if coupling is not None else {"coupling": 0.9})
    trials: list[Trial] = []

    def decode(x: np.ndarray) -> dict[str, float]:
        return {k: _BACKWARD[t](float(v)) for k, t, v in zip(keys, transforms, np.clip(x, -50.0, 50.0))}

    def evaluate(x: np.ndarray) -> float:
        values = decode(x)
        params = {k: v for k, v in values.items() if k != "coupling"}
        try:
            models = mode_models(
                Ladder(ladder.name, ladder.model, {**ladder.params, **params}),
                {key: {"calibration": None} for key in modes},
            )
        except ValueError:
            return float("inf")
        at = values.get("coupling", coupling)
        assert at is not None
        value = score_modes(part, models, at, form=form).whole[0].metric(objective)
        trials.append(Trial(len(trials) + 1, values, value))
        return value

    x0 = np.array([_FORWARD[t](start[k]) for k, t in zip(keys, transforms)])
    simplex = np.vstack([x0] + [x0 + _STEP * row for row in np.eye(len(keys))])
    options = {"maxfev": max_trials, "initial_simplex": simplex, "xatol": 0.01, "fatol": 1e-5}
    minimize(evaluate, x0, method="Nelder-Mead", options=options)
    best = {k: _round(v) for k, v in min(trials, key=lambda t: t.value).params.items()}
    found = best.pop("coupling", coupling)
    assert found is not None
    return best, min(1.0, found), trials


def _bounded(objective: Callable[[float], float], bounds: tuple[float, float]) -> float:
    """The minimum of a scalar `objective` over `bounds` (scipy's bounded search), rounded."""
    found = minimize_scalar(objective, bounds=bounds, method="bounded", options={"xatol": COUPLING_TOLERANCE})
    return min(bounds[1], max(bounds[0], _round(float(found.x))))


def _fit_pairs(pairs: Sequence[tuple[float, float, int]], kind: str, draws: bool) -> Calibration:
    """The `kind` calibration of a mode's raw scored pairs (`Scorer.raw`)."""
    return fit_calibration([(a, b) for a, b, _ in pairs], [o for *_, o in pairs], kind, draws=draws).rounded()
