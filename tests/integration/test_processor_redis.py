"""The processor on a real Redis: same results as in memory, idempotent replays, no lost
updates when two processors commit concurrently with overlapping players, and a commit that
lands late (a partition) applied once and counted as applied."""

from __future__ import annotations

import asyncio
import graphlib
import itertools
import random
import uuid
from collections.abc import Sequence

import pytest
import redis.exceptions

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.local.demo import default_data_file
from stream_rater.offline.adapters import open_text, read_records
from stream_rater.offline.replay import replay, validated
from stream_rater.processor import Processor, Retries
from stream_rater.store import Commit, CommitConflict, open_store
from stream_rater.store.memory import MemoryStore
from stream_rater.store.redis import RedisStore
from tests.helpers import parsed_duel
from tests.store_faults import LateLanding

pytestmark = pytest.mark.integration

FOOTBALL = default_data_file()


def clock() -> float:
    return 1_700_000_000.0


def football_matches(ladders: Ladders, limit: int) -> list:
    with open_text(FOOTBALL) as f:
        records = read_records([(FOOTBALL.name, f)], "football", home_effect=True)
        matches = list(validated(records, ladders, on_error=pytest.fail))
    return matches[:limit]


@pytest.fixture
def ladders() -> Ladders:
    """A fresh ladder name per test keeps Redis state apart."""
    return Ladders([Ladder(f"t-{uuid.uuid4().hex[:10]}", "trueskill", {"draw_probability": 0.227})])


def ladder_of(ladders: Ladders) -> str:
    return next(name for name in ladders if name != "default")


async def test_redis_and_memory_replays_are_identical_and_idempotent(redis_url, ladders):
    """Football through Redis equals football through memory; a second replay applies nothing."""
    name = ladder_of(ladders)
    matches = [m.__class__(m.match_id, name, m.finished_at, m.teams) for m in football_matches(ladders, 8000)]
    out_memory: list = []
    await replay(
        matches,
        Processor(ladders, MemoryStore(), clock=clock),
        batch_size=500,
        on_result=lambda r: out_memory.extend(r.events),
    )
    store = open_store(redis_url)
    out_redis: list = []
    first = await replay(
        matches,
        Processor(ladders, store, clock=clock),
        batch_size=500,
        on_result=lambda r: out_redis.extend(r.events),
    )
    assert out_redis == out_memory
    assert first.round_trips == 2 * len(range(0, len(matches), 500))
    second = await replay(matches, Processor(ladders, store, clock=clock), batch_size=500)
    assert (second.applied, second.duplicates) == (0, len(matches))
    await store.close()


async def test_a_commit_landing_late_on_redis_is_applied_once_and_counted_as_applied(redis_url, ladders):
    """A partition's commit times out and lands only after the retry's read: the real commit
    script refuses the retry's commit (the ladder moved) and the re-read finds the late one's
    markers, which the processor reports as applied (not duplicates); the states are those of
    the matches applied once."""
    name = ladder_of(ladders)
    batch = [parsed_duel(ladders, f"m{i}", f"p{i % 3}", f"p{i % 3 + 1}", ladder=name, at=i) for i in range(6)]
    store = LateLanding(open_store(redis_url))
    processor = Processor(ladders, store, clock=clock)
    with pytest.raises(redis.exceptions.TimeoutError):
        await processor.process(batch)
    result = await processor.process(batch)
    assert (result.conflicts, [r.duplicate for r in result.results]) == (1, [False] * 6)
    oracle = Processor(ladders, MemoryStore(), clock=clock)
    assert result.events == (await oracle.process(batch)).events
    assert await store.players(name) == await oracle.store.players(name)
    await store.close()


class RacingStore(RedisStore):
    """A Redis store that yields to the event loop between read and commit, so that two
    processors interleave and conflict for real."""

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        await asyncio.sleep(0)
        return await super().commit_many(commits)


