"""The state store: `StateStore`, every role of `store.roles` at once, the base the memory and
Redis stores implement; and `OneLadder`, the one-ladder `read`/`commit` over the batch calls.

The value types that cross the interface live in `store.values` and are re-exported here.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence

from stream_rater.store.roles import DeploymentStore, ReadStore, RerateStore
from stream_rater.store.values import (
    DEFAULT_TIMEOUTS,
    BoardAround,
    BoardBehind,
    BoardRanks,
    BoardRow,
    Commit,
    CommitConflict,
    Event,
    GenerationGone,
    Generations,
    HeldStale,
    LadderFrozen,
    LockLost,
    Lookup,
    PlayerState,
    RatingTotals,
    ReadRequest,
    RedisTimeouts,
    RerateRunning,
    Snapshot,
    StateWrite,
    Void,
)

__all__ = [
    "BoardAround",
    "BoardBehind",
    "BoardRanks",
    "BoardRow",
    "Commit",
    "CommitConflict",
    "DEFAULT_TIMEOUTS",
    "Event",
    "GenerationGone",
    "Generations",
    "HeldStale",
    "LadderFrozen",
    "LockLost",
    "Lookup",
    "RatingTotals",
    "OneLadder",
    "PlayerState",
    "ReadRequest",
    "RedisTimeouts",
    "RerateRunning",
    "Snapshot",
    "StateStore",
    "StateWrite",
    "Void",
]


class OneLadder:
    """`read` and `commit` of one ladder, as one-request `read_many`/`commit_many` calls (so
    a wrapper that times those times these too)."""

    async def read_many(self, requests: Sequence[ReadRequest]) -> list[Snapshot]:
        raise NotImplementedError

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        raise NotImplementedError

    async def read(
        self,
        ladder: str,
        player_ids: Iterable[str],
        effect_ids: Iterable[str],
        match_ids: Iterable[str],
        generation: int | None = None,
    ) -> Snapshot:
        """States of the given players/effects and the stored events of applied matches, of
        the live generation (or the staging `generation`; `GenerationGone` if it is not)."""
        request = ReadRequest(ladder, list(player_ids), list(effect_ids), list(match_ids), generation)
        [snapshot] = await self.read_many([request])
        return snapshot

    async def commit(self, commit: Commit) -> None:
        """Apply `commit` atomically or raise `CommitConflict` having written nothing
        (`LadderFrozen` while a re-rate switches; `GenerationGone` for an aborted staging
        generation)."""
        [refused] = await self.commit_many([commit])
        if refused is not None:
            raise refused


class StateStore(OneLadder, ReadStore, RerateStore, DeploymentStore):
    """Persistence of ladders' player states, match markers, leaderboards and histories: every
    role of `store.roles` (their methods are documented there), implemented by the memory and
    Redis stores.

    Each ladder's data lives in a *generation*. The worker and every read use the live one;
    a re-rate (`stream_rater.corrections`) builds a staging generation beside it, freezes the
    live one for a moment, and `switch` makes the staging one live in one atomic step."""

    #: Round trips to the backing service so far (reads + commits; counted alike in memory).
    round_trips: int = 0
    #: What the store's keys are, for messages (a Redis store: its key prefix).
    namespace: str = "the memory store"
    #: The deployment record of a store kept in memory (`deployment_record`).
    _record: dict[str, str] | None = None
    #: Ladder → its matches topic, of a store kept in memory (`ladder_topics`).
    _topics: dict[str, str] | None = None

    @abstractmethod
    async def read_many(self, requests: Sequence[ReadRequest]) -> list[Snapshot]:
        """See `BatchStore.read_many`."""

    @abstractmethod
    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        """See `BatchStore.commit_many`."""

    async def deployment_record(self, fields: Mapping[str, str] | None = None) -> dict[str, str]:
        """The store's deployment record (``format``: see `store.deployment`),
        after first writing each of `fields` the record does not have yet (in one step: two
        processes binding at once cannot both write). Kept in the store object itself here,
        as a memory store's data is."""
        if self._record is None:
            self._record = {}
        for name, value in (fields or {}).items():
            self._record.setdefault(name, value)
        return dict(self._record)

    async def unrecorded_format(self) -> int | None:
        """The earlier stored format a store without a deployment record is in, told by its
        layout, or None (new, or of this release's format): a memory store is never earlier."""
        return None

    async def ladder_topics(self, ladders: Sequence[str], topic: str | None) -> dict[str, str]:
        """The matches topic recorded for each of `ladders` that has one, after recording
        `topic` (if given) for those that had none (`store.deployment`)."""
        if self._topics is None:
            self._topics = {}
        if topic is not None:
            for ladder in ladders:
                self._topics.setdefault(ladder, topic)
        return {ladder: self._topics[ladder] for ladder in ladders if ladder in self._topics}

    async def ping(self) -> bool:
        """True when the store answers."""
        return True

    async def close(self) -> None:
        """Release connections."""
