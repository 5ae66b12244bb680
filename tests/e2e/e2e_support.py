"""What the end-to-end tests share: the extra environment of a worker subprocess that rates
one test's ladders, a restartable redis-server, and the fault tests' probes and oracle."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import redis
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts import parse_match
from stream_rater.kafka import bootstrap_servers, create_topics, home_partition, read_log
from stream_rater.local.demo import ladders_env, tagged_settings
from stream_rater.local.nemesis import TcpProxy
from stream_rater.local.runtime import free_port, redis_server_binary, wait_for_port
from stream_rater.offline.replay import replay
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore
from stream_rater.waiting import wait_until
from tests.helpers import stored_players


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
    restart comes back empty, unless started from a dump `save` made) or with an append-only
    file (`aof`)."""

    DUMP = "dump.rdb"

    def __init__(self, workdir: Path, aof: bool = False) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.aof = aof
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self, dump: Path | None = None) -> None:
        """Start it: empty (no automatic snapshots), or with the data of `dump` (see `save`)."""
        (self.workdir / self.DUMP).unlink(missing_ok=True)
        if dump is not None:
            shutil.copyfile(dump, self.workdir / self.DUMP)
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
                "--dbfilename",
                self.DUMP,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port("127.0.0.1", self.port, 30)

    def save(self, to: Path) -> None:
        """Snapshot the data now (BGSAVE, waited for) into the file `to`, for a later `start`."""
        client = redis.Redis(port=self.port)
        try:
            saves = client.info("persistence")["rdb_saves"]
            client.bgsave()
            done = wait_until(
                lambda: (
                    (info := client.info("persistence"))["rdb_saves"] > saves
                    and not info["rdb_bgsave_in_progress"]
                    and info
                ),
                "the BGSAVE done",
                30,
            )
            assert done["rdb_last_bgsave_status"] == "ok", done
        finally:
            client.close()
        shutil.copyfile(self.workdir / self.DUMP, to)

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


def replay_of(
    ladder: str, matches: list[dict], ladders: Ladders | None = None
) -> tuple[dict, dict[str, dict]]:
    """What a replay of `matches` computes on `ladder` (TrueSkill unless `ladders` configures
    it): the ladder's players' states, and every rating-changed event by its event_id."""
    configured = ladders or Ladders([Ladder(ladder, "trueskill")])

    async def replayed() -> tuple[dict, dict[str, dict]]:
        processor = Processor(configured, MemoryStore())
        events: dict[str, dict] = {}
        await replay(
            [parse_match(m, configured) for m in matches],
            processor,
            on_result=lambda r: events.update((e["event_id"], e) for e in r.events),
        )
        return await processor.store.players(ladder), events

    return asyncio.run(replayed())


def equals_replay(redis_url: str, ladder: str, matches: list[dict], prefix: str = "sr") -> bool:
    """The oracle: the stored states (under the key `prefix`) are bit for bit what a replay of
    `matches` computes."""

    def exact(states: dict) -> dict:
        return {p: (s.mu, s.sigma, s.games, s.last_played) for p, s in states.items()}

    return exact(stored_players(redis_url, ladder, prefix)) == exact(replay_of(ladder, matches)[0])


def missing_updates(settings: Settings, ladder: str, matches: list[dict]) -> list[str]:
    """The ids of `matches` of which some rating-changed event a replay computes is not on the
    updates topic, or is there with other contents (its processing time aside); read back once."""
    records, _ = asyncio.run(read_log(settings, settings.topic_updates))
    published: dict[str, list[dict]] = {}
    for record in records:
        event = json.loads(record.value)
        published.setdefault(event["event_id"], []).append(event)

    def same(a: dict, b: dict) -> bool:
        return {**a, "processed_at": None} == {**b, "processed_at": None}

    wrong = {
        event["match_id"]
        for event_id, event in replay_of(ladder, matches)[1].items()
        if not any(same(event, found) for found in published.get(event_id, []))
    }
    return sorted(wrong)


def counted(port: int, ladder: str | None, metric: str = "stream_rater_matches_applied_total") -> float:
    """A worker's counter for `ladder` (None: a counter without labels), read from its
    /metrics (0 when never incremented)."""
    return scraped(port, metric if ladder is None else f'{metric}{{ladder="{ladder}"}}')


def scraped(port: int, sample: str) -> float:
    """The value of one `sample` (``name`` or ``name{labels}``, as the exposition writes it)
    on a worker's /metrics (0 when absent: a counter never incremented)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"{sample} "):
                return float(line.split()[-1])
    return 0.0


#: A TCP proxy a test cuts as a network partition does (the nemesis's, `bench chaos`).
Blackhole = TcpProxy


def one_partition_stream(broker_url: str, redis_url: str) -> tuple[str, Settings]:
    """A fresh ladder name and settings with its own one-partition topics (created) and group."""
    name = uuid.uuid4().hex[:10]
    settings = tagged_settings(name, broker=broker_url, redis_url=redis_url, partitions=1, batch_size=200)
    asyncio.run(create_topics(broker_url, settings.topics()))
    return f"l-{name}", settings


async def delete_head(settings: Settings, ladder: str, before: int) -> None:
    """Delete the records before offset `before` of the ladder's partition of the matches topic."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers(settings.broker))
    await admin.start()
    try:
        tp = TopicPartition(settings.topic_matches, home_partition(ladder, settings.partitions))
        await admin.delete_records({tp: RecordsToDelete(before)}, timeout_ms=10_000)
    finally:
        await admin.close()
