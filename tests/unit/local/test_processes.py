"""`free_port`: ports for local servers, out of the way of the kernel's ephemeral ports."""

import socket

from stream_rater.local.processes import HOST, LISTEN_PORTS_FROM, free_port


def _ephemeral_range() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as lines:
        low, high = lines.read().split()
    return int(low), int(high)


def test_free_ports_lie_below_the_ephemeral_range_and_can_be_listened_on():
    """The local end of a client's connection (an ephemeral port) never takes a port picked
    for a server between its pick and its bind: every pick is below that range, and free."""
    low, _ = _ephemeral_range()
    ports = {free_port() for _ in range(50)}
    assert all(LISTEN_PORTS_FROM <= port < low for port in ports)
    assert len(ports) > 40  # picked at random, not the same few
    for port in list(ports)[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, port))
            sock.listen()
