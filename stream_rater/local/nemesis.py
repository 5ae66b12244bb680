"""What a nemesis needs of the local runtime beyond `LocalRuntime`: a TCP proxy that can be cut
as a network partition cuts a link, a set of them between each worker and the brokers, and a
Redis server that can be frozen, made to refuse writes, and killed and restarted from its
append-only file on the same port.

Used by ``stream-rater bench chaos`` (`stream_rater.bench.chaos`) and the fault tests.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import redis

from stream_rater.local.processes import HOST, Child, LocalRuntimeError, free_port, spawn, wait_for_port
from stream_rater.local.runtime import redis_server_binary
from stream_rater.store.redis.keys import REDIS_HASH_LIMITS


class TcpProxy:
    """A TCP proxy on a free loopback port to ``127.0.0.1:target`` that can be `cut` as a
    network partition does: no socket is closed or reset, nothing arrives — the bytes sent
    meanwhile are held, as TCP holds unacknowledged data, and go on after `heal` (to a peer
    that may have given up by then). A connection the target refuses is closed at once (the
    target restarting), and the proxy goes on accepting. Threads, stopped by `close`."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server((HOST, 0))
        self.port: int = self.listener.getsockname()[1]
        self.url = f"redis://{HOST}:{self.port}/0"
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = False
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Stop forwarding in both directions; every connection stays open."""
        self.flowing.clear()

    def heal(self) -> None:
        """Forward again, the held bytes first."""
        self.flowing.set()

    def close(self) -> None:
        """Stop listening and close every connection."""
        self.closed = True
        self.flowing.set()
        for sock in [self.listener, *self.sockets]:
            _hang_up(sock)

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((HOST, self.target), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _hang_up(client)
                continue
            self.sockets = [s for s in self.sockets if s.fileno() != -1] + [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.flowing.wait()
                if self.closed:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            _hang_up(sock)


class BrokerLinks:
    """Each worker slot's own links to the Apache Kafka brokers, each a `TcpProxy` that can be
    cut: every broker gets a listener per slot (``WORKER<slot>``) that advertises the slot's
    proxy in front of it, so a worker bootstrapping there reaches every broker through its
    proxies only, and cutting them partitions that worker from the whole cluster while the
    other workers, the publisher and the tools go on. Stopped by `close`."""

    def __init__(self, slots: int, brokers: int) -> None:
        self.proxies = {slot: [TcpProxy(free_port()) for _ in range(brokers)] for slot in range(slots)}

    def listeners(self) -> dict[str, list[tuple[int, int]]]:
        """The brokers' extra listeners (`ApacheKafkaCluster`): per slot, per broker, the port
        the broker listens on and the proxy's port it advertises."""
        return {f"WORKER{slot}": [(p.target, p.port) for p in ps] for slot, ps in self.proxies.items()}

    def broker_url(self, slot: int) -> str:
        """The ``broker`` setting of the worker in `slot`."""
        return ";".join(f"kafka://{HOST}:{proxy.port}" for proxy in self.proxies[slot])

    def cut(self, slot: int) -> None:
        for proxy in self.proxies[slot]:
            proxy.cut()

    def heal(self, slot: int) -> None:
        for proxy in self.proxies[slot]:
            proxy.heal()

    def close(self) -> None:
        for proxies in self.proxies.values():
            for proxy in proxies:
                proxy.close()


def _hang_up(sock: socket.socket) -> None:
    """Shut `sock` down (waking a thread blocked on it) and close it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class FaultyRedis:
    """A redis-server child on a fixed loopback port with an append-only file fsynced at every
    write (``appendfsync always``), so that a kill -9 loses no acknowledged write: it can be
    frozen (SIGSTOP/SIGCONT), made to refuse writes (``maxmemory`` just above what it uses,
    ``noeviction``) and killed and restarted from its AOF. Stopped by PID (`stop`)."""

    def __init__(self, workdir: Path, startup_timeout: float = 30.0) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://{HOST}:{self.port}/0"
        self.startup_timeout = startup_timeout
        self.child: Child | None = None

    def start(self) -> None:
        """Start it (again) on its port from its AOF, and wait until it answers PING."""
        argv = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", HOST,
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--dir", str(self.workdir),
            "--daemonize", "no",
            "--logfile", "",
            *REDIS_HASH_LIMITS,
        ]  # fmt: skip
        self.child = spawn("redis", argv, self.workdir, self.port)
        wait_for_port(HOST, self.port, self.startup_timeout, alive=self.child.alive)
        client = self.client()
        try:
            client.ping()
        finally:
            client.close()

    @property
    def pid(self) -> int:
        """The running server's PID (a restart gives a new one)."""
        if self.child is None:
            raise LocalRuntimeError("the chaos Redis is not running")
        return self.child.process.pid

    def client(self) -> redis.Redis:
        """A client that waits while Redis loads its AOF."""
        return redis.Redis(host=HOST, port=self.port, socket_timeout=10.0, retry_on_timeout=False)

    def signal(self, sig: int) -> None:
        """Send `sig` (SIGSTOP, SIGCONT, …) to the server by PID."""
        os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL it (resuming it first if frozen) and reap it."""
        assert self.child is not None
        self.child.process.send_signal(signal.SIGKILL)
        self.child.process.wait()

    def refuse_writes(self) -> None:
        """Make it answer OOM to writes that need memory: ``maxmemory`` a little above what it
        uses now, ``noeviction``."""
        client = self.client()
        try:
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", str(used + 64 * 1024))
        finally:
            client.close()

    def accept_writes(self) -> None:
        """Lift the memory limit `refuse_writes` set."""
        client = self.client()
        try:
            client.config_set("maxmemory", "0")
        finally:
            client.close()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGCONT (in case it is frozen), then SIGTERM, wait, SIGKILL; reaps the PID."""
        if self.child is not None and self.child.alive():
            try:
                self.child.process.send_signal(signal.SIGCONT)
            except OSError:
                pass
            self.child.stop(timeout)


def signal_process(process: subprocess.Popen[bytes], sig: int) -> None:
    """Send `sig` to a child by PID, if it still runs."""
    if process.poll() is None:
        process.send_signal(sig)


def held_ladders(port: int) -> bool:
    """Whether the worker's gauges say a ladder is held (stopped, or Redis refusing writes)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        text = response.read().decode()
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("stream_rater_ladders_stopped", "stream_rater_store_refusing") and float(value) > 0:
            return True
    return False


def readyz_status(port: int) -> int:
    """The HTTP status of a worker's ``/readyz``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
