"""``bench modes``: issue 48's football study — one ladder with the competition class as its
modes, against one ladder that ignores the modes and one ladder per mode.

Modes (`competition_class` of the ``tournament`` column): ``friendly`` (``Friendly``),
``qualifier`` (any tournament whose name has ``qualification``) and ``finals`` (every other
competition: World Cup, continental and regional cups, Nations Leagues, invitational
tournaments). The model is the tuned football TrueSkill (`PARAMS`, home effect), the split
`tune`'s: fitted on the first 30 %, scored on the held-out 70 %. Every alternative is tuned by
the same path: `TUNED` (``beta`` and ``time_tau``, what the football TrueSkill was tuned on) and the coupling where it has one fitted together on the
fit part's raw log-loss (`offline.tune_modes.fit_jointly`), then a ``draw`` calibration per
mode (the ladder's one calibration where it has no modes) by `offline.tune_modes.tune_modes`;
the figures are the calibrated held-out ones. Alternatives:

- ``one ladder``: every match in one mode (the modes ignored);
- ``per mode``: coupling 0 (no sharing);
- ``first-match prior``: `rating.modes.first_in_mode` at a player's first match in a mode, the
  coupling tuned (what the service does);
- ``cross-update``: the first-match prior, and after every match the player's other modes
  moved by `rating.modes.cross_update` (per-mode states, as the service keeps them);
- ``shared + offsets``: a shared skill and per-mode offsets (`rating.modes.Joint`), tuned.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished, parse_match
from stream_rater.offline.adapters import InputRecord, open_text, read_records
from stream_rater.offline.evaluate import Summary
from stream_rater.offline.modes import Moded
from stream_rater.offline.tune_modes import ModesTuneResult, fit_jointly, tune_modes

DATA = Path(__file__).resolve().parent.parent / "data" / "international_football_results.csv.gz"
#: The tuned football TrueSkill (stream_rater/bench/README.md "Accuracy").
PARAMS: dict[str, Any] = {
    "beta": 5.851,
    "tau": 0.0,
    "draw_probability": 0.2035,
    "time_tau": 1.216,
    "time_unit": "years",
}
#: What the study tunes in every alternative (with the coupling where it has one).
TUNED = ("beta", "time_tau")


def competition_class(tournament: str) -> str:
    """The mode of a football match by its ``tournament`` (module docs)."""
    if tournament == "Friendly":
        return "friendly"
    return "qualifier" if "qualification" in tournament else "finals"


def football_modes(path: str | Path = DATA, *, home_effect: bool = True) -> list[Moded]:
    """The football results of `path` as ``(mode, match)`` (`home_effect`: the ``home`` effect
    on the home team of a non-neutral match)."""
    with open_text(path) as stream:
        modes = {n: competition_class(row[5]) for n, row in enumerate(csv.reader(stream), 1) if n > 1}
    ladders = Ladders([Ladder("football", "trueskill", PARAMS)])
    with open_text(path) as stream:
        records = read_records([(str(path), stream)], "football", home_effect=home_effect)
        return [(modes[r.line], _parsed(r, ladders)) for r in records]


def _parsed(record: InputRecord, ladders: Ladders) -> MatchFinished:
    """The record's match; ValueError naming its file:line when it is bad."""
    try:
        if record.event is None:
            raise ValueError(record.error)
        return parse_match({**record.event, "ladder": "football"}, ladders)
    except ValueError as exc:
        raise ValueError(f"{record.where}: {exc}") from None


def study(matches: Sequence[Moded], experience: bool = False) -> dict[str, ModesTuneResult]:
    """Each alternative (module docs) tuned on `matches` the same way, by name: `TUNED` and the
    coupling where it has one fitted together (`offline.tune_modes.fit_jointly`), then a
    calibration per mode (`tune_modes`); with `experience` also one ladder and the shared form
    with a fitted experience effect."""
    one = [("all", match) for _, match in matches]
    rows: dict[str, tuple[Sequence[Moded], str, float | None]] = {
        "one ladder": (one, "prior", 0.0),
        "per mode": (matches, "prior", 0.0),
        "first-match prior": (matches, "prior", None),
        "cross-update": (matches, "cross", None),
        "shared + offsets": (matches, "shared", None),
    }
    results = {}
    for name, (data, form, coupling) in rows.items():
        ladder = Ladder("football", "trueskill", PARAMS)
        params, coupling, _ = fit_jointly(data, ladder, TUNED, form=form, coupling=coupling)
        tuned = Ladder("football", "trueskill", {**PARAMS, **params})
        results[name] = tune_modes(data, tuned, coupling=coupling, form=form)
        if experience and name in ("one ladder", "shared + offsets"):
            again = tune_modes(data, tuned, coupling=coupling, form=form, experience=None)
            results[f"{name} + experience"] = again
    return results


def table(results: dict[str, ModesTuneResult]) -> str:
    """The held-out comparison, then each mode's; ECE ``before`` is the alternative's before
    tuning (coupling 0, no calibration)."""
    head = f"{'held-out 70 %':<32}{'coupling':>9}{'wrong order':>13}{'Δ vs one ladder':>20}"
    lines = [head + f"{'log-loss':>10}{'ECE':>8}{'before':>9}"]
    one = next(iter(results.values())).tuned.whole[1]
    for name, r in results.items():
        after, before = r.tuned.whole[1], r.baseline.whole[1]
        coupling = "" if name.startswith(("one ladder", "per mode")) else f"{r.coupling:.4g}"
        lines.append(
            f"{name:<32}{coupling:>9}{after.metric('wrong_order'):>13.3%}{_difference(after, one):>20}"
            f"{after.metric('log_loss'):>10.4f}{after.expected_calibration_error:>8.4f}"
            f"{before.expected_calibration_error:>9.4f}"
        )
        if r.experience:
            lines.append(f"{'':<4}experience {r.experience:.4g}")
    lines += ["", f"{'per mode, held out':<32}" + "".join(f"{m:>24}" for m in _modes(results))]
    for name, r in results.items():
        cells = [
            f"{s.metric('wrong_order'):>14.2%} {s.metric('log_loss'):>8.4f}"
            for s in r.tuned.modes[1].values()
        ]
        lines.append(f"{name:<32}" + "".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def _difference(summary: Summary, one: Summary) -> str:
    """The wrong-order difference from `one` in points, ± its standard error over the
    over-time windows (the same decisive pairs in both, so the windows pair up)."""
    diffs = [100 * (a.wrong_order - b.wrong_order) for a, b in zip(summary.over_time, one.over_time)]
    if summary is one or len(diffs) < 2:
        return ""
    return f"{statistics.fmean(diffs):+.3f} ± {statistics.stdev(diffs) / math.sqrt(len(diffs)):.3f}"


def _modes(results: dict[str, ModesTuneResult]) -> list[str]:
    return max((list(r.tuned.modes[1]) for r in results.values()), key=len)


def run(
    path: str | None = None, experience: bool = False, as_json: bool = False, out: TextIO = sys.stdout
) -> dict[str, ModesTuneResult]:
    """The study on `path` (default: the shipped football results), printed."""
    start = time.perf_counter()
    matches = football_modes(path or DATA)
    results = study(matches, experience)
    if as_json:
        print(json.dumps({name: r.to_dict() for name, r in results.items()}, indent=2), file=out)
    else:
        print(table(results), file=out)
        print(f"\n{len(matches)} matches, {time.perf_counter() - start:.0f} s", file=out)
    return results
