"""A ladder's checkpoint: everything a replay from its offsets needs to reproduce the live
ladder, its encoding into immutable chunks and a manifest written last, and its digest.

A checkpoint is the state a replay of the ladder's log up to `Checkpoint.positions`
(partition → next offset) leaves: players' and effects' states, each shadow's, the applied
match ids (the dedupe a later redelivery meets), the ids of every record passed (applied,
voided, duplicate or unratable: a correction of one of them must start before it), the
voids and parameter overrides it was made with, the prediction-quality sums and window, and
the season starts passed. Encoded as msgpack, cut into chunks of at most `CHUNK_BYTES` (a
Kafka record is at most 1 MB by default); the manifest names the chunk count and the SHA-256
of the whole encoding. A checkpoint whose manifest is missing, or whose chunks do not hash to
its digest, is torn and never used (`decode` raises `TornCheckpoint`).
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
    #: Match ids applied (in log order), and every record's match id passed.
    applied: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    voids: dict[str, dict[str, Any]] = field(default_factory=dict)
    params: dict[str, Any] | None = None
    seasons: list[str] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    id: str = ""

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


@dataclass(frozen=True, slots=True)
class Manifest:
    """What is written last: which chunks make the checkpoint, and their digest."""

    ladder: str
    id: str
    chunks: int
    digest: str
    positions: dict[int, int]
    created: float
    applied: int
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
                ]
            )
        )

    @classmethod
    def unpack(cls, raw: bytes) -> Manifest:
        version, ladder, ident, chunks, digest, positions, created, applied = msgpack.unpackb(raw)
        if version != FORMAT:
            raise TornCheckpoint(f"checkpoint {ident}: format {version}, this version reads {FORMAT}")
        return cls(ladder, ident, chunks, digest, dict(positions), created, applied, version)


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
        checkpoint.passed,
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
    ladder, positions, state, shadows, applied, passed, voids, params, seasons, created, ident = (
        msgpack.unpackb(blob, raw=False, strict_map_key=False)
    )
    return Checkpoint(
        ladder,
        dict(positions),
        _unladder_state(state),
        {name: _unladder_state(s) for name, s in shadows},
        list(applied),
        list(passed),
        dict(voids),
        dict(params) if params is not None else None,
        list(seasons),
        created,
        ident,
    )


def digest(checkpoint: Checkpoint) -> str:
    """The SHA-256 a manifest of `checkpoint` carries."""
    return encode(checkpoint)[1].digest
