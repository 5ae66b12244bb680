"""Chunks written without their manifest (a writer killed between) are never listed nor used."""

from __future__ import annotations

from stream_rater.checkpoints import MemorySink, ReplayNeeds, latest_usable
from stream_rater.checkpoints.format import encode
from tests.unit.checkpoints.support import checkpoint_at, entries


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
    found = await latest_usable(sink, "ts", ReplayNeeds({}, None))
    assert found is not None and found.id == whole.id
