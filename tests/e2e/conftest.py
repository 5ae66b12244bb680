"""End-to-end fixtures: a real ``stream-rater worker`` subprocess with its own topics,
consumer group and ladder (``topic_factory``/``unique_name``) on the suite's broker and Redis."""

from __future__ import annotations

import asyncio
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stream_rater.config.settings import Settings
from stream_rater.kafka import create_topics, publish
from stream_rater.local.demo import start_worker, stop_process, tagged_settings, wait_ready
from stream_rater.local.runtime import free_port
from tests.e2e.browser import browser_page  # noqa: F401 (the fixture, for every e2e module)
from tests.e2e.e2e_support import VolatileRedis, worker_test_env
from tests.e2e.streams import Stream, spread_ladders
from tests.helpers import FINISHED_AT, duel, wait_for

PARTITIONS = 2
STARTUP_TIMEOUT = 90.0


class Scrape(dict[tuple[str, frozenset[tuple[str, str]]], float]):
    """One /metrics scrape: (sample name, labels) → value."""

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples called `name` whose labels include `labels`."""
        wanted = set(labels.items())
        return sum(value for (sample, have), value in self.items() if sample == name and wanted <= have)

    def label_values(self) -> set[str]:
        """Every label value of every sample."""
        return {value for _, labels in self for _, value in labels}


@dataclass(frozen=True)
class RunningWorker:
    """A worker subprocess and how to reach it."""

    settings: Settings
    ladder: str
    process: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        """Base URL of the worker's web server."""
        return f"http://127.0.0.1:{self.settings.web_port}"

    def get(self, path: str) -> tuple[int, bytes]:
        """Status and body of ``GET path`` (status 0 when nothing answers)."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            return 0, b""

    def metrics(self) -> Scrape:
        """A /metrics scrape."""
        status, body = self.get("/metrics")
        assert status == 200, status
        return Scrape(
            {
                (sample.name, frozenset(sample.labels.items())): sample.value
                for family in text_string_to_metric_families(body.decode())
                for sample in family.samples
            }
        )

    def duel(self, match_id: str, winner: str, loser: str, at: float = FINISHED_AT) -> dict:
        """A valid 1-vs-1 match-finished event on this worker's ladder."""
        return duel(match_id, winner, loser, ladder=self.ladder, at=at)

    def publish(self, events: list[dict]) -> None:
        """Send match-finished events to this worker's matches topic."""
        asyncio.run(publish(events, self.settings))

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        """Poll `condition` until it holds; fail with the worker's log if it never does."""

        def holds() -> bool:
            if condition():
                return True
            if self.process.poll() is not None:
                pytest.fail(
                    f"worker exited ({self.process.returncode}) waiting for {what}:\n{self.log_tail()}"
                )
            return False

        try:
            wait_for(holds, what, timeout)
        except TimeoutError as exc:
            pytest.fail(f"{exc}; worker log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        """The end of the worker's log."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture
def web_worker(
    broker_url: str, redis_url: str, topic_factory: Callable[..., str], unique_name: str, tmp_path: Path
) -> Iterator[RunningWorker]:
    """A ready worker (partitions assigned, Redis answering) rating one TrueSkill ladder of its
    own with its own topics and consumer group; stopped by PID (SIGTERM) afterwards, which must
    end it cleanly."""
    ladder = f"web-{uuid.uuid4().hex[:12]}"
    settings = Settings(
        broker=broker_url,
        redis_url=redis_url,
        web_port=free_port(),
        partitions=PARTITIONS,
        topic_matches=topic_factory(PARTITIONS, "matches"),
        topic_updates=topic_factory(PARTITIONS, "updates"),
        topic_dlq=topic_factory(PARTITIONS, "dlq"),
        topic_corrections=topic_factory(1, "corrections"),
        consumer_group=unique_name,
        session_timeout=3.0,
        inflation_interval=0.0,  # the inflation totals as of each read, not of the first scrape
    )
    env = worker_test_env([ladder], tmp_path / "faust-data")
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = RunningWorker(settings, ladder, start_worker(settings, env, log), log_path)
        try:
            try:
                wait_ready(worker.process, worker.url + "/readyz", STARTUP_TIMEOUT)
            except (RuntimeError, TimeoutError) as exc:
                pytest.fail(f"{exc}; worker log:\n{worker.log_tail()}")
            yield worker
        finally:
            code = stop_process(worker.process)
    assert code == 0, f"worker exit code {code}:\n{worker.log_tail()}"


@pytest.fixture
def stream_factory(broker_url: str, redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Stream]]:
    """Makes a `Stream` with fresh topics of the given partition count; stops its workers by PID."""
    made: list[Stream] = []

    def make(
        partitions: int = 1,
        batch_size: int = 200,
        create: bool = True,
        ladders: int = 1,
        model: str = "trueskill",
        params: dict | None = None,
    ) -> Stream:
        name = uuid.uuid4().hex[:10]
        settings = tagged_settings(
            name, broker=broker_url, redis_url=redis_url, partitions=partitions, batch_size=batch_size
        )
        if create:
            asyncio.run(create_topics(broker_url, settings.topics()))
        stream = Stream(
            settings, spread_ladders(f"s-{name}", ladders, partitions), tmp_path, model, params or {}
        )
        made.append(stream)
        return stream

    yield make
    for stream in made:
        for process in stream.workers:
            stop_process(process)


@pytest.fixture
def volatile_redis(tmp_path: Path) -> Iterator[VolatileRedis]:
    server = VolatileRedis(tmp_path)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[VolatileRedis]:
    server = VolatileRedis(tmp_path, aof=True)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()
