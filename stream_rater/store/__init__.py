"""Player-state persistence behind one small interface (`StateStore`).

- `memory.MemoryStore` — in-process, for replay and unit tests.
- `redis_store.RedisStore` — the real one: one Lua read + one atomic Lua commit per batch.
"""

from stream_rater.store.base import (
    Commit,
    CommitConflict,
    Lookup,
    PlayerState,
    Snapshot,
    StateStore,
    StateWrite,
    open_store,
)

__all__ = [
    "Commit",
    "CommitConflict",
    "Lookup",
    "PlayerState",
    "Snapshot",
    "StateStore",
    "StateWrite",
    "open_store",
]
