"""States a processor holds between batches: a batch reads only the players it does not hold,
and whatever another writer did to the ladder meanwhile (another worker's commit, a re-rate's
switch, lost data) makes it read them all, so the states stay those of a replay."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.processor import Processor, Target
from stream_rater.processor.known_states import KnownStates
from stream_rater.store import PlayerState, ReadRequest, Snapshot
from stream_rater.store.memory import MemoryStore
from tests.unit.processing import LADDERS, fixed_clock, match


class AskedStore(MemoryStore):
    """Records the player ids each read asks for, per ladder."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[list[str]]] = []

    async def read_many(self, requests: Sequence[ReadRequest]) -> list[Snapshot]:
        self.asked.append([list(r.player_ids) for r in requests])
        return await super().read_many(requests)


def state(mu: float, version: int = 1) -> PlayerState:
    return PlayerState(mu, 1.0, version, 0.0, version)


async def test_a_batch_reads_only_the_players_it_does_not_hold():
    """After a first batch, the next one of the ladder asks the store only for its new player,
    and its states equal a processor's that holds nothing."""
    batches = [[match("m1", ["a"], ["b"])], [match("m2", ["a"], ["c"]), match("m3", ["b"], ["c"])]]
    store = AskedStore()
    processor = Processor(LADDERS, store, clock=fixed_clock)
    plain = Processor(LADDERS, MemoryStore(), clock=fixed_clock, known_states=0)
    for batch in batches:
        assert (await processor.process(batch)).events == (await plain.process(batch)).events
    assert store.asked == [[["a", "b"]], [["c"]]]
    assert await store.players("default") == await plain.store.players("default")


async def test_a_commit_by_another_processor_makes_the_next_batch_read_everything():
    """Another worker committed to the ladder: the held states are stale, the batch reads all
    its players again (one more round trip) and rates on the other worker's results."""
    store = AskedStore()
    mine, other = (Processor(LADDERS, store, clock=fixed_clock) for _ in range(2))
    await mine.process([match("m1", ["a"], ["b"])])
    await other.process([match("m2", ["a"], ["b"])])
    store.asked.clear()
    result = await mine.process([match("m3", ["a"], ["c"])])
    assert store.asked == [[["c"]], [["a", "c"]]]
    assert result.events[0]["games"] == 3


async def test_a_batch_of_held_players_from_the_topic_commits_without_a_read():
    """Every player of the batch held and every match from the matches topic: the batch costs
    its commit alone, which does the read's checks (`Commit.unread`); a redelivered batch and a
    match sent again as a new record are found applied all the same."""
    store = AskedStore()
    processor = Processor(LADDERS, store, clock=fixed_clock)
    plain = Processor(LADDERS, MemoryStore(), clock=fixed_clock, known_states=0)
    first, second = [match("m1", ["a"], ["b"])], [match("m2", ["b"], ["a"]), match("m3", ["a"], ["b"])]
    for batch, where in ((first, [(0, 10)]), (second, [(0, 11), (0, 12)])):
        assert (await processor.process(batch, where)).events == (await plain.process(batch)).events
    assert (len(store.asked), store.round_trips) == (1, 3)
    again = await processor.process(second, [(0, 11), (0, 12)])  # redelivered: below the position
    resent = await processor.process(first, [(0, 13)])  # a producer's retry: a new record
    assert [r.duplicate for r in again.results + resent.results] == [True, True, True]
    assert len(store.asked) == 3 and await store.players("default") == await plain.store.players("default")


def test_held_states_are_valid_only_at_the_watermark_of_the_last_commit():
    known = KnownStates(limit=10)
    read = Snapshot({"a": state(1.0)}, {}, {}, watermark=4, generation=2)
    known.committed("l", read, {"b": state(2.0)}, {"home": state(0.5)}, applied=3)
    held = known.held("l")
    assert held is not None and (held.generation, held.watermark, len(known)) == (2, 7, 3)
    assert known.missing(held, ["a", "b", "c"], ["home", "away"]) == (["c"], ["away"])
    fresh = Snapshot({"c": state(3.0)}, {}, {}, watermark=7, generation=2)
    complete = known.complete("l", held, fresh, ["a", "c"], ["home"])
    assert complete is not None
    assert (set(complete.players), set(complete.effects)) == ({"a", "c"}, {"home"})
    for other in (
        Snapshot({}, {}, {}, watermark=8, generation=2),
        Snapshot({}, {}, {}, watermark=7, generation=3),
    ):
        known.committed("l", read, {"b": state(2.0)}, {}, applied=3)
        assert known.complete("l", known.held("l"), other, ["a"], []) is None
        assert known.held("l") is None and len(known) == 0


