"""The worker's /metrics, /healthz and /readyz, scraped from a real worker subprocess."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import replace

import pytest

from tests.e2e.e2e_support import counted, scraped
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e

CONSUMED = "stream_rater_matches_consumed_total"
APPLIED = "stream_rater_matches_applied_total"
DUPLICATES = "stream_rater_matches_duplicate_total"
DEAD = "stream_rater_dead_letters_total"


def test_processed_matches_move_the_counters_by_exactly_their_number(web_worker):
    """N valid and M invalid matches move the consumed, applied, emitted and dead-letter counters by exactly N+M, N, 2N and M."""
    n, invalid = 40, 3
    players = [f"player-{i}" for i in range(8)]
    events = [
        web_worker.duel(f"m-{i}", players[i % 8], players[(i + 3) % 8], 1_700_000_000 + i) for i in range(n)
    ]
    bad = [{"match_id": f"bad-{i}", "ladder": web_worker.ladder, "teams": []} for i in range(invalid)]
    before = web_worker.metrics()

    web_worker.publish(events + bad)

    def done() -> bool:  # a batch's counters all move in one step of the event loop
        now = web_worker.metrics()
        return (
            now.total(APPLIED) >= before.total(APPLIED) + n
            and now.total(DEAD) >= before.total(DEAD) + invalid
        )

    web_worker.wait_until(done, "every match applied or dead-lettered")
    after = web_worker.metrics()

    def moved(name: str, **labels: str) -> float:
        return after.total(name, **labels) - before.total(name, **labels)

    assert moved(CONSUMED) == n + invalid
    assert moved(APPLIED, ladder=web_worker.ladder) == n
    assert moved(DUPLICATES) == 0
    assert moved("stream_rater_rating_changes_emitted_total") == 2 * n
    assert moved("stream_rater_matches_rejected_total") == invalid
    assert moved(DEAD) == invalid
    assert moved("stream_rater_event_latency_seconds_count") == n
    assert moved("stream_rater_batch_size_sum") == n + invalid
    assert (
        moved("stream_rater_processing_latency_seconds_count") == moved("stream_rater_batch_size_count") >= 1
    )
    assert after.total("stream_rater_worker_up") == 1
    assert not after.label_values() & set(players), "player ids must never be metric labels"


def test_redelivered_matches_count_as_duplicates_not_applied(web_worker):
    """Publishing the same matches twice moves the duplicate counter by their number and leaves applied alone."""
    events = [web_worker.duel(f"d-{i}", "a", "b", 1_700_000_000 + i) for i in range(10)]
    web_worker.publish(events)
    web_worker.wait_until(lambda: web_worker.metrics().total(APPLIED) >= 10, "the first delivery")
    before = web_worker.metrics()

    web_worker.publish(events)
    web_worker.wait_until(lambda: web_worker.metrics().total(DUPLICATES) >= 10, "the second delivery")
    after = web_worker.metrics()

    def moved(name: str) -> float:
        return after.total(name, ladder=web_worker.ladder) - before.total(name, ladder=web_worker.ladder)

    assert moved(DUPLICATES) == 10
    assert moved(APPLIED) == 0


def test_health_and_readiness_answer_with_json(web_worker):
    """/healthz answers 200 and /readyz 200 listing the worker's partitions of its matches topic."""
    status, body = web_worker.get("/healthz")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    status, body = web_worker.get("/readyz")
    assert status == 200
    assert json.loads(body) == {"ready": True, "partitions": list(range(web_worker.settings.partitions))}


def test_a_scrape_says_ready_and_how_many_partitions_are_assigned_of_how_many(web_worker):
    """A ready worker, the only one of its group, exports ``stream_rater_ready`` 1 and every
    partition of its matches topic assigned to it out of the topic's count (as its consumer
    knows it): the alert on a partition without a consumer compares the two."""
    topic, partitions = web_worker.settings.topic_matches, web_worker.settings.partitions
    scrape = web_worker.metrics()
    assert scrape.total("stream_rater_ready") == 1
    assert scrape.total("stream_rater_partitions_assigned", topic=topic) == partitions
    assert scrape.total("stream_rater_topic_partitions", topic=topic) == partitions


