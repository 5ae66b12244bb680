"""A real Apache Kafka (KRaft) on loopback: one node, or a cluster of N nodes, each a combined
broker and controller, as child processes of `LocalRuntime` (``broker="apache-kafka"``).

Tansu speaks the Kafka protocol but is not Kafka; this runs the broker that production runs, to
prove the worker against real replication, ISR and group-coordinator behaviour. It needs
``java`` (17+) and ``mvn`` on PATH: the broker's jars are resolved from Maven Central once
(`kafka_libs`, in `stream_rater.local.kafka_jars`) into ``$STREAM_RATER_KAFKA_CACHE`` (default ``~/.cache/stream_rater``), as
``kafka-<version>/libs``; ``STREAM_RATER_KAFKA_HOME`` may instead name an unpacked Kafka
distribution (its ``libs/`` is used as is, nothing is resolved).

Each node's log dir is formatted with Kafka's storage tool and kept in the runtime's work dir,
so a node that was killed can be started again from its log (`ApacheKafkaCluster.restart`).
Replication is ``min(3, N)``, ``min.insync.replicas`` one less (at least 1), also for the
offsets and transaction topics. Deliberate departures from Kafka's defaults, for one machine
and the test suite: small heaps, ``group.initial.rebalance.delay.ms=0``, 10 offsets-topic
partitions instead of 50, and ``group.min.session.timeout.ms=1000`` (Kafka's 6000 would
refuse the 3 s session timeout that ``dev`` and the tests give the worker).

With a `SaslSslListener` each node also has a SASL_SSL client listener (SCRAM-SHA-512 over TLS,
`ApacheKafkaCluster.sasl_ssl_bootstrap_servers`): its users' SCRAM credentials are written into
the log dir by the storage tool at format time, its key and certificate chain are a PEM
keystore. Inter-broker and controller traffic, and the PLAINTEXT listener, stay as they are.
"""

from __future__ import annotations

import base64
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from stream_rater.local.class_archive import JIT_OPTIONS, WRITE_SECONDS, ClassArchive
from stream_rater.local.kafka_jars import (
    KAFKA_CACHE_ENV,
    KAFKA_HOME_ENV,
    KAFKA_VERSION,
    JavaToolMissing,
    apache_kafka_missing,
    java_binary,
    kafka_libs,
)
from stream_rater.local.processes import (
    HOST,
    Child,
    LocalRuntimeError,
    free_port,
    spawn,
    stop_children,
    wait_for_port,
    wait_kafka_metadata,
)

__all__ = [
    "KAFKA_CACHE_ENV",
    "KAFKA_HOME_ENV",
    "KAFKA_VERSION",
    "SASL_MECHANISM",
    "ApacheKafkaCluster",
    "JavaToolMissing",
    "SaslSslListener",
    "apache_kafka_missing",
    "java_binary",
    "kafka_libs",
]

#: A broker's heap: fixed, as Kafka's own start script sets it (min = max). A heap left to grow
#: from a small start ran a G1 concurrent cycle (about 1 CPU-second) whenever a burst of
#: produce requests grew it, which took a core from whatever shared the machine.
HEAP_OPTIONS = ("-Xms384m", "-Xmx384m")
#: The SASL mechanism of the SASL_SSL listener.
SASL_MECHANISM = "SCRAM-SHA-512"
#: What a SCRAM user name or password may hold here: the storage tool's ``--add-scram`` syntax
#: (``[name=…,password=…]``) has no escaping.
_SCRAM_TOKEN = re.compile(r"[A-Za-z0-9._~@+-]+")

_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


