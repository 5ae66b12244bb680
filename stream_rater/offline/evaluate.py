"""Prediction accuracy of rating models, measured on the states the service itself would have.

Each match is predicted just before it is rated, from the prior team ratings (context effects
included) that `Processor` hands to its ``observe`` hook, so an evaluation replays exactly
what the stream computes. Metrics (`Scorer`):

- **Wrong order** (the TrueSkill paper's prediction error, section 4.1): over every pair of
  teams with different ranks, the fraction in which the model gives the worse-ranked team
  the higher probability of beating the other (``win_probabilities([a, b])``, which for a
  two-team match is ``win_probabilities(teams)``); equal probabilities count half.
- **Log-loss** and **Brier score** over decisive two-team matches: ``-ln p`` and
  ``(1 - p)**2`` with ``p`` the predicted probability that the actual winner wins (``p`` is
  floored at `PROBABILITY_FLOOR` so a confident miss costs a large but finite log-loss).
- **Calibration**: every decisive pair as (predicted P(the first-listed team beats the
  other), whether it did), in equal-width probability bins. The first-listed team is the
  home team in the football data, so an unmodelled home advantage shows up here.
- **Over time**: the wrong-order rate in consecutive windows with equal numbers of pairs.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from stream_rater.contracts import MatchFinished, format_timestamp
from stream_rater.config.ladders import Ladders
from stream_rater.processor import Processor, PriorObserver
from stream_rater.rating.base import Outcome, Rating, RatingModel
from stream_rater.offline.replay import ReplaySummary, replay
from stream_rater.store.memory import MemoryStore

PROBABILITY_FLOOR = 1e-15


@dataclass(frozen=True, slots=True)
class CalibrationBin:
    """Pairs whose predicted probability fell in ``[low, high)`` (the last bin includes 1)."""

    low: float
    high: float
    count: int
    mean_predicted: float | None
    observed: float | None


@dataclass(frozen=True, slots=True)
class Period:
    """The wrong-order rate of consecutive decisive pairs finished from `start` to `end`
    (epoch seconds)."""

    start: float
    end: float
    pairs: int
    wrong_order: float


@dataclass(frozen=True, slots=True)
class Summary:
    """All metrics of one scored run; rates are fractions, None when nothing was scored."""

    matches: int
    pairs: int
    wrong_order: float | None
    two_team_decisive: int
    log_loss: float | None
    brier: float | None
    calibration: list[CalibrationBin]
    over_time: list[Period]

    @property
    def expected_calibration_error(self) -> float | None:
        """ECE: the pair-weighted mean |predicted − observed| over the calibration bins."""
        filled = [b for b in self.calibration if b.count]
        total = sum(b.count for b in filled)
        if not total:
            return None
        return math.fsum(b.count * abs(b.mean_predicted - b.observed) for b in filled) / total  # type: ignore[operator]

    def metric(self, name: str) -> float:
        """The named metric (``wrong_order``, ``log_loss`` or ``brier``); raises ValueError
        when no match could be scored for it."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"no decisive matches to compute {name} on")
        return value

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; period bounds as RFC 3339 strings."""
        data = asdict(self)
        data["expected_calibration_error"] = self.expected_calibration_error
        data["over_time"] = [
            {**p, "start": format_timestamp(p["start"]), "end": format_timestamp(p["end"])}
            for p in data["over_time"]
        ]
        return data

    def report(self) -> str:
        """A human-readable multi-line report."""

        def pct(x: float | None) -> str:
            return "n/a" if x is None else f"{100 * x:.2f} %"

        def num(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.4f}"

        lines = [
            f"matches                 {self.matches}",
            f"decisive team pairs     {self.pairs}",
            f"wrong order             {pct(self.wrong_order)}",
            f"two-team decisive       {self.two_team_decisive}",
            f"log-loss                {num(self.log_loss)}",
            f"Brier score             {num(self.brier)}",
            "",
            f"calibration error (ECE) {num(self.expected_calibration_error)}",
            "",
            "calibration: P(first-listed team beats the other) vs how often it did",
            f"  {'bin':<11} {'pairs':>7} {'predicted':>10} {'observed':>9}",
        ]
        for b in self.calibration:
            lines.append(f"  {b.low:.2f}-{b.high:.2f}  {b.count:>7} {num(b.mean_predicted):>10} {num(b.observed):>9}")
        lines += ["", "wrong order over time", f"  {'from':<10}   {'to':<10} {'pairs':>7} {'wrong':>8}"]
        for p in self.over_time:
            lines.append(
                f"  {format_timestamp(p.start)[:10]} … {format_timestamp(p.end)[:10]} "
                f"{p.pairs:>7} {pct(p.wrong_order):>8}"
            )
        return "\n".join(lines)


class Scorer:
    """Accumulates prediction metrics; `observe` has the `PriorObserver` signature.

    Pure: it only reads the teams' priors and the outcome, and asks each match's ladder
    model (from `ladders`) for ``win_probabilities``. `bins` calibration bins, up to
    `periods` windows over time.
    """

    def __init__(self, ladders: Ladders, *, bins: int = 10, periods: int = 20) -> None:
        if bins < 1 or periods < 1:
            raise ValueError("bins and periods must be at least 1")
        self._ladders = ladders
        self._models: dict[str, RatingModel] = {}
        self._periods = periods
        self.matches = 0
        self._two_team = 0
        self._log_loss = 0.0
        self._brier = 0.0
        self._bin_count = [0] * bins
        self._bin_predicted = [0.0] * bins
        self._bin_observed = [0] * bins
        self._times: list[float] = []
        self._wrong: list[float] = []

    def observe(self, match: MatchFinished, teams: Sequence[Sequence[Rating]], outcome: Outcome) -> None:
        """Score the prediction for `match` made from the prior ratings `teams`."""
        model = self._models.get(match.ladder)
        if model is None:
            model = self._models[match.ladder] = self._ladders.get(match.ladder).rating_model
        ranks = outcome.ranks
        bins = len(self._bin_count)
        self.matches += 1
        for a in range(len(teams)):
            for b in range(a + 1, len(teams)):
                if ranks[a] == ranks[b]:
                    continue
                p_a, p_b = model.win_probabilities([teams[a], teams[b]])
                a_won = ranks[a] < ranks[b]
                self._times.append(match.finished_at)
                self._wrong.append(0.5 if p_a == p_b else float((p_a > p_b) != a_won))
                k = min(int(p_a * bins), bins - 1)
                self._bin_count[k] += 1
                self._bin_predicted[k] += p_a
                self._bin_observed[k] += a_won
                if len(teams) == 2:
                    p = max(p_a if a_won else p_b, PROBABILITY_FLOOR)
                    self._two_team += 1
                    self._log_loss -= math.log(p)
                    self._brier += (1.0 - p) ** 2

    def summary(self) -> Summary:
        """The metrics of everything observed so far."""
        pairs = len(self._wrong)
        bins = len(self._bin_count)
        calibration = [
            CalibrationBin(
                k / bins, (k + 1) / bins, n,
                self._bin_predicted[k] / n if n else None,
                self._bin_observed[k] / n if n else None,
            )
            for k, n in enumerate(self._bin_count)
        ]
        windows = min(self._periods, pairs)
        over_time = []
        for w in range(windows):
            lo, hi = w * pairs // windows, (w + 1) * pairs // windows
            over_time.append(Period(
                self._times[lo], self._times[hi - 1], hi - lo, math.fsum(self._wrong[lo:hi]) / (hi - lo)
            ))
        two = self._two_team
        return Summary(
            matches=self.matches,
            pairs=pairs,
            wrong_order=math.fsum(self._wrong) / pairs if pairs else None,
            two_team_decisive=two,
            log_loss=self._log_loss / two if two else None,
            brier=self._brier / two if two else None,
            calibration=calibration,
            over_time=over_time,
        )


def _tee(*scorers: Scorer) -> PriorObserver:
    def observe(match: MatchFinished, teams: list[list[Rating]], outcome: Outcome) -> None:
        for scorer in scorers:
            scorer.observe(match, teams, outcome)

    return observe


def score(
    parts: Sequence[Iterable[MatchFinished]], ladders: Ladders, *, batch_size: int = 1000
) -> tuple[list[Summary], Summary, ReplaySummary]:
    """Replay `parts` one after the other through one `Processor` on a fresh `MemoryStore`,
    scoring each match before it is rated; the summaries of each part and of all of them,
    and the replay counts (summed over the parts)."""
    whole = Scorer(ladders)
    processor = Processor(ladders, MemoryStore())
    total = ReplaySummary()
    summaries = []
    for part in parts:
        scorer = Scorer(ladders)
        processor.observe = _tee(scorer, whole)
        counts = asyncio.run(replay(part, processor, batch_size=batch_size))
        for f in fields(total):
            setattr(total, f.name, getattr(total, f.name) + getattr(counts, f.name))
        summaries.append(scorer.summary())
    return summaries, whole.summary(), total


def plot(summary: Summary, path: str, title: str = "") -> None:
    """Save the calibration curve and the wrong-order rate over time as an image at `path`
    (needs matplotlib, the ``plot`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    filled = [b for b in summary.calibration if b.count]
    left.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect")
    left.plot([b.mean_predicted for b in filled], [b.observed for b in filled], marker="o", label="model")
    for b in filled:
        left.annotate(str(b.count), (b.mean_predicted, b.observed), textcoords="offset points",
                      xytext=(4, -10), fontsize=7)
    left.set(xlim=(0, 1), ylim=(0, 1), xlabel="predicted P(first-listed team wins the pair)",
             ylabel="observed frequency", title="calibration (labels: pairs per bin)")
    left.legend(loc="upper left")
    mids = [epoch + timedelta(seconds=(p.start + p.end) / 2) for p in summary.over_time]
    right.plot(mids, [100 * p.wrong_order for p in summary.over_time], marker="o")
    if summary.wrong_order is not None:
        right.axhline(100 * summary.wrong_order, color="grey", linestyle="--", linewidth=1,
                      label=f"overall {100 * summary.wrong_order:.2f} %")
        right.legend(loc="upper right")
    right.set(xlabel="time (window midpoints, equal pairs per window)", ylabel="wrong order (%)",
              title="decisive pairs predicted in the wrong order")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

