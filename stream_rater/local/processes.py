"""Child processes of the local runtime and waiting for them: free loopback ports, a child
started in its own session that dies with its parent (``PR_SET_PDEATHSIG``) and is stopped by
PID, and readiness checks (a listening port, Kafka metadata, Redis Cluster state).

Shared by `runtime` (Tansu, Redis, Redis Cluster) and `apache_kafka` (KRaft nodes)."""

from __future__ import annotations

import asyncio
import ctypes
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from stream_rater.waiting import wait_until

_T = TypeVar("_T")

HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1
#: A Redis Cluster node also listens on its port + 10000 (the cluster bus).
CLUSTER_BUS_OFFSET = 10000


class LocalRuntimeError(RuntimeError):
    """A local service failed to start or a broker/topic operation failed."""


#: The lowest port `free_port` picks (below it: well-known and registered services' defaults).
LISTEN_PORTS_FROM = 20000
#: Where the kernel's ephemeral range starts when ``ip_local_port_range`` cannot be read.
EPHEMERAL_FROM = 32768


def _ephemeral_from() -> int:
    """The first port of the kernel's range for the local ends of outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_FROM


def free_port(host: str = HOST, attempts: int = 100) -> int:
    """A TCP port that is free on ``host`` right now (another process may still take it), picked
    at random below the ephemeral range: a port the kernel gave out (``bind(0)``, ``connect``)
    may be the local end of some client's connection by the time a server binds it."""
    top = _ephemeral_from()
    for _ in range(attempts if top > LISTEN_PORTS_FROM else 0):
        port = random.randrange(LISTEN_PORTS_FROM, top)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_cluster_port(host: str = HOST, attempts: int = 100) -> int:
    """A free port P whose cluster bus port P + 10000 is free too (Redis Cluster takes both)."""
    for _ in range(attempts):
        port = free_port(host)
        if port + CLUSTER_BUS_OFFSET > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port + CLUSTER_BUS_OFFSET))
            except OSError:
                continue
        return port
    raise LocalRuntimeError(f"no free port pair P, P+{CLUSTER_BUS_OFFSET} found on {host}")


