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
