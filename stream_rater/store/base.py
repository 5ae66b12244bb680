"""The state-store interface and the value types that cross it.

A batch is processed as: one `read` (states + "match applied" markers of every player and
match in the batch), pure computation, one `commit`. `commit` is atomic: it verifies that
every state is still at the version that was read and that no match of the batch has been
applied meanwhile, then writes all states, markers, leaderboard scores and history entries —
or writes nothing and raises `CommitConflict`, after which the caller re-reads and recomputes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import msgpack


class PlayerState(NamedTuple):
    """A stored rating state. ``version`` counts commits that changed it (0 = never stored).

    A named tuple rather than a dataclass: the processor creates one per player per match.
    """

    mu: float
    sigma: float | None
    games: int = 0
    last_played: float | None = None
    version: int = 0

    def pack(self) -> bytes:
        """Compact msgpack form: ``[mu, sigma, games, last_played, version]``."""
        return _PACKER.pack(self)  # a tuple packs as a msgpack array

    @classmethod
    def unpack(cls, raw: bytes) -> PlayerState:
        """Inverse of `pack`."""
        return cls._make(msgpack.unpackb(raw, raw=False))


#: Reused rather than one per `msgpack.packb` call. Packing a state is one C call that runs no
#: Python code, so sharing the packer is safe under the GIL.
_PACKER = msgpack.Packer(use_bin_type=True)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one `read` returns: stored states (absent = never rated), applied matches, and the
    ladder's watermark — how many matches were applied to it so far (0 for a new ladder). The
    watermark only grows; a store that shows less than was committed has lost data."""

    players: dict[str, PlayerState]
    effects: dict[str, PlayerState]
    applied: dict[str, list[dict]]
    watermark: int = 0


class StateWrite(NamedTuple):
    """A new state for one player or effect, valid only if the stored one is still at
    ``expected_version`` (0 = must not exist yet)."""

    player_id: str
    state: PlayerState
    expected_version: int
    is_effect: bool = False
    leaderboard_score: float | None = None


@dataclass(frozen=True, slots=True)
class Commit:
    """Everything one batch of one ladder writes, atomically."""

    ladder: str
    writes: Sequence[StateWrite]
    markers: Mapping[str, list[dict]]
    history: Mapping[str, list[dict]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Lookup:
    """What one `StateStore.lookup` returns: stored states, each ranked player's 0-based
    place on the leaderboard (best first), and how many players the leaderboard has."""

    players: dict[str, PlayerState]
    places: dict[str, int]
    ranked: int


class CommitConflict(Exception):
    """The commit was refused: a state changed since it was read, or a match was applied."""


class StateStore(ABC):
    """Persistence of ladders' player states, match markers, leaderboards and histories."""

    #: Round trips to the backing service so far (reads + commits; counted alike in memory).
    round_trips: int = 0

    @abstractmethod
    async def read(
        self, ladder: str, player_ids: Iterable[str], effect_ids: Iterable[str], match_ids: Iterable[str]
    ) -> Snapshot:
        """States of the given players/effects and the stored events of applied matches."""

    @abstractmethod
    async def commit(self, commit: Commit) -> None:
        """Apply `commit` atomically or raise `CommitConflict` having written nothing."""

    @abstractmethod
    async def players(self, ladder: str, effects: bool = False) -> dict[str, PlayerState]:
        """Every stored player (or effect) state of `ladder`."""

    @abstractmethod
    async def leaderboard(self, ladder: str, top: int) -> list[tuple[str, float]]:
        """The `top` players of `ladder` by display rating, best first."""

    @abstractmethod
    async def history(self, ladder: str, player_id: str, limit: int) -> list[dict]:
        """The player's most recent rating-changed events, newest first."""

    @abstractmethod
    async def lookup(self, ladder: str, player_ids: Sequence[str]) -> Lookup:
        """States and leaderboard places of many players, in one round trip."""

    @abstractmethod
    async def ladders(self) -> list[str]:
        """Names of the ladders that have stored players."""

    async def ping(self) -> bool:
        """True when the store answers."""
        return True

    async def close(self) -> None:
        """Release connections."""


def open_store(url: str, *, history_limit: int = 100, marker_ttl: float = 0.0) -> StateStore:
    """A store for `url`: ``memory``, ``redis://…``/``rediss://…``/``unix://…``, or a Redis
    Cluster's ``redis+cluster://host:port[,host:port…]``/``rediss+cluster://…``."""
    if url in ("memory", "memory://"):
        from stream_rater.store.memory import MemoryStore

        return MemoryStore(history_limit=history_limit)
    if url.startswith(("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")):
        from stream_rater.store.redis_store import RedisStore

        return RedisStore.from_url(url, history_limit=history_limit, marker_ttl=marker_ttl)
    raise ValueError(f"unknown store URL {url!r}: use 'memory', 'redis://host:port/db' or "
                     "'redis+cluster://host:port[,host:port…]'")
