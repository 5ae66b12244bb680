"""The prediction-quality counters (stream_rater.service.metrics.count_quality): each sum of
`processor.quality` lands on its counter, the per-bin ones labelled by the bin's lower edge."""

from __future__ import annotations

from stream_rater.processor.quality import BINS, increments, record
from stream_rater.rating.scoring import MatchScore
from stream_rater.service import metrics


def value(counter, *labels) -> float:
    return counter.labels(*labels)._value.get()


def test_quality_sums_land_on_their_counters():
    ladder = "metrics-test"
    sums = increments([record(MatchScore([1.0], 2.0, 0.5, [(0.73, False)]))])
    metrics.count_quality(ladder, "live", sums, BINS)
    metrics.count_quality(ladder, "live", sums, BINS)
    assert value(metrics.PREDICTED_MATCHES, ladder, "live") == 2
    assert value(metrics.PREDICTED_WRONG_PAIRS, ladder, "live") == 2.0
    assert value(metrics.PREDICTED_LOG_LOSS, ladder, "live") == 4.0
    assert value(metrics.PREDICTED_BRIER, ladder, "live") == 1.0
    assert value(metrics.CALIBRATION_PAIRS, ladder, "live", "0.7") == 2
    assert value(metrics.CALIBRATION_PREDICTED, ladder, "live", "0.7") == 1.46
    assert value(metrics.CALIBRATION_OBSERVED, ladder, "live", "0.7") == 0


def test_observing_a_batch_at_once_counts_as_observing_each():
    from prometheus_client import Histogram

    one, batch = (Histogram(f"h_{name}", "test", buckets=(0.1, 1.0, 5.0), registry=None) for name in "ab")
    amounts = [0.0, 0.1, 0.5, 1.0, 3.0, 7.0, 7.5, 0.05]
    for a in amounts:
        one.observe(a)
    metrics.observe_all(batch, amounts)
    metrics.observe_all(batch, [])
    samples = [
        [(s.name[3:], s.labels, s.value) for s in h.collect()[0].samples if "created" not in s.name]
        for h in (one, batch)
    ]
    assert samples[0] == samples[1] and samples[0][-2][2] == len(amounts)
