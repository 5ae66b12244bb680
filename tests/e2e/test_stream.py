"""The streaming service end to end: real worker processes on a real Kafka-protocol broker
and Redis — equality with replay, duplicates, concurrent workers, kill -9 recovery, a
graceful stop mid-stream, DLQ."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from stream_rater.demo import start_worker, stop_process, wait_ready
from stream_rater.events import parse_match
from stream_rater.kafka_io import bootstrap_servers, create_topics, publish
from stream_rater.ladders import Ladder, Ladders
from stream_rater.local_runtime import free_port
from stream_rater.processor import Processor
from stream_rater.rating.base import Outcome, Rating
from stream_rater.replay import replay
from stream_rater.settings import Settings
from stream_rater.store import open_store
from stream_rater.store.memory import MemoryStore

from e2e_support import DEFAULT_FINISHED_AT, duel, worker_test_env

pytestmark = pytest.mark.e2e

STARTUP_TIMEOUT = 90.0


@dataclass
class Stream:
    """Topics, a ladder and a consumer group of one test, and the workers it started."""

    settings: Settings
    ladder: str
    tmp: Path
    workers: list[subprocess.Popen] = field(default_factory=list)

    @property
    def ladders(self) -> Ladders:
        return Ladders([Ladder(self.ladder, "trueskill")])

    def start_worker(self) -> subprocess.Popen:
        """A new ready worker of this test's consumer group."""
        settings = replace(self.settings, web_port=free_port())
        log = (self.tmp / f"worker-{len(self.workers)}.log").open("w")
        process = start_worker(settings, worker_test_env(self.settings, self.ladder, self.tmp / "faust-data"), log)
        self.workers.append(process)
        wait_ready(process, f"http://127.0.0.1:{settings.web_port}/readyz", STARTUP_TIMEOUT)
        return process

    def match(self, match_id: str, a: str, b: str, rank_b: int = 1, at: float = DEFAULT_FINISHED_AT) -> dict:
        return duel(self.ladder, match_id, a, b, second_rank=rank_b, at=at)

    def publish(self, events: list[dict]) -> None:
        asyncio.run(publish(events, self.settings))

    def updates(self, expected: int, timeout: float = 120.0, key: Callable | None = None) -> list:
        """Rating-changed records from the beginning until `expected` distinct keys (default:
        event ids) arrived."""
        key = key or (lambda record: json.loads(record.value)["event_id"])
        return asyncio.run(_read_topic(self.settings, self.settings.topic_updates, expected, timeout, key))

    def states(self) -> dict:
        async def read() -> dict:
            store = open_store(self.settings.redis_url)
            try:
                return await store.players(self.ladder)
            finally:
                await store.close()
        return asyncio.run(read())


async def _read_topic(settings: Settings, topic: str, expected: int, timeout: float, key: Callable) -> list:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers(settings.broker), enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        records, seen = [], set()
        deadline = time.monotonic() + timeout
        while len(seen) < expected:
            if time.monotonic() > deadline:
                pytest.fail(f"only {len(seen)} of {expected} records on {topic} after {timeout:.0f} s")
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                for record in batch:
                    records.append(record)
                    seen.add(key(record))
        return records
    finally:
        await consumer.stop()


@pytest.fixture
def stream_factory(broker_url: str, redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Stream]]:
    """Makes a `Stream` with fresh topics of the given partition count; stops its workers by PID."""
    made: list[Stream] = []

    def make(partitions: int = 1, batch_size: int = 200, create: bool = True) -> Stream:
        name = uuid.uuid4().hex[:10]
        settings = Settings(
            broker=broker_url, redis_url=redis_url, partitions=partitions, batch_size=batch_size,
            topic_matches=f"matches-{name}", topic_updates=f"updates-{name}", topic_dlq=f"dlq-{name}",
            consumer_group=f"group-{name}", session_timeout=3.0,
        )
        topics = {t: partitions for t in (settings.topic_matches, settings.topic_updates, settings.topic_dlq)}
        if create:
            asyncio.run(create_topics(broker_url, topics))
        stream = Stream(settings, f"s-{name}", tmp_path)
        made.append(stream)
        return stream

    yield make
    for stream in made:
        for process in stream.workers:
            stop_process(process)


