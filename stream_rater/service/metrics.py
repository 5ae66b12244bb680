"""Prometheus metrics of the worker (prometheus-client; seconds as units, ``_total``
counters, no player ids as labels). Served at ``/metrics`` by the worker's web server."""

from __future__ import annotations

import bisect
import collections
import functools
from collections.abc import Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

MATCHES_CONSUMED = Counter("stream_rater_matches_consumed", "Match-finished events read from Kafka")
MATCHES_APPLIED = Counter(
    "stream_rater_matches_applied", "Matches applied (committed to the store)", ["ladder"]
)
MATCHES_DUPLICATE = Counter(
    "stream_rater_matches_duplicate", "Matches skipped because they had been applied already", ["ladder"]
)
MATCHES_REJECTED = Counter(
    "stream_rater_matches_rejected", "Invalid match events, by reason (the failing field)", ["reason"]
)
MATCHES_VOIDED_SKIPPED = Counter(
    "stream_rater_matches_voided_skipped",
    "Matches not applied because an operator voided them (stream-rater void)",
    ["ladder"],
)
CORRECTIONS = Counter(
    "stream_rater_corrections",
    "Correction requests from the corrections topic, by kind (void, unvoid, rerate) and outcome "
    "(switched, nothing_to_do, rejected, failed)",
    ["kind", "outcome"],
)
MATCHES_VOIDED = Counter(
    "stream_rater_matches_voided",
    "Matches voided (or, kind=unvoid, un-voided) by correction requests",
    ["ladder", "kind"],
)
RERATE_MATCHES = Counter(
    "stream_rater_rerate_matches", "Matches re-rated into new generations by correction requests", ["ladder"]
)
RERATE_CORRECTION_EVENTS = Counter(
    "stream_rater_rerate_correction_events", "Correction events sent by re-rates the worker ran", ["ladder"]
)
RERATE_RUNNING = Gauge(
    "stream_rater_rerate_running",
    "1 while this worker re-rates the ladder for a correction request",
    ["ladder"],
)
RERATE_LAST_SWITCH = Gauge(
    "stream_rater_rerate_last_switch_timestamp_seconds",
    "When this worker last switched the ladder to a re-rated generation (Unix time)",
    ["ladder"],
)
RERATE_LAST_BLOCKED = Gauge(
    "stream_rater_rerate_last_blocked_seconds",
    "How long live commits of the ladder were refused at its last switch (freeze to switch; the corrected players are then held until their events are sent)",
    ["ladder"],
)
MATCHES_UNRATED = Counter(
    "stream_rater_matches_unrated",
    'Matches recorded but not rated, by reason: declared ("rated": false), min_duration, min_players',
    ["ladder", "reason"],
)
RATING_POINTS_CREATED = Counter(
    "stream_rater_rating_points_created",
    "Display-rating points newly applied matches created: per match, the sum over its players of "
    "after - before when positive (0 for zero-sum Elo; a rating floor lifting a loser adds)",
    ["ladder"],
)
RATING_POINTS_REMOVED = Counter(
    "stream_rater_rating_points_removed",
    "Display-rating points newly applied matches removed: per match, minus the sum over its players "
    "of after - before when negative",
    ["ladder"],
)
RANKED_PLAYERS = Gauge("stream_rater_ranked_players", "Players on the ladder's live leaderboard", ["ladder"])
RANKED_RATING_SUM = Gauge(
    "stream_rater_ranked_rating_sum", "Sum of the display ratings of the ladder's ranked players", ["ladder"]
)
RANKED_RATING_MEAN = Gauge(
    "stream_rater_ranked_rating_mean", "Mean display rating of the ladder's ranked players", ["ladder"]
)
ACTIVE_PLAYERS = Gauge(
    "stream_rater_active_players",
    "Ranked players active within leaderboard_active_days (the ranked ones: idle players leave the leaderboard)",
    ["ladder"],
)
ACTIVE_RATING_SUM = Gauge(
    "stream_rater_active_rating_sum",
    "Sum of the display ratings of the ladder's active ranked players",
    ["ladder"],
)
ACTIVE_RATING_MEAN = Gauge(
    "stream_rater_active_rating_mean", "Mean display rating of the ladder's active ranked players", ["ladder"]
)
RATING_SUM_DRIFT = Gauge(
    "stream_rater_rating_sum_drift",
    "The ladder's running sum of ranked display ratings (kept by the commits) less an exact recount "
    "of its leaderboard, at the last check (every inflation_interval)",
    ["ladder"],
)
RATING_TOTALS_AGE = Gauge(
    "stream_rater_rating_totals_timestamp_seconds",
    "When the ladder's rating totals (ranked and active players, sums, means) were read (Unix time)",
    ["ladder"],
)
SEASONS_STARTED = Counter(
    "stream_rater_seasons_started", "Season-start records applied (soft resets of every player)", ["ladder"]
)
MATCHES_LATE = Counter(
    "stream_rater_matches_late",
    "Matches applied in log order although they finished before a player's last applied match",
    ["ladder"],
)
MATCHES_MISKEYED = Counter(
    "stream_rater_matches_miskeyed",
    "Match records not keyed by their ladder (order not guaranteed)",
    ["ladder", "partition"],
)
SPLIT_LADDERS = Gauge(
    "stream_rater_split_ladders",
    "Partitions a split ladder's match records arrived on at this worker (present only when > 1)",
    ["ladder"],
)
LADDER_PARTITION = Gauge(
    "stream_rater_ladder_partition",
    "1 for each partition of the matches topic a ladder's records arrived on at this worker",
    ["ladder", "partition"],
)
STORE_LOSSES = Counter(
    "stream_rater_store_losses",
    "Times the store was found to hold less of a ladder than was committed (data lost)",
    ["ladder"],
)
API_REFUSALS = Counter(
    "stream_rater_api_refusals",
    "Requests the read API and dashboard refused (service/auth), by reason: no_credential, "
    "bad_credential (401), scope (403), rate (429)",
    ["reason"],
)
STORE_REBUILDS = Counter(
    "stream_rater_store_rebuilds",
    "Automatic rebuilds of a lost ladder from the matches topic (STREAM_RATER_ON_STORE_LOSS=rebuild), "
    "by outcome: rebuilt, refused (the topic lacks its history's head), busy (another holds the "
    "ladder's lock), failed (an error; tried again)",
    ["ladder", "outcome"],
)
LADDERS_STOPPED = Gauge(
    "stream_rater_ladders_stopped", "Ladders not being applied because their stored data was lost"
)
STORE_REFUSALS = Counter(
    "stream_rater_store_refusals",
    "Store operations Redis refused on a healthy connection (the batch is held and retried), "
    "by reason: the lower-case error code (oom, readonly, misconf, noreplicas, masterdown, busy, ...)",
    ["reason"],
)
STORE_REFUSING = Gauge(
    "stream_rater_store_refusing", "1 while a batch is held because Redis refuses its writes, else 0"
)
_SCORED = ["ladder", "scorer"]
PREDICTED_MATCHES = Counter(
    "stream_rater_predicted_matches",
    "Matches whose pre-match prediction was scored (scorer live: the ladder's model)",
    _SCORED,
)
PREDICTED_PAIRS = Counter(
    "stream_rater_predicted_pairs", "Decisive pairs of teams scored for wrong order", _SCORED
)
PREDICTED_WRONG_PAIRS = Counter(
    "stream_rater_predicted_wrong_pairs",
    "Decisive pairs the prediction had in the wrong order (equal probabilities count 1/2)",
    _SCORED,
)
PREDICTED_TWO_TEAM = Counter(
    "stream_rater_predicted_two_team_matches", "Two-team matches scored by log-loss and Brier", _SCORED
)
PREDICTED_LOG_LOSS = Counter(
    "stream_rater_predicted_log_loss", "Summed log-loss of the two-team matches scored", _SCORED
)
PREDICTED_BRIER = Counter(
    "stream_rater_predicted_brier", "Summed Brier score of the two-team matches scored", _SCORED
)
CALIBRATION_PAIRS = Counter(
    "stream_rater_calibration_pairs",
    "Scored pairs by calibration bin of P(first-listed team wins) (bin: its lower edge)",
    [*_SCORED, "bin"],
)
CALIBRATION_PREDICTED = Counter(
    "stream_rater_calibration_predicted",
    "Summed P(first-listed team wins) of the scored pairs, by calibration bin",
    [*_SCORED, "bin"],
)
CALIBRATION_OBSERVED = Counter(
    "stream_rater_calibration_observed",
    "Scored pairs the first-listed team won, by calibration bin",
    [*_SCORED, "bin"],
)
#: Each `processor.quality` sum's counter (the per-bin ones by their suffix).
_QUALITY_SUMS = {
    "matches": PREDICTED_MATCHES,
    "pairs": PREDICTED_PAIRS,
    "wrong": PREDICTED_WRONG_PAIRS,
    "two_team": PREDICTED_TWO_TEAM,
    "log_loss": PREDICTED_LOG_LOSS,
    "brier": PREDICTED_BRIER,
}
_QUALITY_BINS = {"n": CALIBRATION_PAIRS, "p": CALIBRATION_PREDICTED, "o": CALIBRATION_OBSERVED}