def wait_for_port(
    host: str,
    port: int,
    timeout: float = 10.0,
    *,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll until a TCP connection to ``host:port`` succeeds.

    Raises ``TimeoutError`` after ``timeout`` seconds, or ``LocalRuntimeError`` as soon as
    ``alive()`` returns False (the process that should listen has died).
    """
    wait_until(lambda: _listening(host, port, alive), f"a listener on {host}:{port}", timeout)


def _listening(host: str, port: int, alive: Callable[[], bool] | None) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds; ``LocalRuntimeError`` if ``alive()``
    says the process that should listen has died."""
    if alive is not None and not alive():
        raise LocalRuntimeError(f"process exited before listening on {host}:{port}")
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_cluster_ok(ports: Sequence[int], timeout: float, host: str = HOST) -> None:
    """Poll until every Redis Cluster node at ``host:port`` reports ``cluster_state:ok``, knows
    all ``ports`` and, if it is a replica, has its link to its master up; else ``TimeoutError``."""
    import redis

    clients = [redis.Redis(host=host, port=port, socket_timeout=1.0, decode_responses=True) for port in ports]
    waiting: list[int] = []

    def all_ok() -> bool:
        waiting[:] = [client.get_connection_kwargs()["port"] for client in clients if not node_ok(client)]
        return not waiting

    def node_ok(client: redis.Redis) -> bool:
        info = client.cluster("INFO")
        role = client.info("replication")
        return (
            info["cluster_state"] == "ok"
            and int(info["cluster_known_nodes"]) == len(ports)
            and (role["role"] != "slave" or role.get("master_link_status") == "up")
        )

    try:
        wait_until(all_ok, lambda: f"Redis Cluster nodes {waiting} to be ok", timeout)
    finally:
        for client in clients:
            client.close()


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion; in a helper thread if this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def wait_kafka_metadata(
    bootstrap: str,
    timeout: float,
    *,
    brokers: int = 1,
    alive: Callable[[], bool] = lambda: True,
) -> None:
    """Poll until a metadata request to ``bootstrap`` (``host:port[,host:port]``) lists at least
    ``brokers`` brokers (a KRaft cluster lists only the unfenced ones).

    Raises ``TimeoutError`` after ``timeout`` seconds, or ``LocalRuntimeError`` as soon as
    ``alive()`` is False, also after an answer (then someone else answered on the port).
    """
    found = 0

    async def listed() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        await admin.start()
        try:
            return len((await admin.describe_cluster())["brokers"])
        finally:
            await admin.close()

    def enough() -> bool:
        nonlocal found
        try:
            found = _run_sync(listed())
        except KafkaError:
            found = 0
        if not alive():
            raise LocalRuntimeError("broker exited during startup")
        return found >= brokers

    wait_until(enough, lambda: f"{bootstrap} to list {brokers} brokers (it lists {found})", timeout)


# --------------------------------------------------------------------------------------------
# Child processes


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get SIGKILL when its parent dies (Linux only).
    The kernel ties the child to the *thread* that started it (`popen_tied`)."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class _Starter:
    """A daemon thread, started on first use, that forks the tied children of every thread but
    the main one: it lives as long as the process (a thread pool's thread is joined, and its
    children killed, as soon as the main thread finishes)."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, start: Callable[[], _T]) -> _T:
        """`start()`, called in this thread."""
        if threading.current_thread() is self._thread:
            return start()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="tied-children", daemon=True)
                self._thread.start()
        done: Future[_T] = Future()
        self._requests.put((start, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            start, done = self._requests.get()
            try:
                done.set_result(start())
            except BaseException as exc:  # handed to the caller, which raises it
                done.set_exception(exc)


_STARTER = _Starter()


def popen_tied(args: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **popen)`` of a child that gets SIGKILL when this process dies
    (``PR_SET_PDEATHSIG``, Linux only), so that a command killed outright leaves nothing
    running. The kernel ties the child to the thread that forks it, and kills it when that
    thread ends: a thread other than the main one (a fault of `bench chaos` restarting a
    worker) has it forked by `_STARTER`, whose thread lives as long as the process."""
    preexec = _die_with_parent(os.getpid())

    def start() -> subprocess.Popen[Any]:
        return subprocess.Popen(args, preexec_fn=preexec, **popen)

    if threading.current_thread() is threading.main_thread():
        return start()
    return _STARTER.run(start)


def run_tied(args: Sequence[str], timeout: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(args, capture_output=True, text=True, timeout=timeout, **popen)`` of a
    tied child (`popen_tied`): killed on the timeout (`subprocess.TimeoutExpired`) as ``run``
    kills it, and with this process."""
    process = popen_tied(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(args, process.returncode, out, err)


@dataclass
class Child:
    """One started service process and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    port: int

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the process log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float) -> None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; always reaps the PID."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def spawn(name: str, argv: list[str], workdir: Path, port: int, **popen: Any) -> Child:
    """Start ``argv`` in ``workdir`` in its own session, logging to ``workdir/<name>.log``;
    ``popen``: more `subprocess.Popen` arguments (e.g. ``user``/``group`` to drop root)."""
    log_path = workdir / f"{name}.log"
    with open(log_path, "ab") as log:
        process = popen_tied(
            argv,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **popen,
        )
    return Child(name, process, log_path, port)


def stop_children(children: Iterable[Child | None], timeout: float) -> None:
    """Stop ``children`` together: SIGTERM to all, wait up to ``timeout`` seconds in all, then
    SIGKILL the rest; reaps every PID. (A KRaft node waits for its quorum when it shuts down,
    so the nodes of a cluster must go at once.)"""
    started = [c for c in children if c is not None]
    for child in started:
        if child.alive():
            child.process.terminate()
    deadline = time.monotonic() + timeout
    for child in started:
        child.stop(max(0.0, deadline - time.monotonic()))
