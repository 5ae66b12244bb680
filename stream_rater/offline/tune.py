"""Fit a ladder's model parameters to a match history: minimise a prediction metric of
`stream_rater.offline.evaluate` on the first part of the data, report it on the rest and on all.

The matches are validated once; every trial replays the fit part through a fresh
`Processor` on a `MemoryStore` with the trial's parameters, so a trial scores exactly the
states the service would have had. The search is Nelder-Mead (scipy) on transformed
parameters: ``log`` for positive scales and rates, ``logit`` for probabilities, so it
moves by factors and can never leave the valid range. A parameter configured as 0 (e.g.
``time_tau``, off by default) has no factor to move by: it is first scanned over
`ZERO_SCAN` in its own units (``time_tau`` is per ``time_unit``, so pick a unit that suits
the data, e.g. years), the others held at their start, and the best value starts the search.

Objective: the default ``log_loss`` is a proper scoring rule, smooth in the parameters; like
every metric it scores the read API's win/draw/loss probabilities (`evaluate`). It and the
wrong-order rate do not share their optimum, though: on the football results (TrueSkill, home
effect, years, ``tau=0``, ``draw_probability=0.2035``, tuning ``beta`` and ``time_tau``)
log-loss prefers less confident predictions (``beta`` 10.16, ``time_tau`` 1.972) than the
ordering does (5.851 and 1.216), and its optimum orders 24.65 % of all decisive matches wrongly
where ``--objective wrong_order`` reaches 24.44 %. The wrong-order rate is a
step function, but with thousands of pairs its steps are fine enough for Nelder-Mead to make
progress from the initial simplex (its best trials differ by a few pairs, i.e. by noise).
Every metric (and the calibration error, ECE) is reported whatever the objective. Fitted
values are rounded to `SIGNIFICANT` digits before the final runs, so the reported figures
are exactly what ``evaluate --param ...`` with them gives, and the configured values are
kept if the rounded fit is no better on the fit part.

Calibration (``calibrate``, ``tune --calibrate``): the search scores the model's raw
probabilities (a configured ``calibration`` left out); then `rating.calibration.fit` fits the
map on the fit part's scored pairs with the parameters found, and the tuned figures are the
calibrated ones — README "Rating quality" has what it does on the football data.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished
from stream_rater.offline.evaluate import Summary, raw_outcomes, score
from stream_rater.rating import registry
from stream_rater.rating.calibration import KINDS as CALIBRATIONS
from stream_rater.rating.calibration import Calibration
from stream_rater.rating.calibration import fit as fit_calibration

#: Per model: the parameters fitted by default and the transform each is searched in, as the
#: model says (`RatingModel.TUNING`; scale parameters that only rescale the ratings are left out).
SPACES: dict[str, dict[str, str]] = {
    name: registry.model_class(name).TUNING for name in registry.MODEL_CLASSES
}
#: Per model: the parameters of evidence options that are off by default
#: (`RatingModel.TUNING_OPTIONS`, e.g. TrueSkill's score margins), fitted only when named
#: (``--tune``).
OPTIONS: dict[str, dict[str, str]] = {
    name: options for name in registry.MODEL_CLASSES if (options := registry.model_class(name).TUNING_OPTIONS)
}
OBJECTIVES = ("log_loss", "brier", "wrong_order")
#: Per transform: the values a parameter configured as 0 is first scanned over.
ZERO_SCAN: dict[str, tuple[float, ...]] = {
    "log": (0.001, 0.01, 0.1, 1.0, 10.0),
    "logit": (0.001, 0.01, 0.1, 0.3),
}
SIGNIFICANT = 4
#: Initial simplex: each parameter's first step is this far in transformed space
#: (a factor of 2 for ``log`` parameters).
_STEP = math.log(2.0)
#: Transformed values are clipped to ±this, so a runaway search stays finite.
_LIMIT = 50.0

_FORWARD: dict[str, Callable[[float], float]] = {
    "log": math.log,
    "logit": lambda p: math.log(p / (1.0 - p)),
}
_BACKWARD: dict[str, Callable[[float], float]] = {
    "log": math.exp,
    "logit": lambda x: 1.0 / (1.0 + math.exp(-x)),
}


@dataclass(frozen=True, slots=True)
class Trial:
    """One evaluation of the objective on the fit part (``value`` inf: invalid parameters)."""

    number: int
    params: dict[str, float]
    value: float

    def line(self) -> str:
        """``trial 3: beta=4.167 tau=0.08333 -> 0.56148``."""
        values = " ".join(f"{k}={v:.4g}" for k, v in self.params.items())
        return f"trial {self.number}: {values} -> {self.value:.5f}"


@dataclass(frozen=True, slots=True)
class Scoring:
    """How a tuning run is judged: its parameters are fitted on the first `fit_fraction` of
    the matches (the fit part; the rest is held out), minimising `objective` (one of
    `OBJECTIVES`) there."""

    fit_fraction: float = 0.3
    objective: str = "log_loss"


#: The scoring of a tuning run unless told otherwise.
DEFAULT_SCORING = Scoring()


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """How `tune` searches: `max_trials` objective evaluations at most (0: no search, the
    configured values are kept), each a replay in batches of `batch_size` matches; `on_trial`
    sees every trial as it finishes."""

    max_trials: int = 60
    batch_size: int = 1000
    on_trial: Callable[[Trial], None] | None = None


#: The search of `tune` unless told otherwise.
DEFAULT_SEARCH = SearchOptions()


@dataclass(frozen=True, slots=True)
class Scores:
    """One parameter set's metrics on the fit part, the rest and all matches."""

    params: dict[str, Any]
    fit: Summary
    rest: Summary
    all: Summary


