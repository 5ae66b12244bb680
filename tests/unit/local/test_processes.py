"""`free_port`: ports for local servers, out of the way of the kernel's ephemeral ports;
`popen_tied`: children that die with the command, from any of its threads."""

import os
import signal
import socket
import subprocess
import sys

import pytest

from stream_rater.local.processes import HOST, LISTEN_PORTS_FROM, free_port, run_tied
from tests.helpers import gone, wait_for


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


#: Starts a tied child from a thread that then ends, and prints the child's PID if it outlived
#: that thread (by 2 s); then exits, leaving the child running.
_PARENT = """
import subprocess, sys, threading
from stream_rater.local.processes import popen_tied
started = []
sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
thread = threading.Thread(target=lambda: started.append(popen_tied(sleeper)))
thread.start()
thread.join()
try:
    started[0].wait(timeout=2)
    print("the child died with the thread that started it")
except subprocess.TimeoutExpired:
    print(started[0].pid)
"""


def test_a_child_tied_from_a_passing_thread_outlives_the_thread_and_dies_with_its_process():
    """`bench chaos` restarts workers from its fault threads: such a child must not die when
    its thread ends (the kernel ties it to the thread that forks it), but must when the
    command does."""
    said = subprocess.run(
        [sys.executable, "-c", _PARENT], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    assert said.isdigit(), said
    pid = int(said)
    try:
        wait_for(lambda: gone(pid), "the child to die with its parent", timeout=10)
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_tied_run_returns_what_the_child_printed_and_kills_it_on_its_timeout():
    done = run_tied([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], 30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "out\n", "err\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_tied([sys.executable, "-c", "import time; time.sleep(120)"], 0.5)
