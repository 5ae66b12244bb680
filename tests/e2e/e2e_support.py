"""What the end-to-end tests share: the extra environment of a worker subprocess that rates
one test's ladders, a restartable redis-server, and the fault tests' probes and oracle."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from helpers import stored_players

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts import parse_match
from stream_rater.kafka import create_topics
from stream_rater.local.demo import ladders_env, tagged_settings
from stream_rater.local.runtime import free_port, redis_server_binary, wait_for_port
from stream_rater.offline.replay import replay
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore


def worker_test_env(
    ladders: Sequence[str], datadir: Path, model: str = "trueskill", params: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Variables (beyond `demo.worker_env`'s) for a worker that rates `ladders` with `model`
    (default TrueSkill) and ladder parameters `params`, and keeps faust's data under `datadir`."""
    env = {**ladders_env(ladders, model), "STREAM_RATER_APP_DATADIR": str(datadir)}  # faust's own variable
    for name in ladders:
        for param, value in (params or {}).items():
            env[f"STREAM_RATER_LADDER_{name.upper().replace('-', '_')}__{param.upper()}"] = str(value)
    return env


class VolatileRedis:
    """A redis-server on a fixed port, restartable, stopped by PID: without persistence (a
    restart comes back empty) or with an append-only file (`aof`)."""

    def __init__(self, workdir: Path, aof: bool = False) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.aof = aof
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self.aof else "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port("127.0.0.1", self.port, 30)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.process.wait()


def readiness(port: int) -> tuple[int, dict]:
    """Status and body of the worker's /readyz; (0, {}) while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except urllib.error.URLError:
        return 0, {}


def applied(redis_url: str, ladder: str) -> int:
    """Matches applied to the ladder so far (each 1v1 match adds two games)."""
    return sum(s.games for s in stored_players(redis_url, ladder).values()) // 2


def equals_replay(redis_url: str, ladder: str, matches: list[dict]) -> bool:
    """The oracle: the stored states are bit for bit what a replay of `matches` computes."""

    async def replayed() -> dict:
        ladders = Ladders([Ladder(ladder, "trueskill")])
        processor = Processor(ladders, MemoryStore())
        await replay([parse_match(m, ladders) for m in matches], processor)
        return await processor.store.players(ladder)

    def exact(states: dict) -> dict:
        return {p: (s.mu, s.sigma, s.games, s.last_played) for p, s in states.items()}

    return exact(stored_players(redis_url, ladder)) == exact(asyncio.run(replayed()))


def counted(port: int, ladder: str, metric: str = "stream_rater_matches_applied_total") -> float:
    """A worker's counter for `ladder`, read from its /metrics (0 when never incremented)."""
    return scraped(port, f'{metric}{{ladder="{ladder}"}}')


def scraped(port: int, sample: str) -> float:
    """The value of one `sample` (``name`` or ``name{labels}``, as the exposition writes it)
    on a worker's /metrics (0 when absent: a counter never incremented)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"{sample} "):
                return float(line.split()[-1])
    return 0.0


class Blackhole:
    """A TCP proxy on a free port to ``127.0.0.1:target`` that a test can `cut` as a network
    partition does: no socket is closed or reset, nothing arrives — the bytes sent meanwhile
    are held, as TCP holds unacknowledged data, and go on after `heal` (to a peer that may
    have given up by then). Threads, stopped by `close`."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
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
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                return
            self.sockets += [client, upstream]
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


def _hang_up(sock: socket.socket) -> None:
    """Shut `sock` down (waking a thread blocked on it) and close it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def one_partition_stream(broker_url: str, redis_url: str) -> tuple[str, Settings]:
    """A fresh ladder name and settings with its own one-partition topics (created) and group."""
    name = uuid.uuid4().hex[:10]
    settings = tagged_settings(name, broker=broker_url, redis_url=redis_url, partitions=1, batch_size=200)
    asyncio.run(create_topics(broker_url, settings.topics()))
    return f"l-{name}", settings
