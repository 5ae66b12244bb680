"""A store that fails as a network partition to a production store can, wrapped around any
store (memory or Redis), for the processor's tests on either: `LateLanding`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.exceptions

from stream_rater.store import Commit, CommitConflict


class LateLanding:
    """`store`, but its first commit call times out unapplied and lands late: just before the
    next commit call, which was computed from a read that did not see it (a partition healing
    delivers the held commit after the retry's read, which went out on another connection)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.held: Sequence[Commit] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if self.held is None:
            self.held = commits
            raise redis.exceptions.TimeoutError("Timeout reading from socket")
        if self.held:
            await self.store.commit_many(self.held)
            self.held = ()
        return list(await self.store.commit_many(commits))
