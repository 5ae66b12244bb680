"""What a `LocalRuntime` is asked for beside its topics: which broker (`BROKERS`), a Redis
Cluster instead of a single Redis, where its services listen, and how it starts and stops them.
Light to import: the command line's flags read `BROKERS` without loading the runtime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

#: The brokers a `LocalRuntime` can start: Tansu (memory storage) or a real Apache Kafka.
BrokerKind = Literal["tansu", "apache-kafka"]
BROKERS: tuple[BrokerKind, ...] = ("tansu", "apache-kafka")


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """The layout of a Redis Cluster: `masters` nodes (at least 3), each with `replicas` replicas."""

    masters: int = 3
    replicas: int = 0

    def __post_init__(self) -> None:
        if self.masters < 3:
            raise ValueError(f"a Redis Cluster needs at least 3 masters, not {self.masters}")


@dataclass(frozen=True, slots=True)
class Addresses:
    """Where the services listen: `kafka_port` (Tansu's) and `redis_port` (a single Redis's)
    fixed, so that `dev` is where a tutorial says (0: a free port; a fixed port that is taken
    is an error, not retried), and `kafka_listeners`, Apache Kafka's extra listeners
    (`ApacheKafkaCluster`)."""

    kafka_port: int = 0
    redis_port: int = 0
    kafka_listeners: Mapping[str, Sequence[tuple[int, int]]] | None = None


@dataclass(frozen=True, slots=True)
class Supervision:
    """How the runtime starts and stops its children: `startup_timeout` per service (None:
    30 s, 120 s for Apache Kafka), `stop_timeout` before a child is killed, and
    `port_attempts`: a child that dies at startup (e.g. its free port was taken meanwhile) is
    retried on a new port up to that many times."""

    startup_timeout: float | None = None
    stop_timeout: float = 10.0
    port_attempts: int = 3


#: Free ports and no extra listeners.
FREE_PORTS = Addresses()
#: The timeouts and port attempts a runtime uses unless told otherwise.
DEFAULT_SUPERVISION = Supervision()