@dataclass(frozen=True, slots=True)
class TuneResult:
    """What `tune` found, with the baseline (the configured parameters) beside it."""

    ladder: str
    model: str
    objective: str
    fit_matches: int
    matches: int
    trials: list[Trial]
    seconds: float
    baseline: Scores
    tuned: Scores

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (metrics only, no calibration tables)."""

        def scores(s: Scores) -> dict[str, Any]:
            return {
                "params": s.params,
                **{part: _metrics(getattr(s, part)) for part in ("fit", "rest", "all")},
            }

        return {
            "ladder": self.ladder,
            "model": self.model,
            "objective": self.objective,
            "fit_matches": self.fit_matches,
            "matches": self.matches,
            "trials": len(self.trials),
            "seconds": round(self.seconds, 1),
            "baseline": scores(self.baseline),
            "tuned": scores(self.tuned),
        }

    def report(self) -> str:
        """A human-readable table: baseline and tuned, per part and metric."""
        head = (
            f"{self.model} on ladder {self.ladder!r}: {len(self.trials)} trials in {self.seconds:.0f} s, "
            f"minimising {self.objective} on the first {self.fit_matches} of {self.matches} matches"
        )
        parts = [("fit", self.fit_matches), ("rest", self.matches - self.fit_matches), ("all", self.matches)]
        lines = [
            head,
            "",
            f"{'':<16}" + "".join(f"{f'{p} ({n})':>22}" for p, n in parts),
            f"{'':<16}" + f"{'baseline':>11}{'tuned':>11}" * 3,
        ]
        metrics = (
            ("wrong_order", "{:.3%}"),
            ("log_loss", "{:.5f}"),
            ("brier", "{:.5f}"),
            ("expected_calibration_error", "{:.4f}"),
        )
        for name, fmt in metrics:
            cells = []
            for part, _ in parts:
                for s in (self.baseline, self.tuned):
                    value = getattr(getattr(s, part), name)
                    cells.append(f"{'n/a' if value is None else fmt.format(value):>11}")
            lines.append(f"{name.replace('expected_calibration_error', 'ECE'):<16}" + "".join(cells))
        lines += ["", "baseline: " + _flags(self.baseline.params), "tuned:    " + _flags(self.tuned.params)]
        lines += ["", "ladders file:", f"[ladders.{self.ladder}]", f'model = "{self.model}"']
        lines += [f"{k} = {_toml(v)}" for k, v in self.tuned.params.items()]
        return "\n".join(lines)


def _metrics(s: Summary) -> dict[str, Any]:
    return {
        "matches": s.matches,
        "pairs": s.pairs,
        "wrong_order": s.wrong_order,
        "log_loss": s.log_loss,
        "brier": s.brier,
        "expected_calibration_error": s.expected_calibration_error,
    }


def _toml(value: Any) -> str:
    """A parameter's value as the ladders file writes it."""
    if isinstance(value, bool):
        return str(value).lower()
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _flags(params: Mapping[str, Any]) -> str:
    return " ".join(f"--param {shlex.quote(f'{k}={v}')}" for k, v in params.items()) or "(model defaults)"