async def test_two_concurrent_processors_lose_no_update(redis_url, ladders):
    """Concurrent commits with overlapping players: every game counted, states equal a
    sequential application in commit order."""
    name = ladder_of(ladders)
    rng = random.Random(7)
    players = [f"p{i}" for i in range(12)]
    matches = []
    for i in range(600):
        a, b = rng.sample(players, 2)
        matches.append(parsed_duel(ladders, f"m{i}", a, b, ladder=name, ranks=(0, rng.choice([0, 1])), at=i))
    halves = [matches[0::2], matches[1::2]]
    processors = [
        Processor(ladders, RacingStore.from_url(redis_url), clock=clock, retries=Retries(max_attempts=1000))
        for _ in range(2)
    ]

    async def run(processor: Processor, part: list) -> tuple[list, int]:
        events, conflicts = [], 0
        for start in range(0, len(part), 5):
            result = await processor.process(part[start : start + 5])
            events += result.events
            conflicts += result.conflicts
        return events, conflicts

    (events_a, conflicts_a), (events_b, conflicts_b) = await asyncio.gather(
        run(processors[0], halves[0]), run(processors[1], halves[1])
    )
    assert conflicts_a + conflicts_b > 0, "the test must force conflicts to mean anything"
    stored = await processors[0].store.players(name)
    played = {p: sum(p in (t.players[0].id for t in m.teams) for m in matches) for p in players}
    assert {p: s.games for p, s in stored.items()} == {p: n for p, n in played.items() if n}

    by_event_id = {e["event_id"]: e for e in events_a + events_b}
    chains: dict[str, list[dict]] = {}
    for e in sorted(by_event_id.values(), key=lambda e: e["games"]):
        chains.setdefault(e["player_id"], []).append(e)
    order = graphlib.TopologicalSorter()
    for player, chain in chains.items():
        assert [e["games"] for e in chain] == list(range(1, len(chain) + 1))
        for prev, nxt in itertools.pairwise(chain):
            assert nxt["before"] == prev["after"], f"broken chain for {player}"
            order.add(nxt["match_id"], prev["match_id"])
        last = chain[-1]["after"]
        assert (last["mu"], last["sigma"]) == (stored[player].mu, stored[player].sigma)
    by_id = {m.match_id: m for m in matches}
    assert {e["match_id"] for e in by_event_id.values()} == set(by_id)
    for match_id in by_id:
        order.add(match_id)
    sequential = Processor(ladders, MemoryStore(), clock=clock)
    for match_id in order.static_order():
        await sequential.process([by_id[match_id]])
    replayed = await sequential.store.players(name)
    assert {p: (s.mu, s.sigma, s.games, s.last_played) for p, s in replayed.items()} == {
        p: (s.mu, s.sigma, s.games, s.last_played) for p, s in stored.items()
    }
    for p in processors:
        await p.store.close()


async def test_two_processors_taking_turns_hold_states_and_equal_one_replay(redis_url, ladders):
    """Two workers take turns on a ladder's batches over one Redis, each holding the states of
    its last batch: a batch after the other worker's reads all its players again, one after
    its own only the new ones; states and events equal one processor's that holds nothing."""
    name = ladder_of(ladders)
    rng = random.Random(11)
    stores = [RedisStore.from_url(redis_url) for _ in range(2)]
    workers = [Processor(ladders, store, clock=clock) for store in stores]
    plain = Processor(ladders, MemoryStore(), clock=clock, known_states=0)
    for n in range(40):
        who = rng.choice([0, 0, 1])
        batch = []
        for i in range(rng.randint(1, 6)):
            a, b = rng.sample([f"p{i}" for i in range(8)], 2)
            batch.append(parsed_duel(ladders, f"m{n}-{i}", a, b, ladder=name, at=n))
        assert (await workers[who].process(batch)).events == (await plain.process(batch)).events
    assert await stores[0].players(name) == await plain.store.players(name)
    for store in stores:
        await store.close()
