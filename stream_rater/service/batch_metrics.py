"""`BatchMetrics`: the batch handler's sensor. The handler calls it once per event — a batch
consumed, a record rejected, a match dead-lettered for the model, a retry, a batch finished —
and it keeps the metrics (`service.metrics`), the dead letters' log (`DeadLetterLog`) and the
dashboard's recent activity (`web.Recent`), off the handler's path."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from faust.types import TP

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import ValidationError
from stream_rater.processor import BatchResult, is_late, points_created, quality
from stream_rater.rating import Rating
from stream_rater.service import metrics
from stream_rater.service.dead_letter import DeadLetter, DeadLetterLog
from stream_rater.service.order_watch import Message

#: Per-second series of the overview: name → counter whose rate is charted.
_RATES: dict[str, Any] = {
    "consumed": metrics.MATCHES_CONSUMED,
    "applied": metrics.MATCHES_APPLIED,
    "dead_letters": metrics.DEAD_LETTERS,
    "conflicts": metrics.COMMIT_CONFLICTS,
}


class Recent:
    """This worker's recent activity: rating changes and per-second samples in ring buffers,
    and the next offset to process of each partition it finished a batch of."""

    def __init__(self, feed_size: int = 200, window: int = 600) -> None:
        """Keep the last `feed_size` rating changes and `window` samples (seconds)."""
        self.feed: deque[dict[str, Any]] = deque(maxlen=feed_size)
        self.samples: deque[dict[str, float | None]] = deque(maxlen=window)
        self.next_offsets: dict[tuple[str, int], int] = {}
        self._previous: tuple[float, dict[str, float]] | None = None

    def record(self, messages: Sequence[Message], result: BatchResult) -> None:
        """Called by `BatchMetrics.finished` with each batch: keep the changes of newly applied matches and
        advance the partitions' next offsets."""
        self.feed.extend(_last_changes(result, self.feed.maxlen))
        next_offsets = self.next_offsets
        for message in messages:  # `max` inlined: this runs for every record
            key, offset = (message.topic, message.partition), message.offset
            if offset >= next_offsets.get(key, 0):
                next_offsets[key] = offset + 1

    def forget(self, partitions: Iterable[TP]) -> None:
        """Drop the next offsets of `partitions` (they were (re)assigned: stale until a batch)."""
        for tp in partitions:
            self.next_offsets.pop((tp.topic, tp.partition), None)

    def sample(self, now: float | None = None) -> None:
        """Append the rates since the previous call; the first call only sets the baseline."""
        now = time.time() if now is None else now
        counts = {name: metrics.total(metric) for name, metric in _RATES.items()}
        counts["batches"] = metrics.total(metrics.PROCESSING_LATENCY, "_count")
        counts["seconds"] = metrics.total(metrics.PROCESSING_LATENCY, "_sum")
        if self._previous is not None and now > self._previous[0]:
            then, before = self._previous
            row: dict[str, float | None] = {"t": now}
            row.update({name: (counts[name] - before[name]) / (now - then) for name in _RATES})
            batches = counts["batches"] - before["batches"]
            row["latency"] = (counts["seconds"] - before["seconds"]) / batches if batches else None
            self.samples.append(row)
        self._previous = (now, counts)

    def series(self) -> dict[str, list[float | None]]:
        """The samples as columns (``t``, one per rate, ``latency``), oldest first."""
        names = ["t", *_RATES, "latency"]
        return {name: [row[name] for row in self.samples] for name in names}


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
        metrics.RATING_CHANGES.inc(sum(len(r.events) for r in result.results))  # no list of them
        metrics.PROCESSING_LATENCY.observe(time.perf_counter() - started)
        self.recent.record(messages, result)

    def _matches(self, result: BatchResult) -> None:
        """Each match's outcome, lateness, latency and rating points, one increment per ladder."""
        now = time.time()
        counts: dict[tuple[bool, str], int] = {}
        late: dict[str, int] = {}
        moved: dict[tuple[bool, str], float] = {}  # (created, ladder) → display-rating points
        displays: dict[str, Callable[[Rating], float]] = {}  # ladder → its model's display rating
        waits: list[float] = []  # finished_at → now per match: one histogram update per batch
        for r in result.results:
            match, duplicate = r.match, r.duplicate
            if r.voided:
                metrics.MATCHES_VOIDED_SKIPPED.labels(match.ladder).inc()
                continue
            if not duplicate and r.unrated is not None:
                metrics.MATCHES_UNRATED.labels(match.ladder, r.unrated).inc()
                continue
            if match.season is not None:
                if not duplicate:
                    metrics.SEASONS_STARTED.labels(match.ladder).inc()
                continue
            ladder = match.ladder
            counts[duplicate, ladder] = counts.get((duplicate, ladder), 0) + 1
            if not duplicate:
                display = displays.get(ladder) or displays.setdefault(
                    ladder, self.ladders[ladder].rating_model.display
                )
                points = points_created(r, display)
                moved[points > 0, ladder] = moved.get((points > 0, ladder), 0.0) + abs(points)
                if is_late(r):
                    late[ladder] = late.get(ladder, 0) + 1
            wait = now - match.finished_at
            waits.append(wait if wait > 0.0 else 0.0)  # `max(0.0, wait)`, without a call per match
        metrics.observe_all(metrics.EVENT_LATENCY, waits)
        for (duplicate, ladder), n in counts.items():
            metrics.by_ladder(
                metrics.MATCHES_DUPLICATE if duplicate else metrics.MATCHES_APPLIED, ladder
            ).inc(n)
        for ladder, n in late.items():
            metrics.by_ladder(metrics.MATCHES_LATE, ladder).inc(n)
        for (up, ladder), points in moved.items():  # one increment per ladder, not per match
            counter = metrics.RATING_POINTS_CREATED if up else metrics.RATING_POINTS_REMOVED
            metrics.by_ladder(counter, ladder).inc(points)


def _last_changes(result: BatchResult, most: int | None) -> list[dict[str, Any]]:
    """The last `most` (None: all) rating changes of `result`'s newly applied matches, in
    order: walked from the end, so a large batch costs only what the feed keeps."""
    changes: list[dict[str, Any]] = []
    for match in reversed(result.results):
        if not match.duplicate:
            changes += reversed(match.events)
            if most is not None and len(changes) >= most:
                break
    return (changes if most is None else changes[:most])[::-1]


def _reason_label(exc: Exception) -> str:
    """A low-cardinality metric label: the top-level field that failed, or 'decode'."""
    if isinstance(exc, ValidationError):
        return exc.path.split(".")[0].split("[")[0] or "event"
    return "decode"