def random_matches(stream: Stream, n: int, players: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    ids = [f"p{i}" for i in range(players)]
    return [stream.match(f"m{i}", *rng.sample(ids, 2), rank_b=rng.choice([0, 1, 1]), at=1_700_000_000.0 + i)
            for i in range(n)]


def replay_events(stream: Stream, events: list[dict]) -> tuple[list[dict], dict]:
    """What `replay` computes for the same input: its events and final states."""
    ladders = stream.ladders

    async def run() -> tuple[list[dict], dict]:
        out: list[dict] = []
        processor = Processor(ladders, MemoryStore())
        await replay([parse_match(e, ladders) for e in events], processor, on_result=lambda r: out.extend(r.events))
        return out, await processor.store.players(stream.ladder)
    return asyncio.run(run())


def without_processed_at(events: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "processed_at"} for e in events]


def decoded(records: list) -> list[dict]:
    """Rating-changed events in (partition, offset) order, each event id once."""
    seen, out = set(), []
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        event = json.loads(record.value)
        if event["event_id"] not in seen:
            seen.add(event["event_id"])
            out.append(event)
    return out


def assert_unbroken_chains(events: list[dict], states: dict) -> None:
    """Each player's events, ordered by games, chain before→after and end at the stored state."""
    chains: dict[str, list[dict]] = {}
    for e in sorted(events, key=lambda e: e["games"]):
        chains.setdefault(e["player_id"], []).append(e)
    assert set(chains) == set(states)
    for player, chain in chains.items():
        assert [e["games"] for e in chain] == list(range(1, len(chain) + 1)), player
        for prev, nxt in zip(chain, chain[1:]):
            assert nxt["before"] == prev["after"], player
        assert chain[-1]["after"] == {"mu": states[player].mu, "sigma": states[player].sigma}
        assert states[player].games == len(chain)


