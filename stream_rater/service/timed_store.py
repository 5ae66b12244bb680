"""A state store wrapper that times the worker's round trips into its metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stream_rater.service import metrics
from stream_rater.store.base import (
    Commit,
    CommitConflict,
    Lookup,
    OneLadder,
    ReadRequest,
    Snapshot,
    StateStore,
)


class TimedStore(OneLadder):
    """Wraps a store to time the batch path's reads and commits (`read`/`commit` too: they
    are one-ladder `read_many`/`commit_many`) and the read API's lookups into the
    `store_round_trip_seconds` metric. Every other method is the inner store's own
    (`__getattr__`), so the wrapper serves every role of `store.roles` its inner store does."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner

    @property
    def round_trips(self) -> int:
        """The inner store's round trips."""
        return self.inner.round_trips

    async def read_many(self, requests: Sequence[ReadRequest]) -> list[Snapshot]:
        with metrics.STORE_ROUND_TRIP.labels("read").time():
            return await self.inner.read_many(requests)

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        with metrics.STORE_ROUND_TRIP.labels("commit").time():
            return await self.inner.commit_many(commits)

    async def lookup(self, ladder: str, player_ids: Sequence[str], since: float | None = None) -> Lookup:
        with metrics.STORE_ROUND_TRIP.labels("lookup").time():
            return await self.inner.lookup(ladder, player_ids, since)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
