"""A checkpoint survives chunking; a torn one (a chunk missing, a digest mismatch) is refused."""

from __future__ import annotations

import pytest

from stream_rater.checkpoints import TornCheckpoint
from stream_rater.checkpoints.format import decode, encode
from tests.unit.checkpoints.support import checkpoint_at, entries


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


def test_a_bloom_filter_never_misses_an_id_it_holds_and_rarely_claims_others():
    from stream_rater.checkpoints.format import Bloom

    ids = [f"m{i}" for i in range(20_000)]
    bloom = Bloom.of(ids)
    assert all(bloom.contains(m) for m in ids)
    false = sum(bloom.contains(f"x{i}") for i in range(20_000))
    assert false < 20_000 * 0.02
