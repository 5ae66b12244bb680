"""The `Correction` value: built from the CLI's flags or from a wire request, it says the same
thing either way, and a `Rerate` splits its match ids into voids and un-voids by its kind."""

from __future__ import annotations

import asyncio

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import CorrectionRequest, parse_match
from stream_rater.corrections.rerate import Correction, Rerate, RerateOptions, Tuning
from stream_rater.processor import Processor
from stream_rater.store.base import Commit, LadderFrozen, LockLost, PlayerState, StateWrite
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel

LADDERS = Ladders([Ladder("l", "trueskill")])


class NoHistory:
    async def read(self):
        return []

    def reached(self):
        return {}

    def committed(self):
        return {}


async def no_send(events) -> None:
    raise AssertionError("nothing to send")


@pytest.mark.parametrize(
    "wire",
    [
        {"kind": "void", "ladder": "l", "match_ids": ["m1", "m2"], "reason": "cheater"},
        {"kind": "unvoid", "ladder": "l", "match_ids": ["m1"]},
        {"kind": "rerate", "ladder": "l", "params": {"beta": 2.5}, "request_id": "r1"},
    ],
)
def test_a_request_and_its_correction_say_the_same(wire):
    request = CorrectionRequest.from_dict(wire)
    correction = Correction.from_request(request)
    assert correction.request(request.request_id) == request
    assert correction.request(request.request_id).to_dict() == wire


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="'erase'"):
        Correction("erase", "l", ("m1",))


@pytest.mark.parametrize(
    ("kind", "void", "unvoid"),
    [("void", ["m1", "m2"], []), ("unvoid", [], ["m1", "m2"]), ("rerate", [], [])],
)
def test_the_kind_says_whether_the_matches_are_voided_or_unvoided(kind, void, unvoid):
    ids = ("m1", "m2", "m1") if kind != "rerate" else ()
    rerate = Rerate(MemoryStore(), LADDERS, Correction(kind, "l", ids), NoHistory(), no_send)
    assert (rerate.void, rerate.unvoid) == (void, unvoid)


async def test_voids_already_as_asked_are_nothing_to_do():
    store = MemoryStore()
    await store.set_voids("l", {"m1": {"reason": "", "at": 0.0}}, [], 0)
    report = await Rerate(store, LADDERS, Correction("void", "l", ("m1",)), NoHistory(), no_send).run()
    assert report.nothing_to_do and report.generation == 0


class Topic:
    """The ladder's history, all applied by the live worker, whose consumer group committed
    `committed` of partition 0."""

    def __init__(self, entries: list, committed: int) -> None:
        self.entries, self.offset = entries, committed

    async def read(self) -> list:
        new, self.entries = self.entries, []
        return new

    def reached(self) -> dict[int, int]:
        return {0: 4}

    def committed(self) -> dict[int, int]:
        return {0: self.offset}


@pytest.mark.parametrize(("committed", "resent"), [(4, []), (2, ["m2:a", "m2:c", "m3:a", "m3:b"])])
async def test_a_void_sends_again_only_the_live_events_not_known_with_the_broker(committed, resent):
    """The worker produced its last batch (m2, m3) but its markers still hold their events (they
    shrink at the ladder's next commit). With the group's offset past them, they are known with
    the broker and the void sends only its correction events; with the offset before them
    (the worker may have died before producing), it sends them again first."""
    store = MemoryStore()
    matches = [
        parse_match(duel(f"m{i}", "abc"[i % 3], "abc"[(i + 1) % 3], ladder="l"), LADDERS) for i in range(4)
    ]
    worker = Processor(LADDERS, store)
    worker.produced(await worker.process(matches[:2], [(0, 0), (0, 1)]))
    worker.produced(await worker.process(matches[2:], [(0, 2), (0, 3)]))
    assert set(await store.unproduced("l", 0, ["m0", "m1", "m2", "m3"])) == {"m2", "m3"}
    sent: list[dict] = []

    async def send(events: list[dict]) -> None:
        sent.extend(events)

    entries = [(m, (0, i)) for i, m in enumerate(matches)]
    report = await Rerate(
        store, LADDERS, Correction("void", "l", ("m1",)), Topic(entries, committed), send
    ).run()
    corrections = [e["event_id"] for e in sent if e.get("kind") == "correction"]
    assert len(corrections) == report.corrections > 0
    assert sorted(e["event_id"] for e in sent if e.get("kind") != "correction") == resent


async def test_the_hold_an_aborted_switch_kept_ends_once_its_events_are_sent():
    """A switch that took effect while its re-rate heard only errors (every reply lost): the
    abort keeps its players held, their events in the outbox. The next re-rate sends them first
    and then frees the players, whose live commits go on while it builds."""
    store = MemoryStore()
    generation, _ = await store.begin_rerate("l", "old", 60, None)
    live = await store.generations("l")
    await store.freeze("l", "old", 60)
    pending = [{"player_id": "a", "event_id": "rerate:a"}]
    await store.switch("l", "old", generation, live, pending)
    await store.abort_rerate("l", "old")
    sent: list[dict] = []

    async def send(events: list[dict]) -> None:
        sent.extend(events)

    rerate = Rerate(store, LADDERS, Correction("rerate", "l", (), "", {"beta": 5.0}), Topic([], 0), send)
    rerate.live = await store.generations("l")
    write = StateWrite("a", PlayerState(1.0, 1.0, 1, 100.0, 1), 0)
    with pytest.raises(LadderFrozen):
        await store.commit(Commit("l", [write], {"m1": []}))
    async with rerate.lock():
        assert sent == pending
        await store.commit(Commit("l", [write], {"m1": []}))


class LateRenew(MemoryStore):
    """A store on which the lock keeper's renew lands after the finish (sent again after its
    reply was lost): the finish returns once that renew was refused."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = asyncio.Event()

    async def renew(self, ladder: str, owner: str, lease: float) -> None:
        try:
            await super().renew(ladder, owner, lease)
        except LockLost:
            self.refused.set()
            raise

    async def finish_rerate(self, ladder: str, owner: str) -> None:
        await super().finish_rerate(ladder, owner)
        await self.refused.wait()


async def test_a_renew_refused_after_the_finish_fails_nothing():
    """The switch and the finish took effect: a renew the store refuses after them (the lock
    released) is no failure of the re-rate, which reports its void."""
    store = LateRenew()
    matches = [
        parse_match(duel(f"m{i}", "ab"[i % 2], "ab"[1 - i % 2], ladder="l"), LADDERS) for i in range(4)
    ]
    worker = Processor(LADDERS, store)
    worker.produced(await worker.process(matches, [(0, i) for i in range(4)]))
    entries = [(m, (0, i)) for i, m in enumerate(matches)]
    rerate = Rerate(
        store,
        LADDERS,
        Correction("void", "l", ("m1",)),
        Topic(entries, 4),
        no_events,
        RerateOptions(Tuning(lease=0.6)),
    )
    assert (await rerate.run()).voided == ["m1"]


async def no_events(events: list[dict]) -> None:
    pass
