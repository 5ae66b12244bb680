"""Live prediction quality end to end: two workers in turn serve one ladder, a redelivered
stretch of matches among the input; the worker's ``GET …/quality`` (cumulative and over the
last N matches) and its Prometheus counters equal `evaluate`'s figures on the same matches,
on Tansu and on Apache Kafka."""

from __future__ import annotations

import json
import urllib.request

import pytest

from stream_rater.contracts import parse_match
from stream_rater.local.demo import stop_process
from stream_rater.offline.evaluate import score
from tests.e2e.e2e_support import scraped
from tests.e2e.streams import random_matches
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka]

MATCHES = 300
LAST = 100


def quality(port: int, ladder: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/ladders/{ladder}/quality?last={LAST}"
    with urllib.request.urlopen(url, timeout=10) as response:
        answer: dict = json.loads(response.read())
    return answer


def assert_same(live: dict, replayed: dict) -> None:
    for name in ("matches", "pairs", "two_team"):
        assert live[name] == replayed[name], name
    for name in ("wrong_order", "log_loss", "brier"):
        assert live[name] == pytest.approx(replayed[name], rel=1e-9), name
    for got, want in zip(live["calibration"], replayed["calibration"], strict=True):
        assert got["count"] == want["count"]
        for name in ("mean_predicted", "observed"):
            assert got[name] == (want[name] and pytest.approx(want[name], rel=1e-9))


def live_counter(port: int, ladder: str, metric: str) -> float:
    return scraped(port, f'stream_rater_{metric}_total{{ladder="{ladder}",scorer="live"}}')


def test_live_quality_equals_evaluate_across_workers_and_redeliveries(stream_factory):
    """Worker A applies the first half; after it stops, worker B applies the rest, with 50 of
    A's matches published again (applied once: not counted again). B's quality answer equals
    `evaluate` of the 300 distinct matches, the last 100 too; A's and B's counters add up to it."""
    stream = stream_factory(partitions=1)
    ladder = stream.ladder
    matches = random_matches(stream, MATCHES, players=20, seed=5)
    half = MATCHES // 2
    first = stream.start_worker()
    stream.publish(matches[:half])
    port = stream.web_ports[0]
    wait_for(lambda: live_counter(port, ladder, "predicted_matches") == half or None, "first half counted")
    by_first = {m: live_counter(port, ladder, m) for m in ("predicted_pairs", "predicted_wrong_pairs")}
    stop_process(first)
    stream.start_worker()
    stream.publish(matches[half - 50 : half] + matches[half:])
    answer = wait_for(
        lambda: (q := quality(stream.web_ports[1], ladder))["cumulative"]["matches"] == MATCHES and q,
        "every match scored",
    )
    parsed = [parse_match(m, stream.ladders) for m in matches]
    [_, recent], whole, _ = score([parsed[:-LAST], parsed[-LAST:]], stream.ladders)
    live, replayed = answer["cumulative"], whole.to_dict()
    print(
        "live vs evaluate: "
        + ", ".join(
            f"{n} {live[n]!r} / {replayed[n]!r}"
            for n in ("matches", "pairs", "wrong_order", "log_loss", "brier")
        )
    )
    assert_same(live, replayed)
    assert_same(answer["last"], recent.to_dict())
    port = stream.web_ports[1]
    wait_for(
        lambda: live_counter(port, ladder, "predicted_matches") == MATCHES - half or None, "rest counted"
    )
    pairs = by_first["predicted_pairs"] + live_counter(port, ladder, "predicted_pairs")
    wrong = by_first["predicted_wrong_pairs"] + live_counter(port, ladder, "predicted_wrong_pairs")
    assert pairs == whole.pairs and wrong / pairs == pytest.approx(whole.wrong_order, rel=1e-12)
