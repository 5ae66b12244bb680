"""The end-to-end tests' streams: fresh topics, ladders and a consumer group per test, worker
processes started on them, and the replay oracle to compare them with."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts import parse_match
from stream_rater.kafka import bootstrap_servers, home_partition, publish
from stream_rater.local.demo import start_worker, wait_ready
from stream_rater.local.runtime import free_port
from stream_rater.offline.replay import replay
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore
from tests.e2e.e2e_support import worker_test_env
from tests.helpers import FINISHED_AT, consume_until, duel, stored_players, stored_watermarks

STARTUP_TIMEOUT = 90.0


@dataclass
class Stream:
    """Topics, ladders and a consumer group of one test, and the workers it started."""

    settings: Settings
    names: tuple[str, ...]
    tmp: Path
    model: str = "trueskill"
    #: Ladder parameters beyond the model (its own, or ladder rules), for every ladder.
    params: dict[str, Any] = field(default_factory=dict)
    workers: list[subprocess.Popen] = field(default_factory=list)
    #: Each started worker's web port, in start order.
    web_ports: list[int] = field(default_factory=list)
    #: Variables a worker gets beyond `worker_test_env`'s (e.g. a ladders file).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def ladder(self) -> str:
        """The first (or only) ladder."""
        return self.names[0]

    @property
    def ladders(self) -> Ladders:
        return Ladders([Ladder(name, self.model, self.params) for name in self.names])

    def start_worker(self) -> subprocess.Popen:
        """A new ready worker of this test's consumer group."""
        settings = replace(self.settings, web_port=free_port())
        log = (self.tmp / f"worker-{len(self.workers)}.log").open("w")
        process = start_worker(
            settings,
            {**worker_test_env(self.names, self.tmp / "faust-data", self.model, self.params), **self.env},
            log,
        )
        self.workers.append(process)
        self.web_ports.append(settings.web_port)
        wait_ready(process, f"http://127.0.0.1:{settings.web_port}/readyz", STARTUP_TIMEOUT)
        return process

    def match(
        self,
        match_id: str,
        a: str,
        b: str,
        rank_b: int = 1,
        at: float = FINISHED_AT,
        ladder: str | None = None,
    ) -> dict:
        return duel(match_id, a, b, ladder=ladder or self.ladder, ranks=(0, rank_b), at=at)

    def publish(self, events: list[dict], rate: float | None = None) -> None:
        asyncio.run(publish(events, self.settings, rate=rate))

    def updates(self, expected: int, timeout: float = 120.0, key: Callable | None = None) -> list:
        """Rating-changed records from the beginning until `expected` distinct keys (default:
        event ids) arrived."""
        key = key or (lambda record: json.loads(record.value)["event_id"])
        try:
            return asyncio.run(read_topic(self.settings, self.settings.topic_updates, expected, timeout, key))
        except TimeoutError as exc:  # say whether the store or the topic fell short
            alive = sum(w.poll() is None for w in self.workers)
            pytest.fail(
                f"{exc}; the store shows {self.applied()} matches applied; {alive} of "
                f"{len(self.workers)} workers alive; their logs: {self.tmp}/worker-*.log"
            )

    def states(self, ladder: str | None = None) -> dict:
        """The stored players of `ladder` (default: the stream's first)."""
        return stored_players(self.settings.redis_url, ladder or self.ladder, self.settings.redis_prefix)

    def all_states(self) -> dict[str, dict]:
        """Ladder → its players' stored states."""
        return {name: self.states(name) for name in self.names}

    def applied(self) -> int:
        """Matches applied so far over all ladders: their watermarks (a test of the store's
        states compares them with a replay)."""
        return sum(
            stored_watermarks(self.settings.redis_url, self.names, self.settings.redis_prefix).values()
        )


