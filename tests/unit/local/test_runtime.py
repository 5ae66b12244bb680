"""`LocalRuntime`: `dev` listens where the README's tutorial says, or says why not; a worker's fetch wait per broker."""

import socket

import pytest

from stream_rater.config.settings import Settings
from stream_rater.local.processes import HOST, LocalRuntimeError
from stream_rater.local.runtime import TANSU_FETCH_MAX_WAIT, LocalRuntime, fixed_or_free, free_port


def test_a_fixed_port_is_used_when_free_and_named_when_taken():
    """`fixed_or_free(P)` picks P while it is free and raises naming P once something listens
    on it; `fixed_or_free(0)` picks a free port each time."""
    port = free_port()
    assert fixed_or_free(port)() == port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, port))
        sock.listen()
        with pytest.raises(LocalRuntimeError, match=f"port {port} on {HOST} is taken"):
            fixed_or_free(port)()
        assert fixed_or_free(0)() != port


def test_a_worker_on_tansu_gets_a_short_fetch_wait_and_on_apache_kafka_the_one_it_asks():
    """Tansu holds a fetch for its whole wait: a worker on it waits at most
    `TANSU_FETCH_MAX_WAIT`; Apache Kafka answers on arrival, so the wait asked for stands."""
    tansu, kafka = LocalRuntime(broker="tansu"), LocalRuntime(broker="apache-kafka")
    assert tansu.fetch_max_wait() == TANSU_FETCH_MAX_WAIT == 0.01
    assert tansu.fetch_max_wait(0.002) == 0.002
    assert kafka.fetch_max_wait() == Settings.fetch_max_wait == 0.5
    assert kafka.fetch_max_wait(0.2) == 0.2
