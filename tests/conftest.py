"""Shared test fixtures: Kafka-protocol broker and Redis for integration tests.

Each service is chosen independently, in this order:

1. an external service whose URL is in the environment
   (``STREAM_RATER_TEST_BROKER`` — ``kafka://host:port`` or ``host:port`` —
   ``STREAM_RATER_TEST_REDIS_URL`` and ``STREAM_RATER_TEST_POSTGRES_URL``, a server on which
   each test creates and drops its own database);
2. for the broker, ``STREAM_RATER_TEST_KAFKA=tansu|apache-kafka``: that local broker;
3. a testcontainers container when a Docker engine answers a ping;
4. a local child process via :class:`stream_rater.local.runtime.LocalRuntime`
   (Tansu with memory storage, ``redis-server`` without persistence), and
   :class:`stream_rater.local.postgres.LocalPostgres` (PostgreSQL, data in a temp dir).

A module marked ``apache_kafka`` (``pytestmark = [..., pytest.mark.apache_kafka]``) runs its
broker tests twice, ids ``[default]`` and ``[apache-kafka]``: on the broker above and on a local
one-node Apache Kafka (`stream_rater.local.apache_kafka`; needs java and mvn) — once only when
that is already the session's broker or an external broker is given. ``apache_kafka(only=True)``
runs them on Apache Kafka alone.

Services are session-scoped and started lazily (a Redis-only test never starts a broker).
Tests never share state: they take unique topic names from ``topic_factory`` and unique
ladder/key/group names from ``unique_name``. Tests using a service fixture are marked
``integration`` automatically.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import cast
from urllib.parse import urlparse

import pytest
import redis
from hypothesis import settings

from stream_rater.kafka import bootstrap_servers, create_topics
from stream_rater.local.apache_kafka import JavaToolMissing
from stream_rater.local.runtime import BROKERS, BrokerKind, LocalExtraMissing, LocalRuntime

# Property tests judge results, never speed: on a loaded CI machine a first example that
# builds caches can take longer than hypothesis's 200 ms default deadline.
settings.register_profile("stream_rater", deadline=None)
settings.load_profile("stream_rater")

BROKER_ENV = "STREAM_RATER_TEST_BROKER"
KAFKA_ENV = "STREAM_RATER_TEST_KAFKA"
REDIS_ENV = "STREAM_RATER_TEST_REDIS_URL"
POSTGRES_ENV = "STREAM_RATER_TEST_POSTGRES_URL"
APACHE_KAFKA_MARK = "apache_kafka"
SERVICE_FIXTURES = frozenset(
    {
        "broker_url",
        "kafka_bootstrap",
        "tansu_bootstrap",
        "redis_url",
        "redis_client",
        "topic_factory",
        "postgres_url",
        "archive_url",
    }
)


def docker_reachable(timeout: float = 0.5) -> bool:
    """Whether a Docker engine answers ``GET /_ping`` (``DOCKER_HOST`` or the default socket)."""
    docker_host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    url = urlparse(docker_host)
    try:
        if url.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(url.path)
        elif url.scheme == "tcp" and url.hostname:
            sock = socket.create_connection((url.hostname, url.port or 2375), timeout=timeout)
        else:
            return False
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            status_line = sock.recv(64).split(b"\r\n", 1)[0]
        return status_line.startswith(b"HTTP/1.") and b" 200 " in status_line
    except OSError:
        return False


def session_kafka() -> BrokerKind | None:
    """The local broker ``STREAM_RATER_TEST_KAFKA`` asks for, or None (the usual choice)."""
    value = os.environ.get(KAFKA_ENV) or None
    if value is not None and value not in BROKERS:
        raise pytest.UsageError(f"{KAFKA_ENV}={value!r}: expected one of {', '.join(BROKERS)}")
    return cast("BrokerKind | None", value)


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``apache_kafka`` module marker (see the module docstring)."""
    config.addinivalue_line(
        "markers", f"{APACHE_KAFKA_MARK}: broker tests also run on a local Apache Kafka ([apache-kafka])"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """In a module marked ``apache_kafka``, run each test that uses the broker on the session's
    broker and on Apache Kafka (an indirect, session-scoped ``kafka_kind`` parameter); with
    ``apache_kafka(only=True)`` on Apache Kafka alone."""
    mark = metafunc.definition.get_closest_marker(APACHE_KAFKA_MARK)
    if (
        "kafka_bootstrap" in metafunc.fixturenames
        and mark is not None
        and not os.environ.get(BROKER_ENV)
        and session_kafka() != "apache-kafka"
    ):
        kinds = ["apache-kafka"] if mark.kwargs.get("only") else [None, "apache-kafka"]
        metafunc.parametrize(
            "kafka_kind",
            kinds,
            indirect=True,
            scope="session",
            ids=["apache-kafka" if kind else "default" for kind in kinds],
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a service fixture as ``integration``."""
    for item in items:
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def _docker() -> bool:
    """Whether testcontainers can be used in this session."""
    return docker_reachable()


@pytest.fixture(scope="session")
def _stack() -> Iterator[ExitStack]:
    """Owns the session's containers and local processes; closes them at session end."""
    with ExitStack() as stack:
        yield stack


def _local(stack: ExitStack, *, broker: bool | BrokerKind, redis: bool) -> LocalRuntime:
    """Start a LocalRuntime with only the given services, or skip if the extra (or, for Apache
    Kafka, java or mvn) is missing."""
    try:
        return stack.enter_context(LocalRuntime(broker=broker, redis=redis))
    except (LocalExtraMissing, JavaToolMissing) as exc:
        chosen = f"{KAFKA_ENV} or the {APACHE_KAFKA_MARK} marker" if broker == "apache-kafka" else "no Docker"
        pytest.skip(f"no {BROKER_ENV}/{REDIS_ENV}, {chosen}, and {exc}")


@pytest.fixture(scope="session")
def _brokers() -> dict[str, str]:
    """The brokers started in this session (``docker``, ``tansu``, ``apache-kafka``): their
    bootstrap servers. Each starts once, however often ``kafka_bootstrap`` is set up again for
    another ``kafka_kind``."""
    return {}


@pytest.fixture(scope="session")
def kafka_kind(request: pytest.FixtureRequest) -> BrokerKind | None:
    """The local broker a test runs on: its ``[apache-kafka]`` parameter, else
    ``STREAM_RATER_TEST_KAFKA``, else None (external, Docker or Tansu, in that order)."""
    return getattr(request, "param", None) or session_kafka()


@pytest.fixture(scope="session")
def apache_kafka_bootstrap(_stack: ExitStack, _brokers: dict[str, str]) -> str:
    """``127.0.0.1:port`` of a local one-node Apache Kafka, started on first use."""
    if "apache-kafka" not in _brokers:
        _brokers["apache-kafka"] = _local(_stack, broker="apache-kafka", redis=False).bootstrap_servers
    return _brokers["apache-kafka"]


@pytest.fixture(scope="session")
def apache_broker_url(apache_kafka_bootstrap: str) -> str:
    """The local Apache Kafka as a faust URL."""
    return f"kafka://{apache_kafka_bootstrap}"


@pytest.fixture(scope="session")
def kafka_bootstrap(
    kafka_kind: BrokerKind | None,
    _docker: bool,
    _stack: ExitStack,
    _brokers: dict[str, str],
    request: pytest.FixtureRequest,
) -> str:
    """``host:port[,host:port]`` of a Kafka-protocol broker (aiokafka ``bootstrap_servers``)."""
    external = os.environ.get(BROKER_ENV)
    if external:
        return bootstrap_servers(external)
    if kafka_kind == "apache-kafka":
        return str(request.getfixturevalue("apache_kafka_bootstrap"))
    if _docker and kafka_kind is None:
        if "docker" not in _brokers:
            try:
                from testcontainers.community.kafka import KafkaContainer
            except ImportError:  # testcontainers < 4.9
                from testcontainers.kafka import KafkaContainer
            container = _stack.enter_context(KafkaContainer().with_kraft())
            _brokers["docker"] = str(container.get_bootstrap_server())
        return _brokers["docker"]
    return str(request.getfixturevalue("tansu_bootstrap"))


@pytest.fixture(scope="session")
def tansu_bootstrap(_stack: ExitStack, _brokers: dict[str, str]) -> str:
    """``127.0.0.1:port`` of the session's Tansu (`dev`'s default broker), started on first use."""
    if "tansu" not in _brokers:
        _brokers["tansu"] = _local(_stack, broker="tansu", redis=False).bootstrap_servers
    return _brokers["tansu"]


@pytest.fixture(scope="session")
def broker_url(kafka_bootstrap: str) -> str:
    """The broker as a faust URL: ``kafka://host:port[;kafka://host:port]``."""
    return ";".join(f"kafka://{host}" for host in kafka_bootstrap.split(","))


@pytest.fixture(scope="session")
def redis_url(_docker: bool, _stack: ExitStack) -> str:
    """``redis://host:port/db`` of a Redis server."""
    external = os.environ.get(REDIS_ENV)
    if external:
        return external
    if _docker:
        try:
            from testcontainers.community.redis import RedisContainer
        except ImportError:  # testcontainers < 4.9
            from testcontainers.redis import RedisContainer
        container = _stack.enter_context(RedisContainer("redis:7"))
        host, port = container.get_container_host_ip(), container.get_exposed_port(container.port)
        return f"redis://{host}:{port}/0"
    return _local(_stack, broker=False, redis=True).redis_url


@pytest.fixture(scope="session")
def postgres_url(_stack: ExitStack) -> str:
    """``postgresql://…`` of a PostgreSQL server (``STREAM_RATER_TEST_POSTGRES_URL``, else a local
    one started once per session and stopped by PID)."""
    external = os.environ.get(POSTGRES_ENV)
    if external:
        return external
    from stream_rater.local.postgres import LocalPostgres
    from stream_rater.local.processes import LocalRuntimeError

    try:
        return _stack.enter_context(LocalPostgres()).url
    except LocalRuntimeError as exc:
        pytest.skip(f"no {POSTGRES_ENV} and {exc}")


def fresh_database(server_url: str, name: str) -> str:
    """Create database `name` on the server of `server_url`; its URL."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    return urlparse(server_url)._replace(path=f"/{name}").geturl()


def drop_database(server_url: str, name: str) -> None:
    """Drop database `name`, ending its sessions."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@pytest.fixture
def archive_url(postgres_url: str, unique_name: str) -> Iterator[str]:
    """A fresh, empty database of the test PostgreSQL for one test (dropped afterwards)."""
    name = unique_name.replace("-", "_")[:63]
    url = fresh_database(postgres_url, name)
    try:
        yield url
    finally:
        drop_database(postgres_url, name)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A name no other test uses (for ladders, key prefixes, consumer groups): ``t-<test>-<hex>``."""
    test = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    return f"t-{test}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic_factory(broker_url: str, unique_name: str) -> Callable[..., str]:
    """``make(partitions=1, suffix="")`` creates a fresh topic and returns its unique name."""
    counter = iter(range(1_000_000))

    def make(partitions: int = 1, suffix: str = "") -> str:
        name = f"{unique_name}-{next(counter)}{'-' + suffix if suffix else ''}"
        asyncio.run(create_topics(broker_url, {name: partitions}))
        return name

    return make


@pytest.fixture
def redis_client(redis_url: str, unique_name: str) -> Iterator[redis.Redis]:
    """A client of the test Redis; afterwards deletes every key containing ``unique_name``."""
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        stale = list(client.scan_iter(match=f"*{unique_name}*", count=1000))
        if stale:
            client.unlink(*stale)
        client.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """An empty selection is an error, never a silent "no tests ran" (pytest's exit 5): a
    usage error (4) instead. Decided at the end, where the xdist controller sees every
    worker's selection."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("\nno tests were collected: check the paths and -k/-m expressions", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Under ``CI=true`` a skipped test is a failure: CI installs and starts everything the
    suite needs (broker, Redis, Chromium), so a skip there means a test that matters did not run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which must run every test: {reason}"
