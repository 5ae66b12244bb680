"""`LossGuard` on an in-memory store with a fake log and group offsets: what counts as a lost
store when a partition is assigned (the group committed matches the store does not have),
and the legitimate cases that do not (no committed offset, a group behind the store, dead
letters, voids and redeliveries at the partition's end); a lost ladder held until rebuilt."""

from __future__ import annotations

import json

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.kafka import LogRecord
from stream_rater.processor import Processor, StoreLost
from stream_rater.service.store_loss import LossGuard
from stream_rater.store.memory import MemoryStore
from tests.fault_support import RecordingHealth
from tests.helpers import duel

LADDERS = Ladders([Ladder("default", "trueskill")])


class World:
    """A log of one partition, the group's committed offset, a store and a guard on them."""

    def __init__(self, records: list[bytes]) -> None:
        self.log = [LogRecord(0, i, 0, b"default", value) for i, value in enumerate(records)]
        self.committed: dict[int, int] = {}
        self.store = MemoryStore()
        self.health = RecordingHealth()
        self.reported, self.recovered = self.health.reported, self.health.back
        self.reads: list[tuple[int, int]] = []

        async def committed(partitions: object) -> dict[int, int]:
            return dict(self.committed)

        async def read(partition: int, start: int, end: int) -> list[LogRecord]:
            self.reads.append((start, end))
            return self.log[start:end]

        self.guard = LossGuard(
            self.store,
            LADDERS,
            committed,
            read,
            health=self.health,
        )

    async def apply(self, start: int, end: int) -> None:
        """Apply the valid matches among the log's records start..end-1, as a worker does."""
        matches, where = [], []
        for record in self.log[start:end]:
            event = json.loads(record.value)
            if event.get("teams"):
                matches.append(parse_match(event, LADDERS))
                where.append((0, record.offset))
        await Processor(LADDERS, self.store).process(matches, where)

    async def check(self) -> None:
        self.guard.assigned([0])
        await self.guard.ready([0])


def _matches(n: int) -> list[bytes]:
    return [json.dumps(duel(f"m{i}", f"p{i % 7}", f"p{(i + 1) % 7}")).encode() for i in range(n)]


BAD = json.dumps({"match_id": "bad", "finished_at": "not a time", "teams": []}).encode()


async def test_a_group_beyond_the_store_is_a_loss_held_until_the_rebuild():
    world = World(_matches(30))
    await world.apply(0, 10)
    world.committed = {0: 20}
    await world.check()
    assert world.reads == [(10, 20)]
    [error] = world.reported
    assert error.ladder == "default"
    assert "committed offset 20, the store's positions reach 10" in str(error)
    assert "'m10' (offset 10)" in str(error)
    with pytest.raises(StoreLost):
        await world.guard.hold(["default"])
    await world.guard.hold(["other"])  # another ladder goes on
    await world.check()  # checked again (a rebalance): reported once
    assert len(world.reported) == 1

    await world.apply(10, 30)  # the rebuild
    await world.guard.hold(["default"])
    assert world.recovered == ["default"] and not world.guard.lost


async def test_an_empty_store_behind_a_committed_group_is_a_loss():
    world = World(_matches(5))
    world.committed = {0: 5}
    await world.check()
    assert [e.ladder for e in world.reported] == ["default"]


@pytest.mark.parametrize(
    "committed, applied",
    [
        ({}, 0),  # a fresh store and group
        ({}, 10),  # the group has no committed offset (new, or its offsets expired)
        ({0: 8}, 10),  # the group behind the store: died between the Redis and the offset commit
        ({0: 10}, 10),
    ],
)
async def test_no_loss_where_the_group_did_not_commit_beyond_the_store(committed, applied):
    world = World(_matches(10))
    await world.apply(0, applied)
    world.committed = committed
    await world.check()
    assert not world.reported and not world.guard.lost and world.reads == []


async def test_dead_letters_voids_and_redeliveries_at_the_end_are_no_loss():
    records = _matches(11)
    world = World([*records[:10], BAD, records[3], records[10], BAD])
    await world.apply(0, 10)
    await world.store.set_voids("default", {"m10": {"reason": "cheat", "at": 0.0}}, [], 0)
    world.committed = {0: 14}
    await world.check()
    assert world.reads == [(10, 14)]
    assert not world.reported and not world.guard.lost
