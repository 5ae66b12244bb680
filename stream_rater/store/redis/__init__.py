"""The Redis state store, on one Redis or a Redis Cluster.

- `keys` — the key layout (every key of a ladder in one cluster slot) and the key prefix.
- `scripts` — the Lua scripts (``*.lua`` here), their arguments and replies.
- `store` — `RedisStore`: the batch path and the read side; `control` — its re-rate control.
- `cluster` — the Redis Cluster client behind ``redis+cluster://`` URLs.
- `migrations` — upgrading data of earlier layouts (`upgrade_to_2`, with `migrate_markers`;
  `raise_format`).
"""

from stream_rater.store.redis.keys import DEFAULT_PREFIX, generation_key, ladder_key
from stream_rater.store.redis.migrations import migrate_markers, raise_format, upgrade_to_2
from stream_rater.store.redis.store import MAX_CONNECTIONS, RedisStore

__all__ = [
    "DEFAULT_PREFIX",
    "MAX_CONNECTIONS",
    "RedisStore",
    "generation_key",
    "ladder_key",
    "migrate_markers",
    "raise_format",
    "upgrade_to_2",
]