async def read_topic(settings: Settings, topic: str, expected: int, timeout: float, key: Callable) -> list:
    """Records of `topic` from the beginning until `expected` distinct `key(record)` arrived."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers(settings.broker),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        return await consume_until(
            consumer,
            lambda records: len({key(r) for r in records}) >= expected,
            f"{expected} records on {topic}",
            timeout,
        )
    finally:
        await consumer.stop()


def spread_ladders(prefix: str, n: int, partitions: int) -> tuple[str, ...]:
    """`n` ladder names whose matches land on as many different partitions as possible."""
    names: list[str] = []
    used: set[int] = set()
    for i in itertools.count():
        name = f"{prefix}-{i}" if n > 1 else prefix
        if len(names) == n:
            return tuple(names)
        home = home_partition(name, partitions)
        if home not in used or len(used) >= partitions:
            names.append(name)
            used.add(home)
    raise AssertionError("unreachable")


def replay_events(
    stream: Stream, events: list[dict], ladders: Ladders | None = None
) -> tuple[list[dict], dict[str, dict]]:
    """What `replay` of the same input in the same order computes (with the stream's ladders
    or `ladders`): its events and every ladder's final states."""
    ladders = ladders or stream.ladders

    async def run() -> tuple[list[dict], dict[str, dict]]:
        out: list[dict] = []
        processor = Processor(ladders, MemoryStore())
        await replay(
            [parse_match(e, ladders) for e in events], processor, on_result=lambda r: out.extend(r.events)
        )
        return out, {name: await processor.store.players(name) for name in stream.names}

    return asyncio.run(run())


def exact(states: dict[str, dict]) -> dict[str, dict]:
    """Per ladder, each player's stored state as compared with replay: bit for bit."""
    return {
        name: {
            p: (s.mu, s.sigma, s.extra, s.games, s.last_played, s.peak, s.peak_at) for p, s in players.items()
        }
        for name, players in states.items()
    }


def void_args(stream: Stream, match_id: str) -> list[str]:
    """``stream-rater void`` arguments for `match_id` of `stream`'s ladder, store and topics
    (the default lease: a test that kills the command appends a long one and brings the
    expiry of what the killed command left forward itself)."""
    return [
        *("void", match_id, "--reason", "r", "--ladder", stream.ladder),
        *("--store", stream.settings.redis_url, "--broker", stream.settings.broker),
        *("--topic-matches", stream.settings.topic_matches, "--topic-updates", stream.settings.topic_updates),
    ]


def random_matches(stream: Stream, n: int, players: int, seed: int) -> list[dict]:
    """`n` duels among `players` ids, each on a random one of the stream's ladders, in
    increasing finished_at."""
    rng = random.Random(seed)
    ids = [f"p{i}" for i in range(players)]
    return [
        stream.match(
            f"m{i}",
            *rng.sample(ids, 2),
            rank_b=rng.choice([0, 1, 1]),
            at=1_700_000_000.0 + i,
            ladder=rng.choice(stream.names),
        )
        for i in range(n)
    ]


def by_event_id(events: list[dict]) -> dict[str, dict]:
    """Events by id, without the processing time (the only field a replay cannot reproduce)."""
    return {e["event_id"]: {k: v for k, v in e.items() if k != "processed_at"} for e in events}


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
        for prev, nxt in itertools.pairwise(chain):
            assert nxt["before"] == prev["after"], player
        last = chain[-1]["after"]
        assert (last["mu"], last["sigma"]) == (states[player].mu, states[player].sigma), player
        assert states[player].games == len(chain)


def assert_equals_replay(stream: Stream, matches: list[dict], records: list) -> None:
    """The oracle: every rating-changed event and every ladder's final states are exactly
    what a replay of the published matches, in publish order, computes; each player's
    events chain unbroken to the stored state."""
    events = decoded(records)
    expected, replay_states = replay_events(stream, matches)
    assert len(events) == len(expected) == 2 * len(matches)
    assert by_event_id(events) == by_event_id(expected)
    states = stream.all_states()
    assert exact(states) == exact(replay_states)
    for name in stream.names:
        assert_unbroken_chains([e for e in events if e["ladder"] == name], states[name])