def _round(value: float) -> float:
    return float(f"{value:.{SIGNIFICANT}g}")


def tune(
    matches: Sequence[MatchFinished],
    ladders: Ladders,
    ladder: str,
    names: Sequence[str] | None = None,
    *,
    fixed: Collection[str] = (),
    scoring: Scoring = DEFAULT_SCORING,
    options: SearchOptions = DEFAULT_SEARCH,
    calibrate: str | None = None,
) -> TuneResult:
    """Fit parameters `names` (default: the model's `SPACES` entry less `fixed`; its
    `OPTIONS` entry when named) of ladder `ladder`, starting from their configured values.

    The search (`options`) minimises the `scoring`'s objective on the fit part of `matches`.
    Other parameters keep their configured values. With `calibrate` (a kind of
    `rating.calibration`), the search scores the model's raw probabilities, and a calibration
    is then fitted on the fit part's decisive pairs with the parameters found; it is the
    tuned ``calibration`` parameter.
    """
    start = time.perf_counter()
    fit_fraction, objective, max_trials = scoring.fit_fraction, scoring.objective, options.max_trials
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
    if calibrate is not None and calibrate not in CALIBRATIONS:
        raise ValueError(f"calibrate: use one of {', '.join(CALIBRATIONS)}")
    model = ladders.get(ladder).model
    names, transforms = _tunable(model, names, fixed) if max_trials > 0 else ([], [])
    fit = round(len(matches) * fit_fraction)
    if not 0 < fit < len(matches):
        raise ValueError(f"fit fraction {fit_fraction} of {len(matches)} matches leaves a part empty")
    search = _Search(matches, ladders, ladder, names, transforms, fit, objective, options)
    search.raw = calibrate is not None
    baseline = search.scores({})
    found = _best(search, max_trials) if names else {}
    tuned = search.scores(found) if found else baseline
    if tuned.fit.metric(objective) > baseline.fit.metric(objective):
        found, tuned = {}, baseline  # the search found nothing better than the configured values
    if calibrate is not None:
        found["calibration"] = str(search.calibration(found, calibrate))
        tuned = search.scores(found)
    return TuneResult(
        ladder,
        model,
        objective,
        fit,
        len(matches),
        search.trials,
        time.perf_counter() - start,
        baseline,
        tuned,
    )


def _best(search: _Search, max_trials: int) -> dict[str, Any]:
    """Nelder-Mead from the configured values; the best trial's values, rounded."""
    x0 = search.start()
    simplex = np.vstack([x0] + [x0 + _STEP * row for row in np.eye(len(search.names))])
    minimize(
        search.evaluate,
        x0,
        method="Nelder-Mead",
        options={
            "maxfev": max(max_trials - len(search.trials), len(search.names) + 1),
            "initial_simplex": simplex,
            "xatol": 0.01,
            "fatol": 1e-5,
        },
    )
    best = min(search.trials, key=lambda t: t.value)
    return {n: _round(v) for n, v in best.params.items()}


def _tunable(model: str, names: Sequence[str] | None, fixed: Collection[str]) -> tuple[list[str], list[str]]:
    """The parameters of `model` to tune (default: its `SPACES` entry less `fixed`) and the
    transform of each; refuses a name no space of the model has, or none at all."""
    defaults_space = SPACES.get(model, {})
    space = {**defaults_space, **OPTIONS.get(model, {})}
    names = [n for n in defaults_space if n not in fixed] if names is None else list(names)
    unknown = [n for n in names if n not in space]
    if unknown:
        raise ValueError(
            f"cannot tune {', '.join(unknown)} of {model!r} (tunable: {', '.join(space) or 'none'})"
        )
    if not names:
        raise ValueError("no parameters to tune")
    return names, [space[n] for n in names]


