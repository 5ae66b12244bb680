"""The capacity model's pure parts: key kinds, the per-key/per-entry fit, bucket projection."""

from __future__ import annotations

import math

import pytest

from stream_rater.bench.capacity_model import KeySample, Kind, KindSizes, fit, kind_of, kinds
from stream_rater.store.redis.keys import BUCKETS


def test_a_bucket_number_or_a_player_id_is_not_part_of_the_kind():
    assert kind_of("players:17") == ("players", True)
    assert kind_of("h:p42") == ("h", True)
    assert kind_of("mk:expiry") == ("mk:expiry", False)
    assert kind_of("lb") == ("lb", False)


def test_the_fit_splits_a_cost_per_key_from_a_cost_per_entry():
    samples = [KeySample(f"players:{i}", 70 + 40 * n, n) for i, n in enumerate([1, 2, 3, 5, 8])]
    assert fit(samples) == pytest.approx((70.0, 40.0))


def test_a_line_through_noise_prices_per_entry_rather_than_a_negative_cost_per_key():
    samples = [
        KeySample(f"mk:{i}", usage, n) for i, (usage, n) in enumerate([(100, 1), (900, 10), (2000, 20)])
    ]
    assert fit(samples) == pytest.approx((0.0, 3000 / 31))


def test_keys_holding_equal_counts_are_priced_per_entry():
    assert fit([KeySample("lb", 900, 10)]) == (0.0, 90.0)


def test_a_bucketed_kind_projects_the_expected_non_empty_buckets_of_its_ids():
    kind = Kind("players", "players", 3, 9, 0, per_key=70.0, per_entry=40.0, buckets=1024)
    expected = 1024 * (1 - math.exp(-2048 / 1024)) * 70 + 3 * 2048 * 40
    assert kind.project(2048, 3.0) == pytest.approx(expected)


def test_players_are_bucketed_as_the_store_buckets_them_and_marker_slots_stay_as_many():
    found = kinds(
        [KeySample("players:0", 110, 1), KeySample("players:700", 150, 2), KeySample("mk:9", 900, 10)]
    )
    assert [(k.name, k.driver, k.buckets) for k in found] == [
        ("mk", "markers", 0),
        ("players", "players", BUCKETS),
    ]
    assert found[0].project(1e6, 1.0) == pytest.approx(1e6 * 90)


def test_projections_scale_by_the_used_memory_overhead_and_keep_fixed_kinds():
    sizes = KindSizes(
        [Kind("lb", "players", 1, 100, 9000, 0.0, 90.0, 0), Kind("meta", "fixed", 1, 2, 100, 0.0, 50.0, 0)],
        players=100,
        markers=10,
        overhead=1.1,
    )
    assert sizes.project(1000, 0) == pytest.approx({"lb": 1.1 * 90_000, "meta": 1.1 * 100})
    assert sizes.per_item("players") == pytest.approx(1.1 * 90)
