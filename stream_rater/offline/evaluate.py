"""Prediction accuracy of rating models, measured on the states the service itself would have.

Each match is predicted just before it is rated, from the prior team ratings (context effects
included, as extra team members) that `Processor` hands to its ``observe`` hook, so an
evaluation replays exactly what the stream computes. The probabilities scored are the read
API's: each team's rating is taken as a read at the match's time sees it (`RatingModel.as_of`
with the player's idle time, as `Queries` does) and asked of `rating.predict.predict` — the
function behind ``POST /api/ladders/{ladder}/predict`` and ``stream-rater predict``. For two
TrueSkill teams that is the win/draw/loss triple with the draw margin ε; for Elo-family models
the two win probabilities (their draw probability is 0). Metrics (`Scorer`):

- **Wrong order** (the TrueSkill paper's prediction error, section 4.1): over every pair of
  teams with different ranks, the fraction in which the worse-ranked team had the higher
  win probability in ``predict`` of the pair alone (for a two-team match: of the match);
  equal probabilities count half.
- **Log-loss** and **Brier score** over two-team matches: with ``p`` the predicted probability
  of the observed outcome (first team wins, second team wins, or a draw), ``-ln p`` (``p``
  floored at `PROBABILITY_FLOOR`, so a confident miss costs a large but finite log-loss) and
  ``½ Σ (p_k − o_k)²`` over the outcomes (``(1 − p)²`` when there are two). A model *predicts
  draws* when `predict` gives two newcomers a draw probability above 0 (TrueSkill with
  ``draw_probability > 0``); its draws are scored like any result. A model that does not rate
  draws as an outcome of their own (the Elo family: a draw is half a win) has its draws left
  out of these metrics and of calibration.
- **Calibration**: every scored pair as (the API's P(the first-listed team wins), whether it
  strictly did — a draw is not a win), in equal-width probability bins; for a model that
  predicts draws, drawn pairs are included. The first-listed team is the home team in the
  football data, so an unmodelled home advantage shows up here.
- **Over time**: the wrong-order rate in consecutive windows with equal numbers of pairs.

A ladder with a ``calibration`` parameter is scored as the read API answers: through it
(`predict` applies it), so every metric here is of the calibrated probabilities.

With more than two teams, log-loss and Brier are not computed; wrong order and calibration
use each pair of teams on its own through the same `predict` (a pair's probabilities, not the
match's first-place probabilities).
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import MatchFinished, format_timestamp
from stream_rater.offline.replay import ReplaySummary, replay
from stream_rater.processor import PriorObserver, Processor, Target
from stream_rater.rating.base import Outcome, Rating, RatingModel
from stream_rater.rating.predict import as_read, predict_raw
from stream_rater.rating.scoring import (
    PROBABILITY_FLOOR,
    MatchScore,
    calibration_bin,
    predicts_draws,
    score_match,
)
from stream_rater.store.memory import MemoryStore

__all__ = ["PROBABILITY_FLOOR", "CalibrationBin", "Period", "Scorer", "Summary", "plot", "score"]


@dataclass(frozen=True, slots=True)
class CalibrationBin:
    """Scored pairs whose predicted P(first-listed team wins) fell in ``[low, high)`` (the
    last bin includes 1); ``observed`` is the share of them the first-listed team won."""

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
    """All metrics of one scored run; rates are fractions, None when nothing was scored.

    ``pairs``: decisive pairs of teams (the wrong-order rate's); ``two_team``: two-team
    matches scored by log-loss and Brier (draws included when the model predicts them).
    """

    matches: int
    pairs: int
    wrong_order: float | None
    two_team: int
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
        value: float | None = getattr(self, name)
        if value is None:
            raise ValueError(f"no matches to compute {name} on")
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
            f"two-team matches scored {self.two_team}",
            f"log-loss                {num(self.log_loss)}",
            f"Brier score             {num(self.brier)}",
            "",
            f"calibration error (ECE) {num(self.expected_calibration_error)}",
            "",
            "calibration: P(first-listed team wins) vs how often it did (a draw is not a win)",
            f"  {'bin':<11} {'pairs':>7} {'predicted':>10} {'observed':>9}",
        ]
        for b in self.calibration:
            lines.append(
                f"  {b.low:.2f}-{b.high:.2f}  {b.count:>7} {num(b.mean_predicted):>10} {num(b.observed):>9}"
            )
        lines += ["", "wrong order over time", f"  {'from':<10}   {'to':<10} {'pairs':>7} {'wrong':>8}"]
        for p in self.over_time:
            lines.append(
                f"  {format_timestamp(p.start)[:10]} … {format_timestamp(p.end)[:10]} "
                f"{p.pairs:>7} {pct(p.wrong_order):>8}"
            )
        return "\n".join(lines)


class Scorer:
    """Accumulates prediction metrics; `observe` has the `PriorObserver` signature.

    Pure: it only reads the teams' priors and the outcome, and asks `rating.predict.predict`
    with each match's ladder model (from `ladders`). `bins` calibration bins, up to `periods`
    windows over time.
    """

    def __init__(
        self, ladders: Ladders | None, *, bins: int = 10, periods: int = 20, keep_raw: bool = False
    ) -> None:
        """`ladders`: where `observe` finds a match's model (None: only `observe_with`). `keep_raw`: also keep each scored pair's raw probabilities (`raw`), for fitting
        a calibration."""
        if bins < 1 or periods < 1:
            raise ValueError("bins and periods must be at least 1")
        self._ladders = ladders
        self._models: dict[str, tuple[RatingModel, bool]] = {}
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
        #: Per scored pair (with `keep_raw`): the model's raw P(first team wins) and P(second
        #: wins), before any calibration (`predict_raw`), and the outcome (0: the first team
        #: won, 1: the second, 2: a draw).
        self.raw: list[tuple[float, float, int]] | None = [] if keep_raw else None

    def _model(self, ladder: str) -> tuple[RatingModel, bool]:
        """The ladder's model and whether it predicts draws (two newcomers may draw)."""
        known = self._models.get(ladder)
        if known is None:
            if self._ladders is None:
                raise LookupError(f"no ladders given to score ladder {ladder!r} by")
            model = self._ladders.get(ladder).rating_model
            known = self._models[ladder] = (model, predicts_draws(model))
        return known

    def observe(self, match: MatchFinished, teams: Sequence[Sequence[Rating]], outcome: Outcome) -> None:
        """Score the read API's prediction for `match` from the prior ratings `teams`, each
        as of the match's time (`RatingModel.as_of` with ``outcome.elapsed``)."""
        model, draws = self._model(match.ladder)
        self.observe_with(model, draws, match, teams, outcome)

    def observe_with(
        self,
        model: RatingModel,
        draws: bool,
        match: MatchFinished,
        teams: Sequence[Sequence[Rating]],
        outcome: Outcome,
    ) -> MatchScore:
        """`observe` with the `model` given (`draws`: whether it predicts draws) rather than
        the match's ladder's: the models of a ladder's modes (`offline.modes`); the score, for
        another scorer's `add`."""
        read = as_read(model, teams, outcome.elapsed)
        score = score_match(model, draws, read, outcome.ranks)
        self.add(score, match.finished_at)
        if self.raw is not None:
            ranks = outcome.ranks
            for a, b in itertools.combinations(range(len(read)), 2):
                if ranks[a] != ranks[b] or draws:
                    won = 0 if ranks[a] < ranks[b] else 1 if ranks[a] != ranks[b] else 2
                    self._keep_raw(model, [read[a], read[b]], won)
        return score

    def add(self, score: MatchScore, finished_at: float) -> None:
        """Count one match's `score` (`rating.scoring.score_match`), finished at `finished_at`."""
        bins = len(self._bin_count)
        self.matches += 1
        for wrong in score.wrong:
            self._times.append(finished_at)
            self._wrong.append(wrong)
        for p_a, a_won in score.calibration:
            k = calibration_bin(p_a, bins)
            self._bin_count[k] += 1
            self._bin_predicted[k] += p_a
            self._bin_observed[k] += a_won
        if score.log_loss is not None and score.brier is not None:
            self._two_team += 1
            self._log_loss += score.log_loss
            self._brier += score.brier

    def _keep_raw(self, model: RatingModel, pair: Sequence[Sequence[Rating]], outcome: int) -> None:
        assert self.raw is not None
        p_a, p_b = predict_raw(model, pair).win_probabilities
        self.raw.append((p_a, p_b, outcome))

    def predicts_draws(self, ladder: str) -> bool:
        """Whether the ladder's model predicts draws (so its draws are scored)."""
        return self._model(ladder)[1]

    def summary(self) -> Summary:
        """The metrics of everything observed so far."""
        pairs = len(self._wrong)
        bins = len(self._bin_count)
        calibration = [
            CalibrationBin(
                k / bins,
                (k + 1) / bins,
                n,
                self._bin_predicted[k] / n if n else None,
                self._bin_observed[k] / n if n else None,
            )
            for k, n in enumerate(self._bin_count)
        ]
        windows = min(self._periods, pairs)
        over_time = []
        for w in range(windows):
            lo, hi = w * pairs // windows, (w + 1) * pairs // windows
            over_time.append(
                Period(
                    self._times[lo], self._times[hi - 1], hi - lo, math.fsum(self._wrong[lo:hi]) / (hi - lo)
                )
            )
        two = self._two_team
        return Summary(
            matches=self.matches,
            pairs=pairs,
            wrong_order=math.fsum(self._wrong) / pairs if pairs else None,
            two_team=two,
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
    processor = Processor(ladders, MemoryStore(), target=Target(shadows=False))  # scores the live models
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


def raw_outcomes(
    part: Iterable[MatchFinished], ladders: Ladders, ladder: str, *, batch_size: int = 1000
) -> tuple[list[tuple[float, float]], list[int], bool]:
    """Replay `part` as `score` does: every scored pair's raw ``(P(first team wins), P(second
    wins))`` and outcome (0, 1; 2 a draw), and whether `ladder`'s model predicts draws (only
    then are its draws among the pairs) — what `rating.calibration.fit` fits on."""
    scorer = Scorer(ladders, keep_raw=True)
    processor = Processor(ladders, MemoryStore())
    processor.observe = scorer.observe
    asyncio.run(replay(part, processor, batch_size=batch_size))
    assert scorer.raw is not None
    return (
        [(a, b) for a, b, _ in scorer.raw],
        [o for _, _, o in scorer.raw],
        scorer.predicts_draws(ladder),
    )


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
        left.annotate(
            str(b.count),
            (b.mean_predicted, b.observed),
            textcoords="offset points",
            xytext=(4, -10),
            fontsize=7,
        )
    left.set(
        xlim=(0, 1),
        ylim=(0, 1),
        xlabel="predicted P(first-listed team wins)",
        ylabel="observed frequency",
        title="calibration (labels: pairs per bin)",
    )
    left.legend(loc="upper left")
    mids = [epoch + timedelta(seconds=(p.start + p.end) / 2) for p in summary.over_time]
    right.plot(mids, [100 * p.wrong_order for p in summary.over_time], marker="o")
    if summary.wrong_order is not None:
        right.axhline(
            100 * summary.wrong_order,
            color="grey",
            linestyle="--",
            linewidth=1,
            label=f"overall {100 * summary.wrong_order:.2f} %",
        )
        right.legend(loc="upper right")
    right.set(
        xlabel="time (window midpoints, equal pairs per window)",
        ylabel="wrong order (%)",
        title="decisive pairs predicted in the wrong order",
    )
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
