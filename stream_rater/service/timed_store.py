"""A state store wrapper that times every round trip into the worker's metrics."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from stream_rater.service import metrics
from stream_rater.store.base import (
    Commit,
    CommitConflict,
    Generations,
    Lookup,
    PlayerState,
    ReadRequest,
    Snapshot,
    StateStore,
)


class TimedStore(StateStore):
    """Wraps a store to time the worker's round trips into the `store_round_trip_seconds`
    metric; everything else is passed through."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.namespace = inner.namespace

    @property
    def round_trips(self) -> int:  # type: ignore[override]
        return self.inner.round_trips

    async def read_many(self, requests: Sequence[ReadRequest]) -> list[Snapshot]:
        with metrics.STORE_ROUND_TRIP.labels("read").time():
            return await self.inner.read_many(requests)

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        with metrics.STORE_ROUND_TRIP.labels("commit").time():
            return await self.inner.commit_many(commits)

    async def lookup(self, ladder: str, player_ids: Sequence[str]) -> Lookup:
        with metrics.STORE_ROUND_TRIP.labels("lookup").time():
            return await self.inner.lookup(ladder, player_ids)

    async def players(
        self,
        ladder: str,
        effects: bool = False,
        generation: int | None = None,
        only: Collection[str] | None = None,
    ) -> dict[str, PlayerState]:
        return await self.inner.players(ladder, effects, generation, only)

    async def leaderboard(
        self, ladder: str, top: int, start: int = 0, season: int | None = None
    ) -> list[tuple[str, float]]:
        return await self.inner.leaderboard(ladder, top, start, season)

    async def seasons(self, ladder: str) -> list[str]:
        return await self.inner.seasons(ladder)

    async def active_leaderboard(self, ladder: str, top: int, since: float) -> list[tuple[str, float]]:
        return await self.inner.active_leaderboard(ladder, top, since)

    async def active_places(
        self, ladder: str, player_ids: Sequence[str], since: float
    ) -> tuple[dict[str, int], int]:
        return await self.inner.active_places(ladder, player_ids, since)

    async def history(self, ladder: str, player_id: str, limit: int) -> list[dict[str, Any]]:
        return await self.inner.history(ladder, player_id, limit)

    async def ladders(self) -> list[str]:
        return await self.inner.ladders()

    async def generations(self, ladder: str) -> Generations:
        return await self.inner.generations(ladder)

    async def begin_rerate(
        self, ladder: str, owner: str, lease: float, params: Mapping[str, Any] | None
    ) -> tuple[int, int | None]:
        return await self.inner.begin_rerate(ladder, owner, lease, params)

    async def renew(self, ladder: str, owner: str, lease: float) -> None:
        await self.inner.renew(ladder, owner, lease)

    async def freeze(self, ladder: str, owner: str, ttl: float) -> None:
        await self.inner.freeze(ladder, owner, ttl)

    async def switch(
        self, ladder: str, owner: str, staging: int, live: Generations, outbox: Sequence[dict[str, Any]]
    ) -> None:
        await self.inner.switch(ladder, owner, staging, live, outbox)

    async def finish_rerate(self, ladder: str, owner: str) -> None:
        await self.inner.finish_rerate(ladder, owner)

    async def abort_rerate(self, ladder: str, owner: str) -> int | None:
        return await self.inner.abort_rerate(ladder, owner)

    async def drop_generation(self, ladder: str, generation: int) -> None:
        await self.inner.drop_generation(ladder, generation)

    async def outbox(self, ladder: str) -> list[dict[str, Any]]:
        return await self.inner.outbox(ladder)

    async def unproduced(self, ladder: str, generation: int, match_ids: Sequence[str]) -> list[str]:
        return await self.inner.unproduced(ladder, generation, match_ids)

    async def hold_events(
        self, ladder: str, generation: int, events: Mapping[str, list[dict[str, Any]]]
    ) -> None:
        await self.inner.hold_events(ladder, generation, events)

    async def voids(self, ladder: str) -> dict[str, dict[str, Any]]:
        return await self.inner.voids(ladder)

    async def set_voids(
        self, ladder: str, add: Mapping[str, dict[str, Any]], remove: Iterable[str], generation: int
    ) -> None:
        await self.inner.set_voids(ladder, add, remove, generation)

    async def deployment_record(self, fields: Mapping[str, str] | None = None) -> dict[str, str]:
        return await self.inner.deployment_record(fields)

    async def ladder_topics(self, ladders: Sequence[str], topic: str | None) -> dict[str, str]:
        return await self.inner.ladder_topics(ladders, topic)

    async def ping(self) -> bool:
        return await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()