def test_consumer_lag_is_exported_per_assigned_partition(web_worker):
    """The consumer-lag gauge has one non-negative series per assigned partition of the matches topic."""
    topic = web_worker.settings.topic_matches

    def lag_partitions() -> set[str]:
        return {
            dict(labels)["partition"]
            for (name, labels), value in web_worker.metrics().items()
            if name == "stream_rater_consumer_lag" and dict(labels)["topic"] == topic and value >= 0
        }

    expected = {str(p) for p in range(web_worker.settings.partitions)}
    web_worker.wait_until(lambda: lag_partitions() == expected, "a lag series per partition", timeout=30)


def test_inflation_metrics_equal_the_stored_states_and_the_events(stream_factory):
    """An Elo ladder with a rating floor and a 1-day activity rule, on a real broker and Redis:
    the ranked and active players' count, rating sum and mean on /metrics equal those of the
    eligible players computed from the states in Redis (the idle ones left the leaderboard), the
    running sum's drift from a recount is nil; the points created and removed equal the sums over the matches
    of after − before read back from the updates topic (the floor makes them non-zero)."""
    stream = stream_factory(
        partitions=1, model="elo", params={"rating_floor": 1480, "leaderboard_active_days": 1}
    )
    stream.settings = replace(stream.settings, inflation_interval=0.0)
    now = time.time()
    rng = random.Random(4)
    events = []
    for i in range(120):
        recent = i >= 60  # players p6.. only play recently, p0..p5 long ago
        loser, winner = (
            (f"p{rng.randrange(6, 9)}", f"p{rng.randrange(9, 12)}")
            if recent
            else (f"p{rng.randrange(3)}", f"p{rng.randrange(3, 6)}")
        )
        events.append(
            stream.match(f"m{i}", winner, loser, at=(now - 60 + i * 0.1) if recent else 1_700_000_000 + i)
        )
    stream.start_worker()
    stream.publish(events)
    updates = [json.loads(r.value) for r in stream.updates(2 * len(events))]
    states = stream.states()
    port = stream.web_ports[0]
    wait_for(lambda: counted(port, stream.ladder) == len(events), "every match counted", 30)

    since = time.time() - 86_400
    active = [s.mu for s in states.values() if s.last_played >= since]
    assert len(active) == 6 and len(states) == 12
    expected = {  # idle players leave the leaderboard: ranked and active are the eligible ones
        "ranked_players": len(active),
        "ranked_rating_sum": math.fsum(active),
        "ranked_rating_mean": math.fsum(active) / len(active),
        "active_players": len(active),
        "active_rating_sum": math.fsum(active),
        "active_rating_mean": math.fsum(active) / len(active),
    }
    for name, value in expected.items():
        assert scraped(port, f'stream_rater_{name}{{ladder="{stream.ladder}"}}') == pytest.approx(
            value, rel=1e-12
        )
    drift = scraped(port, f'stream_rater_rating_sum_drift{{ladder="{stream.ladder}"}}')
    assert drift == pytest.approx(0.0, abs=1e-9)

    per_match: dict[str, float] = {}
    for event in updates:
        per_match[event["match_id"]] = (
            per_match.get(event["match_id"], 0.0) + event["after"]["mu"] - event["before"]["mu"]
        )
    created = math.fsum(p for p in per_match.values() if p > 0)
    removed = -math.fsum(p for p in per_match.values() if p < 0)
    assert created > 10.0
    assert counted(port, stream.ladder, "stream_rater_rating_points_created_total") == pytest.approx(
        created, abs=1e-6
    )
    assert counted(port, stream.ladder, "stream_rater_rating_points_removed_total") == pytest.approx(
        removed, abs=1e-6
    )