def test_the_limit_drops_the_least_recent_ladders_then_the_oldest_states():
    known = KnownStates(limit=3)
    empty = Snapshot({}, {}, {})
    known.committed("old", empty, {"x": state(1.0), "y": state(1.0)}, {}, applied=1)
    known.committed("new", empty, {"a": state(1.0), "b": state(1.0)}, {}, applied=1)
    assert known.held("old") is None and len(known) == 2
    known.committed(
        "new", Snapshot({}, {}, {}, watermark=1), {"c": state(1.0), "a": state(2.0, 2)}, {}, applied=1
    )
    held = known.held("new")
    assert held is not None and list(held.players) == ["b", "c", "a"] and len(known) == 3
    known.committed("new", Snapshot({}, {}, {}, watermark=2), {"d": state(1.0)}, {}, applied=1)
    assert list(known.held("new").players) == ["c", "a", "d"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1),
            st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5)), min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([0, 1, 3, 1000]),
)
def test_two_processors_taking_turns_on_a_ladder_equal_one_replay(turns, limit):
    """Two workers take turns on one ladder's batches (as across rebalances), each holding
    states and committing without a read where it holds them all, and each batch is then
    redelivered to the other: the stored states and every event equal one processor's that
    holds nothing, applying the same batches in the same order, once each."""

    async def run() -> None:
        store, plain = MemoryStore(), Processor(LADDERS, MemoryStore(), clock=fixed_clock, known_states=0)
        workers = [Processor(LADDERS, store, clock=fixed_clock, known_states=limit) for _ in range(2)]
        offsets = itertools.count()
        for n, (who, pairs) in enumerate(turns):
            batch = [match(f"m{n}-{i}", [f"p{a}"], [f"p{(a + b) % 6}"]) for i, (a, b) in enumerate(pairs)]
            where = [(0, next(offsets)) for _ in batch]
            assert (await workers[who].process(batch, where)).events == (await plain.process(batch)).events
            redelivered = await workers[1 - who].process(batch, where)
            assert all(r.duplicate for r in redelivered.results)
        assert await store.players("default") == await plain.store.players("default")

    asyncio.run(run())


class SwitchingStore(MemoryStore):
    """Runs `hook` once, between the processor's read and its commit."""

    hook = None

    async def commit_many(self, commits):
        if self.hook is not None:
            hook, self.hook = self.hook, None
            await hook()
        return await super().commit_many(commits)


async def test_a_batch_read_before_a_rerate_switch_is_checked_against_the_new_generation():
    """A re-rate switches the live generation between a batch's read and its commit, and the
    new generation has the same watermark (it re-applied the same matches, with other
    parameters): the commit lands on the new generation, so its versions are checked there
    and the batch is recomputed on the re-rated states, as a replay with the new parameters
    would have it."""
    store = SwitchingStore()
    worker = Processor(LADDERS, store, clock=fixed_clock)
    before = [match("m1", ["a"], ["b"]), match("m2", ["a"], ["b"])]
    for m in before:
        await worker.process([m])
    params = {"mu": 40.0, "sigma": 2.0}

    async def rerate() -> None:
        generation, _ = await store.begin_rerate("default", "owner", 60, params)
        await Processor(LADDERS, store, clock=fixed_clock, target=Target(generation)).process(before)
        live = await store.generations("default")
        await store.freeze("default", "owner", 60)
        await store.switch("default", "owner", generation, live, [])
        await store.finish_rerate("default", "owner")

    store.hook = rerate
    result = await worker.process([match("m3", ["a"], ["b"])])
    assert result.conflicts == 1
    rerated = Processor(
        Ladders([Ladder("default", "trueskill", params)]), MemoryStore(), clock=fixed_clock, known_states=0
    )
    await rerated.process(before)
    await rerated.process([match("m3", ["a"], ["b"])])
    assert await store.players("default") == await rerated.store.players("default")
