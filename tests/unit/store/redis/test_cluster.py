"""``redis+cluster://`` and ``rediss+cluster://`` store URLs (no server needed: the cluster
client connects lazily)."""

from __future__ import annotations

import pytest
import redis.exceptions
from redis.asyncio.connection import SSLConnection

from stream_rater.config.settings import Settings
from stream_rater.store import RedisTimeouts, open_store
from stream_rater.store.redis import RedisStore
from stream_rater.store.redis.cluster import ClusterClient, is_cluster_url, parse_cluster_url


def test_a_cluster_url_names_every_startup_node_and_keeps_credentials_and_options():
    plain, nodes = parse_cluster_url(
        "rediss+cluster://u:p%40ss@10.0.0.1:7000,[::1]:7001,redis-2:7002/0?ssl_ca_certs=/ca.pem"
    )
    assert plain == "rediss://u:p%40ss@10.0.0.1:7000?ssl_ca_certs=/ca.pem"
    assert nodes == [("10.0.0.1", 7000), ("::1", 7001), ("redis-2", 7002)]
    assert is_cluster_url("redis+cluster://h:1") and not is_cluster_url("redis://h:1/0")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+cluster://", "names no node"),
        ("redis+cluster://host", "is not host:port"),
        ("redis+cluster://h:1/2", "database 0 only"),
        ("redis://h:1", "not a Redis Cluster URL"),
    ],
)
def test_a_bad_cluster_url_says_what_is_wrong(url: str, says: str):
    with pytest.raises(ValueError, match=says):
        parse_cluster_url(url)


async def test_open_store_gives_a_cluster_client_with_tls_for_rediss_cluster():
    store = open_store("rediss+cluster://:secret@127.0.0.1:7000,127.0.0.1:7001?ssl_check_hostname=false")
    assert isinstance(store, RedisStore) and isinstance(store.client, ClusterClient)
    nodes = {node.name: node for node in store.client.nodes_manager.startup_nodes.values()}
    assert set(nodes) == {"127.0.0.1:7000", "127.0.0.1:7001"}
    assert store.client.get_connection_kwargs()["password"] == "secret"
    assert all(node.connection_class is SSLConnection for node in nodes.values())
    await store.close()


def test_open_store_names_the_cluster_scheme_for_an_unknown_url():
    with pytest.raises(ValueError, match=r"redis\+cluster://"):
        open_store("cluster://h:1")


async def test_an_unreachable_cluster_is_a_transient_connection_error():
    """No node answering is a redis ConnectionError (the worker retries it, never dead-letters
    the batch; the CLI says "Redis: …"), and ping() is False."""
    store = open_store("redis+cluster://127.0.0.1:1")
    with pytest.raises(redis.exceptions.ConnectionError, match="cannot be connected"):
        await store.read("ladder", ["a"], [], ["m1"])
    assert not await store.ping()
    await store.close()


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "redis+cluster://127.0.0.1:1,127.0.0.1:2"])
async def test_every_store_client_waits_as_long_as_its_timeouts_say(url: str):
    """The store factory hands the configured timeouts, health checks and TCP keepalive to the
    client of a single Redis and of a Redis Cluster alike (a partition then ends in an error)."""
    store = open_store(url, timeouts=RedisTimeouts(socket=3.0, connect=2.0, health_check=7.0))
    assert isinstance(store, RedisStore)
    client = store.client
    options = (
        client.get_connection_kwargs()
        if isinstance(client, ClusterClient)
        else client.connection_pool.connection_kwargs
    )
    assert {k: options[k] for k in ("socket_timeout", "socket_connect_timeout", "health_check_interval")} == {
        "socket_timeout": 3.0,
        "socket_connect_timeout": 2.0,
        "health_check_interval": 7.0,
    }
    assert options["socket_keepalive"] is True
    await store.close()


def test_the_default_timeouts_are_the_settings_defaults():
    """A tool that opens a store without settings waits as a worker with default settings."""
    assert RedisTimeouts() == RedisTimeouts.of(Settings()) == RedisTimeouts(10.0, 5.0, 10.0)
