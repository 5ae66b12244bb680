"""`LocalRuntime`'s fixed ports: `dev` listens where the README's tutorial says, or says why not."""

import socket

import pytest

from stream_rater.local.processes import HOST, LocalRuntimeError
from stream_rater.local.runtime import fixed_or_free, free_port


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