def observe_all(histogram: Histogram, amounts: Sequence[float]) -> None:
    """``histogram.observe(a)`` for each of `amounts` (an unlabelled histogram), as one increment
    of each bucket and of the sum: a batch's matches at once, where observing each costs
    microseconds (a Python scan of the buckets and a lock per increment). prometheus_client has
    no such call; its bucket and sum values are the ones `observe` increments."""
    if not amounts:
        return
    counts = collections.Counter(map(functools.partial(bisect.bisect_left, histogram._upper_bounds), amounts))
    histogram._sum.inc(sum(amounts))
    for bucket, n in counts.items():
        histogram._buckets[bucket].inc(n)


def count_quality(ladder: str, scorer: str, sums: dict[str, float], bins: int) -> None:
    """Add a committed batch's prediction-quality `sums` (`processor.quality`) to the counters,
    so that any window is ``rate()``-computable (e.g. wrong order = rate(wrong) / rate(pairs))."""
    for name, value in sums.items():
        _quality_counter(name, ladder, scorer, bins).inc(value)


@functools.lru_cache(maxsize=1 << 12)
def _quality_counter(name: str, ladder: str, scorer: str, bins: int) -> Any:
    """The labelled counter of quality sum `name` (``kind:k:bin`` for a calibration bin's) for
    `ladder` and `scorer`: found once, as each batch adds to some 30 of them, and
    ``labels()`` checks and locks on every call."""
    counter = _QUALITY_SUMS.get(name)
    if counter is not None:
        return counter.labels(ladder, scorer)
    _, k, kind = name.split(":")
    return _QUALITY_BINS[kind].labels(ladder, scorer, f"{int(k) / bins:.1f}")