class _Search:
    """The objective of one `tune` run on the transformed parameter vector, with every trial
    it evaluated (each distinct point once) and the scoring of a final parameter set."""

    def __init__(
        self,
        matches: Sequence[MatchFinished],
        ladders: Ladders,
        ladder: str,
        names: list[str],
        transforms: list[str],
        fit: int,
        objective: str,
        options: SearchOptions,
    ) -> None:
        self.matches, self.ladders, self.ladder, self.fit = matches, ladders, ladder, fit
        self.names, self.transforms = names, transforms
        self.objective, self.batch_size, self.on_trial = objective, options.batch_size, options.on_trial
        self.base = ladders.get(ladder)
        self.trials: list[Trial] = []
        self.seen: dict[tuple[float, ...], float] = {}
        #: True: trials score the model's raw probabilities (a configured calibration left out).
        self.raw = False

    def with_params(self, params: Mapping[str, Any]) -> Ladders:
        """The ladders with `params` overriding the tuned ladder's configured ones."""
        changed = Ladder(self.ladder, self.base.model, {**self.base.params, **params})
        return Ladders([*(lad for name, lad in self.ladders.items() if name != self.ladder), changed])

    def without_calibration(self, params: Mapping[str, Any]) -> Ladders:
        """`with_params`, and the tuned ladder's ``calibration`` left out."""
        merged = {k: v for k, v in {**self.base.params, **params}.items() if k != "calibration"}
        changed = Ladder(self.ladder, self.base.model, merged)
        return Ladders([*(lad for name, lad in self.ladders.items() if name != self.ladder), changed])

    def calibration(self, params: Mapping[str, Any], kind: str) -> Calibration:
        """The `kind` calibration fitted on the fit part's scored pairs with `params` (rounded
        to the digits its parameter text keeps)."""
        raw, outcomes, draws = raw_outcomes(
            self.matches[: self.fit],
            self.without_calibration(params),
            self.ladder,
            batch_size=self.batch_size,
        )
        return fit_calibration(raw, outcomes, kind, draws=draws).rounded()

    def decode(self, x: np.ndarray) -> dict[str, float]:
        clipped = np.clip(x, -_LIMIT, _LIMIT)
        return {n: _BACKWARD[t](float(v)) for n, t, v in zip(self.names, self.transforms, clipped)}

    def encode(self, params: Mapping[str, float]) -> np.ndarray:
        return np.array([_FORWARD[t](params[n]) for n, t in zip(self.names, self.transforms)])

    def start(self) -> np.ndarray:
        """The configured values as the search's start; a parameter configured as 0 (which
        the log transforms cannot take) starts at the best of its `ZERO_SCAN` values."""
        defaults = registry.model_parameters(self.base.model)
        starts = {n: float(self.base.params.get(n, defaults[n])) for n in self.names}
        spaces = dict(zip(self.names, self.transforms))
        x0 = self.encode({n: v or ZERO_SCAN[spaces[n]][0] for n, v in starts.items()})
        for name in [n for n in self.names if starts[n] == 0.0]:
            candidates = (self.encode({**self.decode(x0), name: value}) for value in ZERO_SCAN[spaces[name]])
            x0 = min(candidates, key=self.evaluate)
        return x0

    def evaluate(self, x: np.ndarray) -> float:
        """The objective on the fit part at `x` (inf where the model refuses the values)."""
        key = tuple(np.clip(x, -_LIMIT, _LIMIT))
        if key in self.seen:
            return self.seen[key]
        params = self.decode(x)
        try:
            trial_ladders = self.without_calibration(params) if self.raw else self.with_params(params)
            trial_ladders.get(self.ladder).rating_model  # noqa: B018 -- builds the model: invalid values raise here
        except ValueError:
            value = math.inf
        else:
            _, summary, _ = score([self.matches[: self.fit]], trial_ladders, batch_size=self.batch_size)
            value = summary.metric(self.objective)
        self.seen[key] = value
        self.trials.append(Trial(len(self.trials) + 1, params, value))
        if self.on_trial is not None:
            self.on_trial(self.trials[-1])
        return value

    def scores(self, params: dict[str, Any]) -> Scores:
        """Every metric of `params` on the fit part, the rest and all matches."""
        trial_ladders = self.with_params(params)
        (fit_part, rest), whole, _ = score(
            [self.matches[: self.fit], self.matches[self.fit :]], trial_ladders, batch_size=self.batch_size
        )
        return Scores(dict(trial_ladders.get(self.ladder).params), fit_part, rest, whole)