@dataclass(frozen=True)
class SaslSslListener:
    """A SASL_SSL client listener: SCRAM-SHA-512 (`SASL_MECHANISM`) over TLS.

    ``users`` maps each SCRAM user name to its password; ``private_key_pem`` is the brokers'
    TLS key in PKCS#8 PEM (``BEGIN PRIVATE KEY``, unencrypted: Kafka reads no other PEM key
    form) and ``certificate_chain_pem`` their certificate, valid for 127.0.0.1, followed by
    any intermediate CAs.
    """

    users: Mapping[str, str]
    private_key_pem: str
    certificate_chain_pem: str

    def __post_init__(self) -> None:
        """Refuse no users, a user name or password the storage tool cannot take, or a key
        that is not PKCS#8."""
        if not self.users:
            raise ValueError("a SASL_SSL listener needs at least one user")
        for token in (*self.users, *self.users.values()):
            if not _SCRAM_TOKEN.fullmatch(token):
                raise ValueError(f"SCRAM user names and passwords must match {_SCRAM_TOKEN.pattern}")
        if "-----BEGIN PRIVATE KEY-----" not in self.private_key_pem:
            raise ValueError("the SASL_SSL listener's key must be an unencrypted PKCS#8 PEM key")


def _cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes, URL-safe base64 without padding (Kafka's ``Uuid``).
    Like Kafka's ``Uuid.randomUuid``, never one starting with ``-``: the storage tool would
    read it as an option (one id in 64 did, and formatting failed)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass
class _Node:
    """One KRaft node (broker and controller): its id, ports, directory and process."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    sasl_ssl_port: int | None = None
    child: Child | None = None
    #: Where its JVM writes the class-data-sharing archive at exit (`ClassArchive.options`).
    writes_archive: Path | None = None

    @property
    def name(self) -> str:
        """Its name in `LocalRuntime.pids` and its log file's stem."""
        return f"kafka-{self.node_id}"

    @property
    def properties(self) -> Path:
        """Its ``server.properties``."""
        return self.directory / "server.properties"


class ApacheKafkaCluster:
    """``brokers`` Apache Kafka KRaft nodes on loopback, their logs under ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        brokers: int = 1,
        *,
        startup_timeout: float = 120.0,
        stop_timeout: float = 10.0,
        port_attempts: int = 3,
        version: str = KAFKA_VERSION,
        sasl_ssl: SaslSslListener | None = None,
        extra_listeners: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    ) -> None:
        """Configure (not start) the cluster; `start` resolves the jars if needed. With
        ``sasl_ssl`` every node also listens for SASL_SSL clients. ``extra_listeners`` maps a
        listener name to, per node, the port it listens on and the port it advertises (a
        proxy's, so that a client bootstrapping there reaches every node through proxies)."""
        if brokers < 1:
            raise ValueError(f"an Apache Kafka cluster needs at least 1 broker, not {brokers}")
        self.workdir = workdir
        self.brokers = brokers
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.port_attempts = port_attempts
        self.version = version
        self.sasl_ssl = sasl_ssl
        self.extra_listeners = {name: list(ports) for name, ports in (extra_listeners or {}).items()}
        self.replication_factor = min(3, brokers)
        self.min_insync_replicas = max(1, self.replication_factor - 1)
        self._nodes: list[_Node] = []
        self._java = ""
        self._libs = Path()
        self._archive: ClassArchive | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ApacheKafkaCluster:
        """Format and start every node and wait until the metadata lists all brokers; a node
        that dies at startup (a port taken meanwhile) restarts the cluster on new ports."""
        self._java = java_binary()
        self._libs = kafka_libs(self.version)
        self._archive = ClassArchive(self._java, self._libs)
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        attempt = 0
        while True:
            attempt += 1
            self._nodes = self._configure(attempt)
            self._format()
            for node in self._nodes:
                node.child = spawn(node.name, self._server_argv(node), self.workdir, node.port)
            try:
                self._wait_ready()
                return self
            except (LocalRuntimeError, OSError) as exc:  # TimeoutError is an OSError
                dead = [c for c in self.children if not c.alive()]
                self.stop()
                if attempt >= self.port_attempts or isinstance(exc, TimeoutError):
                    child = (dead or self.children)[0]
                    raise LocalRuntimeError(
                        f"Apache Kafka failed to start ({exc}); log tail ({child.log_path}):\n{child.log_tail()}"
                    ) from exc

    def stop(self) -> None:
        """Stop every node at once (SIGTERM, wait, SIGKILL); the logs stay in ``workdir``."""
        stop_children((n.child for n in self._nodes), self._stop_timeout(self._nodes))
        self._keep_archives(self._nodes)

    def restart(self, *indices: int) -> None:
        """Start the nodes ``indices`` again from their on-disk logs, on their ports, and wait
        until the metadata lists every broker (all of them at once: a quorum of controllers
        needs more than one). A node still running (or SIGSTOPped) is stopped first."""
        for index in indices:
            node = self._nodes[index]
            if node.child is not None:
                if node.child.alive():
                    node.child.process.send_signal(signal.SIGCONT)
                node.child.stop(self._stop_timeout([node]))
                self._keep_archives([node])
            node.child = spawn(node.name, self._server_argv(node), self.workdir, node.port)
        self._wait_ready()

    # -- addresses -------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:P0,127.0.0.1:P1,…``: every node's client listener."""
        return ",".join(f"{HOST}:{node.port}" for node in self._nodes)

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """``127.0.0.1:S0,127.0.0.1:S1,…``: every node's SASL_SSL listener (see `SaslSslListener`)."""
        if self.sasl_ssl is None:
            raise LocalRuntimeError("this Apache Kafka has no SASL_SSL listener (give sasl_ssl=)")
        return ",".join(f"{HOST}:{node.sasl_ssl_port}" for node in self._nodes)

    @property
    def children(self) -> list[Child]:
        """Every node's current process, by node id."""
        return [node.child for node in self._nodes if node.child is not None]

    # -- internals -------------------------------------------------------------------------

    def _configure(self, attempt: int) -> list[_Node]:
        """Fresh node directories with ``server.properties`` on newly picked free ports."""
        ports = [(free_port(), free_port()) for _ in range(self.brokers)]
        voters = ",".join(f"{i}@{HOST}:{controller}" for i, (_, controller) in enumerate(ports))
        security = self._sasl_ssl_settings()
        nodes = []
        for node_id, (port, controller) in enumerate(ports):
            node = _Node(node_id, port, controller, self.workdir / f"kafka-{node_id}-{attempt}")
            node.directory.mkdir(parents=True)
            listeners = {"PLAINTEXT": port, "CONTROLLER": controller}
            if self.sasl_ssl is not None:
                node.sasl_ssl_port = listeners["SASL_SSL"] = free_port()
            advertised = {name: p for name, p in listeners.items() if name != "CONTROLLER"}
            for name, ports in self.extra_listeners.items():
                listeners[name], advertised[name] = ports[node_id]
            settings = {
                "process.roles": "broker,controller",
                "node.id": node_id,
                "controller.quorum.voters": voters,
                "listeners": ",".join(f"{name}://{HOST}:{p}" for name, p in listeners.items()),
                "advertised.listeners": ",".join(f"{name}://{HOST}:{p}" for name, p in advertised.items()),
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": ",".join(
                    f"{name}:{'SASL_SSL' if name == 'SASL_SSL' else 'PLAINTEXT'}" for name in listeners
                ),
                **security,
                "log.dirs": node.directory / "data",
                "num.partitions": 1,
                "default.replication.factor": self.replication_factor,
                "min.insync.replicas": self.min_insync_replicas,
                "offsets.topic.replication.factor": self.replication_factor,
                "offsets.topic.num.partitions": 10,
                "transaction.state.log.replication.factor": self.replication_factor,
                "transaction.state.log.min.isr": self.min_insync_replicas,
                "share.coordinator.state.topic.replication.factor": self.replication_factor,
                "share.coordinator.state.topic.min.isr": self.min_insync_replicas,
                "group.initial.rebalance.delay.ms": 0,
                "group.min.session.timeout.ms": 1000,
                "num.network.threads": 2,
                "num.io.threads": 4,
                "num.recovery.threads.per.data.dir": 1,
            }
            node.properties.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
            nodes.append(node)
        return nodes

    def _sasl_ssl_settings(self) -> dict[str, str]:
        """The SASL_SSL listener's settings (none without one); writes its PEM keystore."""
        if self.sasl_ssl is None:
            return {}
        keystore = self.workdir / "sasl-ssl-keystore.pem"
        keystore.write_text(
            f"{self.sasl_ssl.private_key_pem.strip()}\n{self.sasl_ssl.certificate_chain_pem.strip()}\n"
        )
        keystore.chmod(0o600)
        prefix = f"listener.name.sasl_ssl.{SASL_MECHANISM.lower()}"
        return {
            "sasl.enabled.mechanisms": SASL_MECHANISM,
            f"{prefix}.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
        }

    def _jvm(self, *options: str) -> list[str]:
        """``java`` with the jars on the class path and the log4j 2 configuration."""
        return [
            self._java,
            *options,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            f"{self._libs}/*",
        ]

    def _format(self) -> None:
        """Format every node's log dir with Kafka's storage tool (in parallel: a JVM each), with
        the SASL_SSL listener's SCRAM credentials if it has one."""
        cluster_id = _cluster_id()
        users = self.sasl_ssl.users.items() if self.sasl_ssl is not None else ()
        scram = [
            arg
            for name, password in users
            for arg in ("--add-scram", f"{SASL_MECHANISM}=[name={name},password={password}]")
        ]

        archive = self._archive.mapped() if self._archive is not None else []

        def format_node(node: _Node) -> None:
            argv = [
                *self._jvm("-Xmx256m", *JIT_OPTIONS, *archive),
                "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(node.properties),
                *scram,
            ]  # fmt: skip
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=self.startup_timeout,
                )
            except subprocess.TimeoutExpired as exc:
                raise LocalRuntimeError(f"formatting {node.name} took over {self.startup_timeout}s") from exc
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
                raise LocalRuntimeError(f"formatting {node.name} failed ({done.returncode}):\n{tail}")

        with ThreadPoolExecutor(max_workers=len(self._nodes)) as pool:
            list(pool.map(format_node, self._nodes))

    def _server_argv(self, node: _Node) -> list[str]:
        """The node's JVM command line, mapping the class archive (or writing it at exit)."""
        assert self._archive is not None
        archive, node.writes_archive = self._archive.options(self.workdir)
        options = (*HEAP_OPTIONS, *JIT_OPTIONS, *archive, "-XX:+ExitOnOutOfMemoryError")
        return [*self._jvm(*options), "kafka.Kafka", str(node.properties)]

    def _stop_timeout(self, nodes: Sequence[_Node]) -> float:
        """``stop_timeout``, longer by `WRITE_SECONDS` where a node writes the class archive."""
        writing = any(node.writes_archive is not None for node in nodes)
        return self.stop_timeout + (WRITE_SECONDS if writing else 0.0)

    def _keep_archives(self, nodes: Sequence[_Node]) -> None:
        """Keep the class archive a stopped node's JVM wrote at its exit (`ClassArchive.keep`)."""
        for node in nodes:
            if node.writes_archive is not None and node.child is not None and not node.child.alive():
                assert self._archive is not None
                self._archive.keep(node.writes_archive, node.child.process.returncode)
                node.writes_archive = None

    def _wait_ready(self) -> None:
        """Wait until every node listens (on every client listener) and the metadata lists all
        brokers."""
        deadline = time.monotonic() + self.startup_timeout
        children = self.children
        for node in self._nodes:
            child = node.child
            assert child is not None
            for port in (node.port, node.sasl_ssl_port):
                if port is not None:
                    wait_for_port(HOST, port, max(0.0, deadline - time.monotonic()), alive=child.alive)
        wait_kafka_metadata(
            self.bootstrap_servers,
            deadline - time.monotonic(),
            brokers=self.brokers,
            alive=lambda: all(child.alive() for child in children),
        )
