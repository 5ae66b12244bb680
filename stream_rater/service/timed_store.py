"""A state store wrapper that times every round trip into the worker's metrics."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from stream_rater.service import metrics
from stream_rater.store.base import Commit, Lookup, Snapshot, StateStore


class TimedStore(StateStore):
    """Wraps a store to time every round trip into the `store_round_trip_seconds` metric."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner

    @property
    def round_trips(self) -> int:  # type: ignore[override]
        return self.inner.round_trips

    async def read(self, ladder: str, player_ids: Iterable[str], effect_ids: Iterable[str],
                   match_ids: Iterable[str]) -> Snapshot:
        with metrics.STORE_ROUND_TRIP.labels("read").time():
            return await self.inner.read(ladder, player_ids, effect_ids, match_ids)

    async def commit(self, commit: Commit) -> None:
        with metrics.STORE_ROUND_TRIP.labels("commit").time():
            await self.inner.commit(commit)

    async def players(self, ladder: str, effects: bool = False) -> dict:
        return await self.inner.players(ladder, effects)

    async def leaderboard(self, ladder: str, top: int) -> list[tuple[str, float]]:
        return await self.inner.leaderboard(ladder, top)

    async def history(self, ladder: str, player_id: str, limit: int) -> list[dict]:
        return await self.inner.history(ladder, player_id, limit)

    async def lookup(self, ladder: str, player_ids: Sequence[str]) -> Lookup:
        with metrics.STORE_ROUND_TRIP.labels("lookup").time():
            return await self.inner.lookup(ladder, player_ids)

    async def ladders(self) -> list[str]:
        return await self.inner.ladders()

    async def ping(self) -> bool:
        return await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()
