"""`BatchMetrics`: the batch handler's sensor. The handler calls it once per event — a batch
consumed, a record rejected, a match dead-lettered for the model, a retry, a batch finished —
and it keeps the metrics (`service.metrics`), the dead letters' log (`DeadLetterLog`) and the
dashboard's recent activity (`web.Recent`), off the handler's path."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import ValidationError
from stream_rater.processor import BatchResult, is_late, points_created, quality
from stream_rater.service import metrics
from stream_rater.service.dead_letter import DeadLetter, DeadLetterLog
from stream_rater.service.order_watch import Message
from stream_rater.service.web import Recent


class BatchMetrics:
    """Counts what the handler tells it (module docstring). `recent` is the dashboard's feed
    and the consumer-lag measurement's offsets; `dead_log` logs the dead letters produced
    (default: 10 lines a minute)."""

    def __init__(
        self, ladders: Ladders, recent: Recent | None = None, dead_log: DeadLetterLog | None = None
    ) -> None:
        self.ladders = ladders
        self.recent = Recent() if recent is None else recent
        self.dead_log = DeadLetterLog() if dead_log is None else dead_log

    def consumed(self, messages: Sequence[Message]) -> None:
        """A batch was taken."""
        metrics.MATCHES_CONSUMED.inc(len(messages))
        metrics.BATCH_SIZE.observe(len(messages))

    def rejected(self, exc: Exception) -> None:
        """A record failed decoding or validation (it is dead-lettered)."""
        metrics.MATCHES_REJECTED.labels(_reason_label(exc)).inc()

    def unratable(self) -> None:
        """A match made the model fail (it is dead-lettered)."""
        metrics.MATCHES_REJECTED.labels("processing").inc()

    def retried(self, what: str) -> None:
        """An attempt at `what` ("store", "produce") failed and is retried."""
        metrics.BATCH_RETRIES.labels(what).inc()

    def finished(
        self, messages: Sequence[Message], result: BatchResult, dead: list[DeadLetter], started: float
    ) -> None:
        """A batch's events and dead letters are durable (`started`: its `perf_counter`)."""
        self.dead_log.note(dead)
        self._matches(result)
        metrics.COMMIT_CONFLICTS.inc(result.conflicts)
        for ladder, scorer, sums in result.quality:
            metrics.count_quality(ladder, scorer, sums, quality.BINS)
        metrics.DEAD_LETTERS.inc(len(dead))
        metrics.RATING_CHANGES.inc(len(result.events))
        metrics.PROCESSING_LATENCY.observe(time.perf_counter() - started)
        self.recent.record(messages, result)

    def _matches(self, result: BatchResult) -> None:
        """Each match's outcome, lateness, latency and rating points, one increment per ladder."""
        now = time.time()
        counts: Counter[tuple[bool, str]] = Counter()
        late: Counter[str] = Counter()
        moved: dict[tuple[bool, str], float] = {}  # (created, ladder) → display-rating points
        for r in result.results:
            if r.voided:
                metrics.MATCHES_VOIDED_SKIPPED.labels(r.match.ladder).inc()
                continue
            if not r.duplicate and r.unrated is not None:
                metrics.MATCHES_UNRATED.labels(r.match.ladder, r.unrated).inc()
                continue
            if r.match.season is not None:
                if not r.duplicate:
                    metrics.SEASONS_STARTED.labels(r.match.ladder).inc()
                continue
            counts[r.duplicate, r.match.ladder] += 1
            if not r.duplicate:
                points = points_created(r, self.ladders[r.match.ladder].rating_model.display)
                moved[points > 0, r.match.ladder] = moved.get((points > 0, r.match.ladder), 0.0) + abs(points)
                if is_late(r):
                    late[r.match.ladder] += 1
            metrics.EVENT_LATENCY.observe(max(0.0, now - r.match.finished_at))
        for (duplicate, ladder), n in counts.items():
            (metrics.MATCHES_DUPLICATE if duplicate else metrics.MATCHES_APPLIED).labels(ladder).inc(n)
        for ladder, n in late.items():
            metrics.MATCHES_LATE.labels(ladder).inc(n)
        for (up, ladder), points in moved.items():  # one increment per ladder, not per match
            counter = metrics.RATING_POINTS_CREATED if up else metrics.RATING_POINTS_REMOVED
            counter.labels(ladder).inc(points)


def _reason_label(exc: Exception) -> str:
    """A low-cardinality metric label: the top-level field that failed, or 'decode'."""
    if isinstance(exc, ValidationError):
        return exc.path.split(".")[0].split("[")[0] or "event"
    return "decode"
