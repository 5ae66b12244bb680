"""Checkpoints in memory: the format survives chunking and refuses torn checkpoints, a replay
from a checkpoint equals the full replay, and a void from a checkpoint equals a full re-rate
while reading only the history after it."""

from __future__ import annotations

import random
from typing import Any

import pytest

from stream_rater.checkpoints import Checkpoint, MemorySink, Replica, TornCheckpoint, latest_usable
from stream_rater.checkpoints.format import decode, encode
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.corrections.rerate import Correction, Rerate
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel, match

LADDERS = Ladders(
    [Ladder("ts", "trueskill", {"leaderboard_min_games": 3}), Ladder("elo", "elo")], source="test"
)


def entries(ladder: str, n: int, seed: int = 7) -> list[tuple[Any, tuple[int, int]]]:
    """`n` matches of `ladder` among 20 players (a few 2-vs-2), at offsets 0..n-1 of partition 0."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = rng.sample([f"p{k}" for k in range(20)], 4)
        event = (
            match(f"m{i}", p[:2], p[2:], ladder=ladder)
            if i % 5 == 0
            else duel(f"m{i}", *p[:2], ladder=ladder)
        )
        event["finished_at"] = 1.7e9 + i
        out.append((parse_match(event, LADDERS), (0, i)))
    return out


async def replayed(history: list, ladder: str, voids: dict | None = None) -> MemoryStore:
    store = MemoryStore()
    if voids:
        await store.set_voids(ladder, voids, [], 0)
    await Processor(LADDERS, store).process([m for m, _ in history], [w for _, w in history])
    return store


def exact(states: dict) -> dict:
    return {p: tuple(s)[:4] + tuple(s)[5:] for p, s in states.items()}


async def checkpoint_at(history: list, ladder: str, upto: int, voids: dict | None = None) -> Checkpoint:
    replica = await Replica(LADDERS, ladder, voids=voids).open()
    await replica.apply(history[:upto])
    return await replica.checkpoint()


async def test_a_checkpoint_survives_chunking_and_a_torn_one_is_refused():
    history = entries("ts", 300)
    checkpoint = await checkpoint_at(history, "ts", 300)
    chunks, manifest = encode(checkpoint, chunk_bytes=1000)
    assert len(chunks) > 5 and manifest.chunks == len(chunks)
    back = decode(manifest, dict(enumerate(chunks)))
    assert back.state == checkpoint.state and back.applied == checkpoint.applied
    assert back.positions == {0: 300}
    with pytest.raises(TornCheckpoint, match="missing"):
        decode(manifest, dict(enumerate(chunks[:-1])))
    bad = dict(enumerate(chunks))
    bad[2] = bad[2][:-1] + bytes([bad[2][-1] ^ 1])
    with pytest.raises(TornCheckpoint, match="digest"):
        decode(manifest, bad)


async def test_chunks_without_a_manifest_are_never_listed_nor_used():
    sink = MemorySink()
    sink.chunk_bytes = 1000
    history = entries("ts", 200)
    whole = await checkpoint_at(history, "ts", 100)
    await sink.write(whole)
    torn = await checkpoint_at(history, "ts", 200)
    chunks, _ = encode(torn, sink.chunk_bytes)
    await sink.write_chunks(torn, chunks)  # a writer killed before its manifest
    assert [m.id for m in await sink.manifests("ts")] == [whole.id]
    found = await latest_usable(sink, "ts", {}, None)
    assert found is not None and found.id == whole.id


@pytest.mark.parametrize("ladder", ["ts", "elo"])
async def test_a_replay_from_a_checkpoint_equals_the_whole_replay(ladder: str):
    history = entries(ladder, 400)
    sink = MemorySink()
    await sink.write(await checkpoint_at(history, ladder, 250))
    start = await latest_usable(sink, ladder, {}, None)
    assert start is not None
    replica = await Replica(LADDERS, ladder, start).open()
    await replica.apply(history)  # the first 250 are passed already
    full = await replayed(history, ladder)
    assert exact(await replica.store.players(ladder)) == exact(await full.players(ladder))
    assert await replica.store.leaderboard(ladder, 50) == await full.leaderboard(ladder, 50)
    (sums, window), (expected, whole) = [await s.quality(ladder, "live", 1000) for s in (replica.store, full)]
    assert window == whole and sums == pytest.approx(expected, rel=1e-12)  # summed in other batches
    again = await replica.store.read(ladder, [], [], ["m3", "m399"])
    assert set(again.applied) == {"m3", "m399"}, "the checkpoint's markers keep redeliveries duplicates"


async def test_a_checkpoint_past_a_voided_match_is_not_used_for_its_void():
    history = entries("ts", 300)
    sink = MemorySink()
    early, late = await checkpoint_at(history, "ts", 100), await checkpoint_at(history, "ts", 250)
    await sink.write(early)
    await sink.write(late)
    found = await latest_usable(sink, "ts", {"m150": {}}, None)
    assert found is not None and found.id == early.id
    found = await latest_usable(sink, "ts", {"m260": {}}, None)
    assert found is not None and found.id == late.id
    assert await latest_usable(sink, "ts", {"m50": {}}, None) is None
    assert await latest_usable(sink, "ts", {}, {"beta": 3.0}) is None


class Topic:
    """The ladder's history after the checkpoint, all applied by the live worker already."""

    def __init__(self, entries: list, end: int) -> None:
        self.entries, self.end, self.read_total = entries, end, 0

    async def read(self) -> list:
        new, self.entries = self.entries, []
        self.read_total += len(new)
        return new

    def reached(self) -> dict[int, int]:
        return {0: self.end}

    def committed(self) -> dict[int, int]:
        return {0: self.end}


async def test_a_void_from_a_checkpoint_equals_a_full_rerate_and_reads_only_after_it():
    history = entries("ts", 500)
    live = await replayed(history, "ts")
    start = await checkpoint_at(history, "ts", 400)
    topic = Topic(history[400:], 500)
    sent: list[dict] = []

    async def send(events: Any) -> None:
        sent.extend(events)

    correction = Correction("void", "ts", ("m450",), "cheat")
    report = await Rerate(live, LADDERS, correction, topic, send, start=start).run()
    assert topic.read_total == 100 and report.applied == 99 and report.checkpoint == start.id
    oracle = await replayed(history, "ts", {"m450": {}})
    assert exact(await live.players("ts")) == exact(await oracle.players("ts"))
    assert await live.leaderboard("ts", 50) == await oracle.leaderboard("ts", 50)
    assert sent and {e["player_id"] for e in sent} <= {f"p{k}" for k in range(20)}
