"""The Redis Cluster client behind ``redis+cluster://`` and ``rediss+cluster://`` store URLs.

``redis+cluster://[user:password@]host:port[,host:port…][?option=value…]`` names one or more
startup nodes of a Redis Cluster (``rediss+cluster://`` for TLS; query options as in a
``redis://``/``rediss://`` URL, e.g. ``ssl_ca_certs``). The client learns the other nodes and
the slot map from them, follows MOVED and ASK redirections, and routes each command — the
read and commit scripts included — by its first key: every key of a ladder carries the hash
tag ``{ladder}``, so a ladder's scripts run on the one master owning its slot.

While a ladder's slot is being migrated (``redis-cli --cluster reshard``) a script whose keys
are split between the two masters, or whose keys include one that does not exist yet (a new
"match applied" marker), is refused with ``TRYAGAIN`` until the migration ends; a failover
answers ``CLUSTERDOWN`` for a moment. redis-py retries those for well under a second, so
`ClusterClient` keeps retrying with backoff for up to `SETTLE_TIMEOUT` seconds and then raises
a `redis.exceptions.TimeoutError` (a transient error: the worker retries the batch later,
never dead-letters it). No reachable node at all is a `redis.exceptions.ConnectionError`
(redis-py says `RedisClusterException`, which is no `RedisError`), transient too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.exceptions import (
    ClusterError,
    ConnectionError,
    RedisClusterException,
    SlotNotCoveredError,
    TimeoutError,
    TryAgainError,
)

from stream_rater.waiting import backoff

#: URL schemes of a Redis Cluster store, and the plain scheme each stands for.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

#: Seconds a command keeps being retried while its slot migrates or the cluster fails over.
SETTLE_TIMEOUT = 60.0

#: Errors of a cluster in transition: a slot migrating (TRYAGAIN, and redis-py's "TTL
#: exhausted" after its own short retries), a failover (CLUSTERDOWN, a slot without owner).
_UNSETTLED = (TryAgainError, ClusterError, SlotNotCoveredError)

#: Set while a task holds one of its client's `max_connections` turns (a pipeline resends a
#: redirected command through the client: that must not wait for a second turn).
_HOLDING: ContextVar[bool] = ContextVar("stream_rater_cluster_turn", default=False)


def is_cluster_url(url: str) -> bool:
    """Whether `url` names a Redis Cluster (``redis+cluster://`` or ``rediss+cluster://``)."""
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def parse_cluster_url(url: str) -> tuple[str, list[tuple[str, int]]]:
    """The plain ``redis(s)://`` URL of the first node (credentials and options kept) and every
    startup node as ``(host, port)``; `ValueError` when `url` names no node."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES.get(parts.scheme)
    if scheme is None:
        raise ValueError(f"not a Redis Cluster URL: {url!r} (use redis+cluster://host:port[,host:port…])")
    credentials, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for address in filter(None, hosts.split(",")):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"Redis Cluster URL {url!r}: {address!r} is not host:port")
        nodes.append((host.strip("[]"), int(port)))
    if not nodes:
        raise ValueError(f"Redis Cluster URL {url!r} names no node")
    if parts.path not in ("", "/", "/0"):
        raise ValueError(f"Redis Cluster URL {url!r}: a cluster has database 0 only")
    first = f"{credentials}@{hosts.split(',')[0]}" if credentials else hosts.split(",")[0]
    return urlunsplit((scheme, first, "", parts.query, "")), nodes


class ClusterClient(RedisCluster):
    """`RedisCluster` that rides out slot migrations and failovers (see the module docstring)
    and makes a command wait for a free connection beyond `max_connections` at a time, like
    the single-Redis store's blocking pool, instead of failing with "Too many connections"."""

    def __init__(self, *args: Any, settle_timeout: float = SETTLE_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settle_timeout = settle_timeout
        self.in_flight = asyncio.Semaphore(kwargs.get("max_connections", 100))

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        """Run one command; retry it with backoff while its slot is unsettled."""
        deadline, delays = time.monotonic() + self.settle_timeout, backoff(0.01, 0.5, jitter=0.0)
        while True:
            try:
                async with self.turn():
                    return await super().execute_command(*args, **kwargs)
            except _UNSETTLED as exc:
                delay = next(delays)
                if time.monotonic() + delay > deadline:
                    raise TimeoutError(
                        f"Redis Cluster still unsettled after {self.settle_timeout:g}s "
                        f"({type(exc).__name__}: {exc})"
                    ) from exc
                await asyncio.sleep(delay)

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for one of the `max_connections` turns (a task holding one already keeps it);
        an unreachable cluster inside is raised as a `ConnectionError`."""
        if _HOLDING.get():
            yield
            return
        async with self.in_flight:
            token = _HOLDING.set(True)
            try:
                yield
            except RedisClusterException as exc:
                if isinstance(exc.__cause__, (ConnectionError, TimeoutError, OSError)):
                    raise ConnectionError(str(exc)) from exc
                raise
            finally:
                _HOLDING.reset(token)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        """A non-transactional pipeline that counts as one command against `max_connections`."""
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # raises, as redis-py documents
        return _BoundedPipeline(self, transaction)


class _BoundedPipeline(ClusterPipeline):
    """`ClusterPipeline` whose execution waits for its client's connection limit."""

    cluster_client: ClusterClient

    def __init__(self, client: ClusterClient, transaction: bool | None = None) -> None:
        super().__init__(client, transaction)
        # redis-py declares this on every command class and leaves it unset on a cluster pipeline
        self._event_dispatcher = client._event_dispatcher

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        """Send the queued commands (grouped by node, redirections followed)."""
        async with self.cluster_client.turn():
            return await super().execute(raise_on_error, allow_redirections)


def cluster_client(url: str, max_connections: int, **kwargs: Any) -> ClusterClient:
    """A `ClusterClient` for a ``redis+cluster://``/``rediss+cluster://`` URL, at most
    `max_connections` connections per node."""
    plain, nodes = parse_cluster_url(url)
    startup = [ClusterNode(host, port) for host, port in nodes]
    client = ClusterClient.from_url(plain, startup_nodes=startup, max_connections=max_connections, **kwargs)
    assert isinstance(client, ClusterClient)  # redis-py annotates `from_url` as making a RedisCluster
    return client


__all__ = [
    "CLUSTER_SCHEMES",
    "SETTLE_TIMEOUT",
    "ClusterClient",
    "cluster_client",
    "is_cluster_url",
    "parse_cluster_url",
]
