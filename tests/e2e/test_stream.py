"""The streaming service end to end: real worker processes on a real Kafka-protocol broker
and Redis — equality with replay, duplicates, concurrent workers, kill -9 recovery, a
graceful stop mid-stream, DLQ."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import signal
import threading
import urllib.request

import pytest
import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from stream_rater.kafka import bootstrap_servers, home_partition, topic_partitions
from stream_rater.local.demo import ladders_env, stop_process
from stream_rater.store import PlayerState
from stream_rater.store.redis.keys import bucket
from tests.e2e.e2e_support import worker_test_env
from tests.e2e.streams import (
    Stream,
    assert_equals_replay,
    assert_unbroken_chains,
    by_event_id,
    decoded,
    exact,
    random_matches,
    read_topic,
    replay_events,
    without_processed_at,
)
from tests.helpers import cli, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka]


@pytest.mark.parametrize("model", ["trueskill", "glicko", "glicko2"])
def test_one_partition_stream_equals_replay(stream_factory, model):
    """On one partition the worker emits exactly replay's events: one per player per match,
    and its stored states (Glicko-2's volatility too) are replay's — TrueSkill, Glicko-1 and
    Glicko-2 alike."""
    stream = stream_factory(partitions=1, model=model)
    stream.start_worker()
    matches = random_matches(stream, 400, players=30, seed=1)
    stream.publish(matches)
    records = stream.updates(expected=2 * len(matches))
    expected, states = replay_events(stream, matches)
    assert without_processed_at(decoded(records)) == without_processed_at(expected)
    assert exact(stream.all_states()) == exact(states)


def test_ladders_over_partitions_equal_replay_and_verify_says_so(stream_factory, tmp_path):
    """Three ladders spread over four partitions, sharing player ids: each ladder's events and
    states equal a replay of the input; `verify` agrees, `replay --from-topic` reproduces the
    ladder's events, and a state changed behind the worker's back is reported (exit 1)."""
    stream = stream_factory(partitions=4, ladders=3)
    assert len({home_partition(n, 4) for n in stream.names}) == 3
    stream.start_worker()
    matches = random_matches(stream, 1500, players=25, seed=2)
    stream.publish(matches)
    assert_equals_replay(stream, matches, stream.updates(expected=2 * len(matches)))

    s = stream.settings
    env = ladders_env(stream.names)
    topic_flags = ["--broker", s.broker, "--topic-matches", s.topic_matches]
    for name in stream.names:
        ok = cli(
            "verify",
            "--ladder",
            name,
            "--store",
            s.redis_url,
            "--consumer-group",
            s.consumer_group,
            *topic_flags,
            env=env,
        )
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert ok.stdout.strip().endswith(" players, none differ from the replay")
    first = stream.ladder
    out = tmp_path / "from-topic.jsonl"
    replayed = cli("replay", "--from-topic", "--ladder", first, "--out", str(out), *topic_flags, env=env)
    assert replayed.returncode == 0, replayed.stderr
    expected, _ = replay_events(stream, [m for m in matches if m["ladder"] == first])
    from_topic = [json.loads(line) for line in out.read_text().splitlines()]
    assert without_processed_at(from_topic) == without_processed_at(expected)

    player, state = sorted(stream.states(first).items())[0]
    tamper(s.redis_url, first, player, state._replace(mu=state.mu + 1e-6))
    bad = cli(
        "verify",
        "--ladder",
        first,
        "--store",
        s.redis_url,
        "--consumer-group",
        s.consumer_group,
        *topic_flags,
        env=env,
    )
    assert bad.returncode == 1
    assert f"player {player}: live mu={state.mu + 1e-6!r}" in bad.stdout
    assert f"leaderboard: player {player}: live " in bad.stdout  # its row no longer its state's rating
    assert bad.stdout.strip().endswith(" players, 2 differ from the replay")


def tamper(redis_url: str, ladder: str, player: str, state: PlayerState) -> None:
    """Overwrite one stored state directly in Redis, as a bug or an operator might."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.hset(f"sr:{{{ladder}}}:players:{bucket(player)}", player, state.pack())
    finally:
        client.close()


def test_duplicated_match_events_are_applied_once(stream_factory):
    """The same match_id on several offsets and partitions is applied once and re-emitted
    unchanged while its marker holds its events; once the ladder's next match is committed the
    marker is shrunk (its events are with the broker), and a later copy re-emits nothing."""
    stream = stream_factory(partitions=2)
    stream.start_worker()
    match = stream.match("dup-1", "alice", "bob")

    async def send_copies(partitions: tuple[int, ...]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers(stream.settings.broker))
        await producer.start()
        try:
            for partition in partitions:
                await producer.send_and_wait(
                    stream.settings.topic_matches,
                    json.dumps(match).encode(),
                    key=b"dup-1",
                    partition=partition,
                )
        finally:
            await producer.stop()

    def by_event_id(expected: int) -> dict[str, list[dict]]:
        by_id: dict[str, list[dict]] = {}
        for r in stream.updates(expected=expected, key=lambda r: (r.partition, r.offset)):
            event = json.loads(r.value)
            by_id.setdefault(event["event_id"], []).append(event)
        return by_id

    asyncio.run(send_copies((0, 1, 0, 1)))
    copies = by_event_id(8)
    assert {i: len(c) for i, c in copies.items()} == {"dup-1:alice": 4, "dup-1:bob": 4}
    assert all(all(c == same[0] for c in same) for same in copies.values())
    stream.publish([stream.match("after-dups", "alice", "carol")])
    by_event_id(10)
    asyncio.run(send_copies((home_partition(stream.ladder, 2),)))
    stream.publish([stream.match("last", "bob", "carol")])
    assert {i: len(c) for i, c in by_event_id(12).items()} == {
        "dup-1:alice": 4,
        "dup-1:bob": 4,
        "after-dups:alice": 1,
        "after-dups:carol": 1,
        "last:bob": 1,
        "last:carol": 1,
    }
    states = stream.states()
    assert (states["alice"].games, states["bob"].games, states["carol"].games) == (2, 2, 2)


def test_two_workers_over_several_ladders_equal_replay(stream_factory):
    """Two workers sharing four partitions and three ladders with overlapping players: every
    event and final state is exactly replay's."""
    stream = stream_factory(partitions=4, batch_size=50, ladders=3)
    stream.start_worker()
    stream.start_worker()
    matches = random_matches(stream, 3000, players=12, seed=3)
    stream.publish(matches)
    assert_equals_replay(stream, matches, stream.updates(expected=2 * len(matches), timeout=240))


def test_kill_9_at_random_moments_applies_every_match_exactly_once_in_log_order(stream_factory):
    """kill -9 of either of two workers at random moments, three times, while three ladders
    stream over four partitions: each match applied once, chains unbroken, and every event and
    final state exactly what a replay of the input computes."""
    stream = stream_factory(partitions=4, batch_size=500, ladders=3)
    matches = random_matches(stream, 20_000, players=200, seed=4)
    # The last part is held back until the kills are done, so that each kill lands mid-stream
    # however slowly the killed workers restart (the first part may be all applied by then).
    first, rest = matches[:15_000], matches[15_000:]
    stream.start_worker()
    stream.start_worker()
    publisher = threading.Thread(target=stream.publish, args=(first,), kwargs={"rate": 1_000.0})
    publisher.start()
    rng = random.Random(5)
    for _ in range(3):
        target = min(stream.applied() + rng.randint(500, 2_500), len(first))
        wait_for(lambda goal=target: stream.applied() >= goal, f"{target} matches applied", 120)
        victim = rng.choice([w for w in stream.workers if w.poll() is None])
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        stream.start_worker()
    publisher.join()
    stream.publish(rest, rate=1_000.0)
    assert_equals_replay(stream, matches, stream.updates(expected=2 * len(matches), timeout=300))


def test_sigterm_mid_stream_finishes_the_batches_in_hand_and_commits_them(stream_factory):
    """SIGTERM while batches are in flight: the worker exits 0 after the batches it holds are
    applied, produced and committed — the group's committed offset is exactly the number of
    matches in Redis (one partition) — and a restarted worker goes on from there."""
    stream = stream_factory(partitions=1, batch_size=500)
    matches = random_matches(stream, 10_000, players=200, seed=6)
    worker = stream.start_worker()
    stream.publish(matches)
    store_games = lambda: sum(s.games for s in stream.states().values())  # noqa: E731
    wait_for(lambda: store_games() >= 3_000, "3000 games in the store", 120)
    assert stop_process(worker) == 0
    applied = store_games() // 2
    assert 0 < applied < len(matches), "the stop must land mid-stream to mean anything"
    assert committed_offset(stream) == applied
    stream.start_worker()
    events = decoded(stream.updates(expected=2 * len(matches), timeout=300))
    assert len(events) == 2 * len(matches)
    assert_unbroken_chains(events, stream.states())


def committed_offset(stream: Stream) -> int:
    """The consumer group's committed offset of the matches topic's partition 0."""

    async def read() -> int:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers(stream.settings.broker),
            group_id=stream.settings.consumer_group,
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            return await consumer.committed(TopicPartition(stream.settings.topic_matches, 0)) or 0
        finally:
            await consumer.stop()

    return asyncio.run(read())


def test_worker_creates_missing_topics_on_a_bare_broker(stream_factory):
    """A worker started before its topics exist creates all three with the configured partitions."""
    stream = stream_factory(partitions=3, create=False)
    stream.start_worker()

    async def partition_counts() -> dict[str, int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers(stream.settings.broker))
        await consumer.start()
        try:
            names = (stream.settings.topic_matches, stream.settings.topic_updates, stream.settings.topic_dlq)
            return {n: len(await topic_partitions(consumer, n)) for n in names}
        finally:
            await consumer.stop()

    assert set(asyncio.run(partition_counts()).values()) == {3}
    stream.publish([stream.match("first", "a", "b")])
    assert {json.loads(r.value)["match_id"] for r in stream.updates(expected=2)} == {"first"}


def test_invalid_events_go_to_the_dead_letter_topic_and_the_worker_keeps_going(stream_factory):
    """Invalid events reach the DLQ with reason and origin headers; valid ones are still rated."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    bad = [
        b"not json at all",
        json.dumps({"match_id": "x", "finished_at": 0, "teams": []}).encode(),
        json.dumps(stream.match("nan", "a", "b") | {"finished_at": "yesterday"}).encode(),
    ]

    async def send_bad() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers(stream.settings.broker))
        await producer.start()
        try:
            for value in bad:
                await producer.send_and_wait(stream.settings.topic_matches, value, key=b"bad")
        finally:
            await producer.stop()

    asyncio.run(send_bad())
    stream.publish([stream.match("good", "a", "b")])
    assert {json.loads(r.value)["match_id"] for r in stream.updates(expected=2)} == {"good"}
    dead = asyncio.run(
        read_topic(stream.settings, stream.settings.topic_dlq, len(bad), 60, key=lambda r: r.offset)
    )
    assert [r.value for r in sorted(dead, key=lambda r: r.offset)] == bad
    headers = [dict(r.headers) for r in sorted(dead, key=lambda r: r.offset)]
    assert headers[0]["sr-reason"].startswith(b"not JSON or msgpack")
    assert headers[1]["sr-reason"].startswith(b"teams")
    assert b"finished_at" in headers[2]["sr-reason"]
    assert all(h["sr-origin-topic"] == stream.settings.topic_matches.encode() for h in headers)
    assert [h["sr-origin-offset"] for h in headers] == [b"0", b"1", b"2"]


def football_matches(ladder: str, n: int) -> list[dict]:
    """The first `n` matches of the packaged international football results, on `ladder`."""
    import gzip
    from importlib.resources import files

    from stream_rater.offline.adapters import read_records

    path = files("stream_rater") / "data" / "international_football_results.csv.gz"
    with gzip.open(str(path), "rt", encoding="utf-8") as text:
        records = itertools.islice(read_records([("football", text)], "football"), n)
        return [{**r.event, "ladder": ladder} for r in records if r.event is not None]


def test_a_season_reset_mid_football_stream_equals_replay_and_verify_passes(stream_factory):
    """Football on a TrueSkill ladder with every rule on: half the matches, `stream-rater
    season` (a record on the matches topic), the other half. The worker's events (the season
    events included) and states (peaks included) equal a replay of the topic in order; verify
    passes; `leaderboard --season 1` is the replay's leaderboard before the reset; an unrated
    match is counted and not applied."""
    rules = {
        "season_shrink": 0.5,
        "season_sigma": 2.0,
        "provisional_games": 5,
        "leaderboard_min_games": 3,
        "min_duration": 60,
    }
    stream = stream_factory(partitions=1, params=rules)
    stream.start_worker()
    football = football_matches(stream.ladder, 1200)
    short = {**football[700], "match_id": "short-friendly", "duration": 30}
    stream.publish(football[:600])
    s = stream.settings
    env = worker_test_env(stream.names, stream.tmp / "cli-data", params=rules)
    kafka = ["--broker", s.broker, "--topic-matches", s.topic_matches]
    started = cli(
        "season",
        "--ladder",
        stream.ladder,
        "--store",
        s.redis_url,
        "--id",
        "season-2",
        "--timeout",
        "120",
        *kafka,
        env=env,
    )
    assert started.returncode == 0, started.stderr
    assert "season 2 started" in started.stdout
    stream.publish([*football[600:], short])

    published = asyncio.run(
        read_topic(s, s.topic_matches, len(football) + 2, 60.0, lambda r: (r.partition, r.offset))
    )
    log = [json.loads(r.value) for r in sorted(published, key=lambda r: (r.partition, r.offset))]
    assert [e["match_id"] for e in log].index("season-2") == 600
    expected, replay_states = replay_events(stream, log)
    records = stream.updates(expected=len(expected))
    events = decoded(records)
    assert by_event_id(events) == by_event_id(expected)
    first_players = {p["id"] for m in football[:600] for t in m["teams"] for p in t["players"]}
    assert {e["player_id"] for e in events if e.get("kind") == "season"} == first_players
    assert all("provisional" in e for e in events)
    assert exact(stream.all_states()) == exact(replay_states)
    assert "short-friendly" not in {e["match_id"] for e in events}
    metrics = (
        urllib.request.urlopen(f"http://127.0.0.1:{stream.web_ports[0]}/metrics", timeout=10).read().decode()
    )
    unrated = f'stream_rater_matches_unrated_total{{ladder="{stream.ladder}",reason="min_duration"}} 1.0'
    assert unrated in metrics

    verified = cli(
        "verify",
        "--ladder",
        stream.ladder,
        "--store",
        s.redis_url,
        "--consumer-group",
        s.consumer_group,
        *kafka,
        env=env,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    first_half, _ = replay_events(stream, log[:600])
    board = cli(
        "leaderboard",
        "--ladder",
        stream.ladder,
        "--store",
        s.redis_url,
        "--season",
        "1",
        "--top",
        "5",
        "--json",
        env=env,
    )
    assert board.returncode == 0, board.stderr
    rows = json.loads(board.stdout)["rows"]
    last_rating: dict[str, tuple[float, int]] = {}
    for e in first_half:
        last_rating[e["player_id"]] = (e["rating"], e["games"])
    oracle = sorted(((r, p) for p, (r, g) in last_rating.items() if g >= 5), reverse=True)[:5]
    assert [(r["player_id"], r["rating"]) for r in rows] == [(p, r) for r, p in oracle]


def test_per_player_scores_and_margins_stream_equals_replay(stream_factory):
    """A TrueSkill ladder with per-player scores and score margins on, fed synthetic team
    games with scores and partial play: the worker's events and states equal a replay's, bit
    for bit, and differ from an order-only replay (the evidence reaches the model)."""
    from stream_rater.config.ladders import Ladder, Ladders
    from stream_rater.offline.synth import SynthConfig, generate

    stream = stream_factory(partitions=1, params={"player_scores": True, "margin_scale": 1.0})
    stream.start_worker()
    events = [
        {**e, "ladder": stream.ladder} for e in generate(SynthConfig(players=60, matches=300, seed=3)).events
    ]
    stream.publish(events)
    expected, states = replay_events(stream, events)
    records = stream.updates(expected=len(expected))
    assert without_processed_at(decoded(records)) == without_processed_at(expected)
    assert exact(stream.all_states()) == exact(states)
    _, order_only = replay_events(stream, events, Ladders([Ladder(stream.ladder, "trueskill")]))
    assert exact(order_only) != exact(states)
