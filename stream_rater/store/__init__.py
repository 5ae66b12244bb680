"""Player-state persistence: one small protocol per kind of caller (`roles`: `BatchStore`,
`ReadStore`, `RerateStore`, `VoidStore`, `DeploymentStore`), all of them at once in `StateStore`.

- `memory.MemoryStore` — in-process, for replay and unit tests.
- `redis.RedisStore` — the real one: one Lua read + one atomic Lua commit per batch.

`open_store` picks one by URL; it lives here, above both, so that `base` imports neither.
"""

from stream_rater.config.settings import DEFAULT_HISTORY, Settings
from stream_rater.store.base import (
    DEFAULT_TIMEOUTS,
    BoardAround,
    BoardBehind,
    BoardRanks,
    BoardRow,
    Commit,
    CommitConflict,
    Lookup,
    PlayerState,
    RatingTotals,
    ReadRequest,
    RedisTimeouts,
    Snapshot,
    StateStore,
    StateWrite,
)
from stream_rater.store.roles import BatchStore, DeploymentStore, ReadStore, RerateStore, VoidStore

__all__ = [
    "BatchStore",
    "DeploymentStore",
    "ReadStore",
    "RerateStore",
    "VoidStore",
    "BoardAround",
    "BoardBehind",
    "BoardRanks",
    "BoardRow",
    "Commit",
    "CommitConflict",
    "Lookup",
    "RatingTotals",
    "PlayerState",
    "ReadRequest",
    "RedisTimeouts",
    "Snapshot",
    "StateStore",
    "StateWrite",
    "open_store",
]


def open_store(
    url: str,
    *,
    history_limit: int = DEFAULT_HISTORY,
    marker_ttl: float = 0.0,
    timeouts: RedisTimeouts = DEFAULT_TIMEOUTS,
    prefix: str = Settings.redis_prefix,
    known_boards: int = Settings.known_states,
) -> StateStore:
    """A store for `url`: ``memory``, ``redis://…``/``rediss://…``/``unix://…``, or a Redis
    Cluster's ``redis+cluster://host:port[,host:port…]``/``rediss+cluster://…``; a Redis
    client waits as long as `timeouts` say (by default the `Settings` defaults), and its keys
    start with `prefix` (`store.deployment`); a Redis store keeps what its commits left on the
    leaderboards for at most `known_boards` players (`store.redis.boards`)."""
    if url in ("memory", "memory://"):
        from stream_rater.store.memory import MemoryStore

        return MemoryStore(history_limit=history_limit)
    if url.startswith(("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")):
        from stream_rater.store.redis import RedisStore

        return RedisStore.from_url(
            url,
            timeouts=timeouts,
            history_limit=history_limit,
            marker_ttl=marker_ttl,
            prefix=prefix,
            known_boards=known_boards,
        )
    raise ValueError(
        f"unknown store URL {url!r}: use 'memory', 'redis://host:port/db' or "
        "'redis+cluster://host:port[,host:port…]'"
    )
