"""A ladder's checkpoint: everything a replay from its offsets needs to reproduce the live
ladder, its encoding into immutable chunks and a manifest written last, and its digest.

A checkpoint is the state a replay of the ladder's log up to `Checkpoint.positions`
(partition → next offset) leaves: players' and effects' states, each shadow's, the last
applied match ids (`state.SEED_MARKERS`: the markers a later redelivery meets), the ids of
the records passed since the previous checkpoint (its *segment*, kept as a Bloom filter in the
manifest, not in the chunks: applied, voided, duplicate or
unratable — a correction of one of them must start before this checkpoint), the voids and
parameter overrides it was made with, the prediction-quality sums and window, and the season
starts passed. Its size follows the ladder's players, not its history.

Encoded as msgpack, cut into chunks of at most `CHUNK_BYTES` (a Kafka record is at most 1 MB
by default); the manifest names the chunk count and the SHA-256 of the whole encoding, and
carries what choosing a checkpoint needs without loading one: positions, voided ids,
parameters, season count and a Bloom filter of the segment (a false positive only makes a
correction start from an older checkpoint). A checkpoint whose manifest is missing, or whose
chunks do not hash to its digest, is torn and never used (`decode` raises `TornCheckpoint`).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from stream_rater.store.base import PlayerState

#: Largest chunk of a checkpoint's encoding, in bytes: under a broker's default 1 MB record
#: limit with room for the key and the record overhead.
CHUNK_BYTES = 900_000

#: The encoding's version, in every manifest; a reader refuses another.
FORMAT = 1

#: Players' (or effects') states by id.
States = dict[str, PlayerState]
#: Scorer → (cumulative sums, the window of match scores, oldest first).
Quality = dict[str, tuple[dict[str, float], list[list[Any]]]]


class TornCheckpoint(ValueError):
    """A checkpoint that cannot be used: chunks missing, or not hashing to the manifest's digest."""


@dataclass(slots=True)
class LadderState:
    """What a replay of one ladder (or one shadow of it) leaves in a store."""

    players: States = field(default_factory=dict)
    effects: States = field(default_factory=dict)
    quality: Quality = field(default_factory=dict)


@dataclass(slots=True)
class Checkpoint:
    """A ladder's replay state at `positions` (see the module docstring)."""

    ladder: str
    positions: dict[int, int]
    state: LadderState
    #: Shadow internal name (``<ladder>~<shadow>``) → its state.
    shadows: dict[str, LadderState] = field(default_factory=dict)
    #: The last match ids applied (in log order), and the match ids of the records passed
    #: since the previous checkpoint (see the module docstring).
    applied: list[str] = field(default_factory=list)
    segment: list[str] = field(default_factory=list)
    voids: dict[str, dict[str, Any]] = field(default_factory=dict)
    params: dict[str, Any] | None = None
    seasons: list[str] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    id: str = ""
    #: The segment's Bloom filter, once made (a checkpoint read back has this, not the ids).
    bloom: Bloom | None = None

    def __post_init__(self) -> None:
        if not self.id:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.created))
            self.id = f"ck-{stamp}-{uuid.uuid4().hex[:6]}"

    def line(self) -> str:
        """``checkpoint ck-… of ladder 'x' at offsets {0: 1200} (1,180 matches, 2026-…)``"""
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.created))
        return (
            f"checkpoint {self.id} of ladder {self.ladder!r} at offsets {self.positions} "
            f"({len(self.applied):,} matches applied, made {at})"
        )


#: Bits and hashes of a segment's Bloom filter: 10 bits per id (about 1 % false positives),
#: between 64 kbit and 4 Mbit (the manifest stays one record).
BLOOM_BITS = (1 << 16, 1 << 22)
BLOOM_HASHES = 7


class Bloom:
    """A Bloom filter of match ids: `contains` is never wrong about an id that was added."""

    def __init__(self, bits: bytearray) -> None:
        self.bits = bits

    @classmethod
    def of(cls, ids: Sequence[str]) -> Bloom:
        size = min(max(10 * len(ids), BLOOM_BITS[0]), BLOOM_BITS[1])
        bloom = cls(bytearray((size + 7) // 8))
        for match_id in ids:
            for bit in bloom._bits(match_id):
                bloom.bits[bit >> 3] |= 1 << (bit & 7)
        return bloom

    def _bits(self, match_id: str) -> list[int]:
        raw = hashlib.blake2b(match_id.encode(), digest_size=8 * 4).digest()
        size = len(self.bits) * 8
        one, two = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:16], "little") | 1
        return [(one + i * two) % size for i in range(BLOOM_HASHES)]

    def contains(self, match_id: str) -> bool:
        return all(self.bits[bit >> 3] & (1 << (bit & 7)) for bit in self._bits(match_id))


