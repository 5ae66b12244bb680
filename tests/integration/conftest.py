"""A Redis Cluster for the integration tests: ``STREAM_RATER_TEST_REDIS_CLUSTER_URL`` if set
(``redis+cluster://host:port[,host:port…]``), else three local masters started once per
session by `LocalRuntime` (``redis-server --cluster-enabled yes`` + ``redis-cli --cluster
create``) and stopped by PID at the end; and a fresh local cluster with replicas per test that
kills nodes (`redis_cluster_with_replicas`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from stream_rater.local.runtime import ClusterLayout, LocalExtraMissing, LocalRuntime

REDIS_CLUSTER_ENV = "STREAM_RATER_TEST_REDIS_CLUSTER_URL"


@pytest.fixture(scope="session")
def redis_cluster_url(_stack: ExitStack) -> str:
    """``redis+cluster://host:port,…`` of a Redis Cluster of three masters."""
    external = os.environ.get(REDIS_CLUSTER_ENV)
    if external:
        return external
    try:
        return _stack.enter_context(LocalRuntime(broker=False, redis=ClusterLayout(3))).redis_url
    except LocalExtraMissing as exc:
        pytest.skip(f"no {REDIS_CLUSTER_ENV} and {exc}")


@pytest.fixture
def redis_cluster_with_replicas() -> Iterator[LocalRuntime]:
    """A fresh local Redis Cluster of three masters with one replica each, for a test that
    kills and stops nodes (by PID, see `LocalRuntime.pids`); its nodes are stopped by PID
    afterwards. Always local: a test must not kill an external cluster's nodes."""
    try:
        runtime = LocalRuntime(broker=False, redis=ClusterLayout(3, replicas=1)).start()
    except LocalExtraMissing as exc:
        pytest.skip(f"a cluster with replicas is started locally, and {exc}")
    try:
        yield runtime
    finally:
        runtime.stop()