def test_one_partition_stream_equals_replay(stream_factory):
    """On one partition the worker emits exactly replay's events: one per player per match."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    matches = random_matches(stream, 400, players=30, seed=1)
    stream.publish(matches)
    records = stream.updates(expected=2 * len(matches))
    expected, states = replay_events(stream, matches)
    assert without_processed_at(decoded(records)) == without_processed_at(expected)
    assert {p: (s.mu, s.sigma, s.games) for p, s in stream.states().items()} == {
        p: (s.mu, s.sigma, s.games) for p, s in states.items()
    }


def test_interleaved_partitions_apply_the_model_to_each_before(stream_factory):
    """With several partitions every event equals the model applied to its `before` states."""
    stream = stream_factory(partitions=4)
    stream.start_worker()
    matches = random_matches(stream, 400, players=25, seed=2)
    stream.publish(matches)
    events = decoded(stream.updates(expected=2 * len(matches)))
    by_match: dict[str, dict[str, dict]] = {}
    for e in events:
        by_match.setdefault(e["match_id"], {})[e["player_id"]] = e
    model = stream.ladders.get(stream.ladder).rating_model
    for m in matches:
        a, b = m["teams"][0]["players"][0]["id"], m["teams"][1]["players"][0]["id"]
        ea, eb = by_match[m["match_id"]][a], by_match[m["match_id"]][b]
        teams = [[Rating(**ea["before"])], [Rating(**eb["before"])]]
        [[new_a], [new_b]] = model.rate_match(teams, Outcome(ranks=[0, m["teams"][1]["rank"]]))
        assert (ea["after"], eb["after"]) == ({"mu": new_a.mu, "sigma": new_a.sigma}, {"mu": new_b.mu, "sigma": new_b.sigma})
    assert_unbroken_chains(events, stream.states())


def test_duplicated_match_events_are_applied_once(stream_factory):
    """The same match_id on several offsets and partitions is applied once and re-emitted unchanged."""
    stream = stream_factory(partitions=2)
    stream.start_worker()
    match = stream.match("dup-1", "alice", "bob")

    async def send_copies() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers(stream.settings.broker))
        await producer.start()
        try:
            for partition in (0, 1, 0, 1):
                await producer.send_and_wait(stream.settings.topic_matches, json.dumps(match).encode(),
                                             key=b"dup-1", partition=partition)
        finally:
            await producer.stop()

    asyncio.run(send_copies())
    stream.publish([stream.match("after-dups", "alice", "carol")])
    records = stream.updates(expected=10, key=lambda r: (r.partition, r.offset))
    by_id: dict[str, list[dict]] = {}
    for r in records:
        event = json.loads(r.value)
        by_id.setdefault(event["event_id"], []).append(event)
    assert {i: len(copies) for i, copies in by_id.items()} == {
        "dup-1:alice": 4, "dup-1:bob": 4, "after-dups:alice": 1, "after-dups:carol": 1
    }
    assert all(all(c == copies[0] for c in copies) for copies in by_id.values())
    states = stream.states()
    assert (states["alice"].games, states["bob"].games, states["carol"].games) == (2, 1, 1)


def test_two_workers_lose_no_update(stream_factory):
    """Two workers sharing the partitions, with overlapping players, lose no update."""
    stream = stream_factory(partitions=4, batch_size=50)
    stream.start_worker()
    stream.start_worker()
    matches = random_matches(stream, 3000, players=12, seed=3)
    stream.publish(matches)
    events = decoded(stream.updates(expected=2 * len(matches), timeout=240))
    states = stream.states()
    played: dict[str, int] = {}
    for m in matches:
        for team in m["teams"]:
            played[team["players"][0]["id"]] = played.get(team["players"][0]["id"], 0) + 1
    assert {p: s.games for p, s in states.items()} == played
    assert_unbroken_chains(events, states)


def test_kill_9_at_random_moments_applies_every_match_exactly_once(stream_factory):
    """kill -9 of the worker mid-stream and restarts: each match applied once, chains unbroken,
    final states equal replay (one partition)."""
    stream = stream_factory(partitions=1, batch_size=500)
    matches = random_matches(stream, 20_000, players=200, seed=4)
    worker = stream.start_worker()
    stream.publish(matches)
    rng = random.Random(5)
    for _ in range(3):
        store_games = lambda: sum(s.games for s in stream.states().values())  # noqa: E731
        target = store_games() + rng.randint(1_000, 6_000)
        deadline = time.monotonic() + 120
        while store_games() < target and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store_games() < 2 * len(matches), "the kill must land mid-stream to mean anything"
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        worker = stream.start_worker()
    events = decoded(stream.updates(expected=2 * len(matches), timeout=300))
    states = stream.states()
    assert len(events) == 2 * len(matches)
    assert_unbroken_chains(events, states)
    expected, replay_states = replay_events(stream, matches)
    assert without_processed_at(events) == without_processed_at(expected)
    assert {p: (s.mu, s.sigma, s.games) for p, s in states.items()} == {
        p: (s.mu, s.sigma, s.games) for p, s in replay_states.items()
    }


def test_sigterm_mid_stream_finishes_the_batches_in_hand_and_commits_them(stream_factory):
    """SIGTERM while batches are in flight: the worker exits 0 after the batches it holds are
    applied, produced and committed — the group's committed offset is exactly the number of
    matches in Redis (one partition) — and a restarted worker goes on from there."""
    stream = stream_factory(partitions=1, batch_size=500)
    matches = random_matches(stream, 10_000, players=200, seed=6)
    worker = stream.start_worker()
    stream.publish(matches)
    store_games = lambda: sum(s.games for s in stream.states().values())  # noqa: E731
    deadline = time.monotonic() + 120
    while store_games() < 3_000 and time.monotonic() < deadline:
        time.sleep(0.05)
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
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers(stream.settings.broker),
                                    group_id=stream.settings.consumer_group, enable_auto_commit=False)
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
            await consumer.topics()
            names = (stream.settings.topic_matches, stream.settings.topic_updates, stream.settings.topic_dlq)
            return {n: len(consumer.partitions_for_topic(n) or ()) for n in names}
        finally:
            await consumer.stop()

    assert set(asyncio.run(partition_counts()).values()) == {3}
    stream.publish([stream.match("first", "a", "b")])
    assert {json.loads(r.value)["match_id"] for r in stream.updates(expected=2)} == {"first"}


def test_invalid_events_go_to_the_dead_letter_topic_and_the_worker_keeps_going(stream_factory):
    """Invalid events reach the DLQ with reason and origin headers; valid ones are still rated."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    bad = [b"not json at all", json.dumps({"match_id": "x", "finished_at": 0, "teams": []}).encode(),
           json.dumps(stream.match("nan", "a", "b") | {"finished_at": "yesterday"}).encode()]

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
    dead = asyncio.run(_read_topic(stream.settings, stream.settings.topic_dlq, len(bad), 60, key=lambda r: r.offset))
    assert [r.value for r in sorted(dead, key=lambda r: r.offset)] == bad
    headers = [dict(r.headers) for r in sorted(dead, key=lambda r: r.offset)]
    assert headers[0]["sr-reason"].startswith(b"not JSON or msgpack")
    assert headers[1]["sr-reason"].startswith(b"teams")
    assert b"finished_at" in headers[2]["sr-reason"]
    assert all(h["sr-origin-topic"] == stream.settings.topic_matches.encode() for h in headers)
    assert [h["sr-origin-offset"] for h in headers] == [b"0", b"1", b"2"]