def by_ladder(metric: MetricWrapperBase, ladder: str) -> Any:
    """``metric.labels(ladder)`` of a per-ladder metric that is never removed, found once."""
    return _labelled(metric, ladder)


@functools.lru_cache(maxsize=1 << 12)
def _labelled(metric: MetricWrapperBase, ladder: str) -> Any:
    return metric.labels(ladder)


DEAD_LETTERS = Counter("stream_rater_dead_letters", "Events written to the dead-letter topic")
RATING_CHANGES = Counter("stream_rater_rating_changes_emitted", "Rating-changed events produced")
COMMIT_CONFLICTS = Counter("stream_rater_commit_conflicts", "Store commits refused by the version check")
BATCH_RETRIES = Counter(
    "stream_rater_batch_retries", "Batches retried after a Redis or broker error", ["error"]
)
BATCH_SIZE = Histogram(
    "stream_rater_batch_size",
    "Events per processed batch",
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500),
)
EVENT_LATENCY = Histogram(
    "stream_rater_event_latency_seconds",
    "Match finished_at → rating change emitted",
    buckets=(*_LATENCY_BUCKETS, 60.0, 300.0, 3600.0),
)
PROCESSING_LATENCY = Histogram(
    "stream_rater_processing_latency_seconds",
    "Batch consumed → committed and produced",
    buckets=_LATENCY_BUCKETS,
)
STORE_ROUND_TRIP = Histogram(
    "stream_rater_store_round_trip_seconds",
    "Duration of one store operation",
    ["operation"],
    buckets=_LATENCY_BUCKETS,
)
GC_PAUSE = Histogram(
    "stream_rater_gc_pause_seconds",
    "Pauses of Python's cyclic garbage collector in the worker, by generation (2 = a full collection)",
    ["generation"],
    buckets=_LATENCY_BUCKETS,
)
CONSUMER_LAG = Gauge("stream_rater_consumer_lag", "Messages behind the partition end", ["topic", "partition"])
WORKER_UP = Gauge("stream_rater_worker_up", "1 while the worker runs")
READY = Gauge(
    "stream_rater_ready", "1 while /readyz answers 200 (evaluated at each /readyz and /metrics request)"
)
PARTITIONS_ASSIGNED = Gauge(
    "stream_rater_partitions_assigned", "Partitions of the topic assigned to this worker", ["topic"]
)
TOPIC_PARTITIONS = Gauge(
    "stream_rater_topic_partitions",
    "The topic's partition count as this worker's consumer knows it",
    ["topic"],
)
PARTITIONS_HELD = Gauge(
    "stream_rater_partitions_held",
    "Partitions this worker holds because a fetched record batch cannot be decoded (/readyz names them)",
)
PARTITIONS_STALLED = Gauge(
    "stream_rater_partitions_stalled",
    "Partitions assigned here with records waiting and none applied for stall_after seconds (/readyz names them)",
)


def exposition() -> tuple[bytes, str]:
    """The current metrics in the Prometheus text format, with its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def total(metric: MetricWrapperBase, suffix: str = "_total") -> float:
    """The sum over all label values of a metric's ``<name><suffix>`` samples (``_total`` of
    a counter, ``_sum``/``_count`` of a histogram)."""
    return sum(
        sample.value
        for family in metric.collect()
        for sample in family.samples
        if sample.name == family.name + suffix
    )


CHECKPOINTS_WRITTEN = Counter(
    "stream_rater_checkpoints_written",
    "Ladder checkpoints written and verified (stream-rater checkpoint)",
    ["ladder"],
)
CHECKPOINT_FAILURES = Counter(
    "stream_rater_checkpoint_failures",
    "Checkpoint rounds that failed (sink or broker down, store unreachable, or a checkpoint that "
    "differed from the live ladder: outcome unverified); checkpoints are delayed, rating goes on",
    ["ladder", "outcome"],
)
CHECKPOINT_AGE = Gauge(
    "stream_rater_checkpoint_age_seconds",
    "Seconds since the ladder's last verified checkpoint was written (alert when it exceeds the "
    "checkpoint cadence by far: voids and recoveries then replay more, and the retention window shrinks)",
    ["ladder"],
)