@dataclass(frozen=True, slots=True)
class Manifest:
    """What is written last: which chunks make the checkpoint, their digest, and what choosing
    a checkpoint needs (see the module docstring)."""

    ladder: str
    id: str
    chunks: int
    digest: str
    positions: dict[int, int]
    created: float
    applied: int
    voids: frozenset[str] = frozenset()
    params: dict[str, Any] | None = None
    seasons: int = 0
    segment: Bloom = field(default_factory=lambda: Bloom(bytearray(1)))
    format: int = FORMAT

    def pack(self) -> bytes:
        return bytes(
            msgpack.packb(
                [
                    self.format,
                    self.ladder,
                    self.id,
                    self.chunks,
                    self.digest,
                    sorted(self.positions.items()),
                    self.created,
                    self.applied,
                    sorted(self.voids),
                    sorted(self.params.items()) if self.params is not None else None,
                    self.seasons,
                    bytes(self.segment.bits),
                ],
                use_bin_type=True,
            )
        )

    @classmethod
    def unpack(cls, raw: bytes) -> Manifest:
        fields = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        if fields[0] != FORMAT:
            raise TornCheckpoint(f"checkpoint {fields[2]}: format {fields[0]}, this version reads {FORMAT}")
        _, ladder, ident, chunks, digest, positions, created, applied, voids, params, seasons, bloom = fields
        return cls(
            ladder,
            ident,
            chunks,
            digest,
            dict(positions),
            created,
            applied,
            frozenset(voids),
            dict(params) if params is not None else None,
            seasons,
            Bloom(bytearray(bloom)),
        )


def _states(states: Mapping[str, PlayerState]) -> list[list[Any]]:
    return [[pid, *state] for pid, state in sorted(states.items())]


def _ladder_state(state: LadderState) -> list[Any]:
    quality = [
        [scorer, sorted(sums.items()), window] for scorer, (sums, window) in sorted(state.quality.items())
    ]
    return [_states(state.players), _states(state.effects), quality]


def _unladder_state(raw: Sequence[Any]) -> LadderState:
    players, effects, quality = raw
    return LadderState(
        {row[0]: PlayerState._make(row[1:]) for row in players},
        {row[0]: PlayerState._make(row[1:]) for row in effects},
        {scorer: (dict(sums), [list(s) for s in window]) for scorer, sums, window in quality},
    )


def encode(checkpoint: Checkpoint, chunk_bytes: int = CHUNK_BYTES) -> tuple[list[bytes], Manifest]:
    """The checkpoint's chunks (in order) and its manifest (to write after them)."""
    body = [
        checkpoint.ladder,
        sorted(checkpoint.positions.items()),
        _ladder_state(checkpoint.state),
        [[name, _ladder_state(s)] for name, s in sorted(checkpoint.shadows.items())],
        checkpoint.applied,
        sorted(checkpoint.voids.items()),
        sorted((checkpoint.params or {}).items()) if checkpoint.params is not None else None,
        checkpoint.seasons,
        checkpoint.created,
        checkpoint.id,
    ]
    blob = bytes(msgpack.packb(body, use_bin_type=True))
    chunks = [blob[i : i + chunk_bytes] for i in range(0, len(blob), chunk_bytes)] or [b""]
    manifest = Manifest(
        checkpoint.ladder,
        checkpoint.id,
        len(chunks),
        hashlib.sha256(blob).hexdigest(),
        dict(checkpoint.positions),
        checkpoint.created,
        len(checkpoint.applied),
        frozenset(checkpoint.voids),
        dict(checkpoint.params) if checkpoint.params is not None else None,
        len(checkpoint.seasons),
        checkpoint.bloom if checkpoint.bloom is not None else Bloom.of(checkpoint.segment),
    )
    return chunks, manifest


def decode(manifest: Manifest, chunks: Mapping[int, bytes]) -> Checkpoint:
    """The checkpoint `manifest` describes from its `chunks` (number → bytes); `TornCheckpoint`
    if one is missing or they do not hash to the manifest's digest."""
    missing = [n for n in range(manifest.chunks) if n not in chunks]
    if missing:
        raise TornCheckpoint(f"checkpoint {manifest.id}: chunks {missing} missing")
    blob = b"".join(chunks[n] for n in range(manifest.chunks))
    if hashlib.sha256(blob).hexdigest() != manifest.digest:
        raise TornCheckpoint(f"checkpoint {manifest.id}: its chunks do not match the manifest's digest")
    ladder, positions, state, shadows, applied, voids, params, seasons, created, ident = msgpack.unpackb(
        blob, raw=False, strict_map_key=False
    )
    return Checkpoint(
        ladder,
        dict(positions),
        _unladder_state(state),
        {name: _unladder_state(s) for name, s in shadows},
        list(applied),
        [],
        dict(voids),
        dict(params) if params is not None else None,
        list(seasons),
        created,
        ident,
        manifest.segment,
    )


def digest(checkpoint: Checkpoint) -> str:
    """The SHA-256 a manifest of `checkpoint` carries."""
    return encode(checkpoint)[1].digest
