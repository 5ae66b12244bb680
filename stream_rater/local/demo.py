"""``stream-rater demo``: the whole service on one machine, end to end.

Starts the embedded runtime (Tansu broker + Redis), a worker process, publishes the
international football results (49k matches 1872–2026, CC0, shipped in ``stream_rater/data``)
as match-finished events,
follows the rating-updates topic until every match is rated, then prints the leaderboard
and the throughput, and stops everything it started (by PID).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from stream_rater.config.ladders import load_ladders
from stream_rater.config.settings import Settings, env_name
from stream_rater.kafka import publish, subscribe
from stream_rater.local.processes import popen_tied
from stream_rater.offline.adapters import open_text, read_records
from stream_rater.offline.verify import VerifyReport, verdict, verify
from stream_rater.store import open_store
from stream_rater.waiting import wait_until

#: The ladder the demo rates on, with the project's best football settings (stream_rater/bench/README.md, Accuracy).
DEMO_LADDER = "football"
DEMO_LADDER_ENV = {
    "STREAM_RATER_LADDER_FOOTBALL": "trueskill",
    "STREAM_RATER_LADDER_FOOTBALL__BETA": "5.851",
    "STREAM_RATER_LADDER_FOOTBALL__TAU": "0",
    "STREAM_RATER_LADDER_FOOTBALL__DRAW_PROBABILITY": "0.2035",
    "STREAM_RATER_LADDER_FOOTBALL__TIME_TAU": "1.216",
    "STREAM_RATER_LADDER_FOOTBALL__TIME_UNIT": "years",
}


def default_data_file() -> Path:
    """The football results shipped with the package (CC0, gzipped)."""
    return Path(__file__).parents[1] / "data" / "international_football_results.csv.gz"


#: The settings a worker child process is given (the others are its defaults, or `extra`).
WORKER_FIELDS = (
    "broker",
    "redis_url",
    "redis_prefix",
    "web_port",
    "partitions",
    "batch_size",
    "session_timeout",
    "fetch_max_wait",
    "consumer_group",
    "topic_matches",
    "topic_updates",
    "topic_dlq",
    "topic_corrections",
    "inflation_interval",
)


def worker_env(settings: Settings, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a worker subprocess configured by `settings`, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_RATER_")}
    env.update({env_name(field): str(getattr(settings, field)) for field in WORKER_FIELDS})
    env.update(extra)
    return env


def ladders_env(names: Iterable[str], model: str = "trueskill") -> dict[str, str]:
    """The environment variables that configure each of the ladders `names` with `model`."""
    return {"STREAM_RATER_LADDER_" + name.upper().replace("-", "_"): model for name in names}


def tagged_settings(tag: str, **fields: Any) -> Settings:
    """Settings whose topics and consumer group are named after `tag`, so that a test or a
    benchmark run shares none with another on the same broker, and whose short session
    timeout makes group joins quick; `fields` set the others."""
    tagged: dict[str, Any] = {
        "topic_matches": f"matches-{tag}",
        "topic_updates": f"updates-{tag}",
        "topic_dlq": f"dlq-{tag}",
        "topic_corrections": f"corrections-{tag}",
        "consumer_group": f"group-{tag}",
        "session_timeout": 3.0,
    }
    return Settings(**{**tagged, **fields})


def start_worker(
    settings: Settings, extra_env: Mapping[str, str], log: TextIO, *, tied: bool = False
) -> subprocess.Popen[bytes]:
    """A ``stream-rater worker`` child process (stop it with `stop_process`). `tied`: it gets
    SIGKILL if this process dies first (`popen_tied`), so that a command killed outright leaves
    no worker behind."""
    argv = [sys.executable, "-m", "stream_rater", "worker"]
    env = worker_env(settings, extra_env)
    if tied:
        return popen_tied(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)


@dataclass(frozen=True)
class Server:
    """A running ``stream-rater serve`` child process and its base URL."""

    process: subprocess.Popen[bytes]
    url: str


@contextlib.contextmanager
def serving(store_url: str, ladders_file: Path, timeout: float = 60.0) -> Iterator[Server]:
    """A ``stream-rater serve`` child answering the read API of the store at `store_url` on a
    free loopback port, once ready (`wait_ready`); stopped by PID (`stop_process`) after, and
    tied to this process (`popen_tied`)."""
    from stream_rater.local.processes import HOST, free_port

    port = free_port()
    process = popen_tied(
        [
            sys.executable,
            "-m",
            "stream_rater",
            "serve",
            "--store",
            store_url,
            "--web-port",
            str(port),
            "--ladders-file",
            str(ladders_file),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = Server(process, f"http://{HOST}:{port}")
    try:
        wait_ready(process, f"{server.url}/readyz", timeout)
        yield server
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[Any], timeout: float = 30.0) -> int:
    """SIGTERM the child by PID, wait, SIGKILL if it does not exit in time."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def wait_ready(process: subprocess.Popen[Any], url: str, timeout: float = 120.0) -> None:
    """Poll the worker's ``/readyz`` until it answers 200 (partitions assigned, Redis up)."""

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"worker exited with code {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_until(ready, f"the worker to be ready at {url}", timeout, interval=0.1)


def football_events(path: Path, ladder: str) -> Iterator[dict[str, Any]]:
    """The football CSV as match-finished wire events on `ladder`, with the home effect."""
    with open_text(path) as stream:
        for record in read_records([(path.name, stream)], "football", home_effect=True):
            if record.event is not None:
                yield {**record.event, "ladder": ladder}


async def follow_until(settings: Settings, match_ids: set[str], timeout: float) -> float:
    """Read rating updates from the beginning until every match in `match_ids` has been
    rated; returns when the last one arrived (monotonic clock)."""
    remaining = set(match_ids)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            async for event in subscribe(settings, from_beginning=True, idle_timeout=timeout):
                remaining.discard(event["match_id"])
                if not remaining:
                    return time.monotonic()
    raise TimeoutError(f"{len(remaining)} matches not rated after {timeout:.0f} s")


def run_demo(
    settings: Settings,
    data: Path,
    *,
    limit: int | None = None,
    top: int = 15,
    out: TextIO = sys.stdout,
    timeout: float = 600.0,
) -> int:
    """Run the demo; returns the process exit code."""
    from stream_rater.local.runtime import LocalRuntime, free_port

    events = list(football_events(data, DEMO_LADDER))[:limit]
    with LocalRuntime(topics=settings.topics(), topic_configs=settings.topic_configs()) as runtime:
        settings = replace(
            settings,
            broker=runtime.broker_url,
            redis_url=runtime.redis_url,
            web_port=free_port(),
            session_timeout=3.0,
            fetch_max_wait=runtime.fetch_max_wait(settings.fetch_max_wait),
        )
        print(f"broker {runtime.bootstrap_servers}  redis {runtime.redis_url}", file=out)
        log_path = Path(runtime.log_dir or ".") / "worker.log"
        with log_path.open("w") as log:
            worker = start_worker(settings, DEMO_LADDER_ENV, log, tied=True)
            print(
                f"worker pid {worker.pid}, dashboard http://{settings.web_host}:{settings.web_port}/ "
                f"(log {log_path})",
                file=out,
            )
            try:
                wait_ready(worker, f"http://{settings.web_host}:{settings.web_port}/readyz")
                started = time.monotonic()
                finished = asyncio.run(_publish_and_follow(settings, events, timeout, out))
            finally:
                code = stop_process(worker)
        elapsed = finished - started
        print(
            f"rated {len(events)} matches in {elapsed:.1f} s end to end "
            f"({len(events) / elapsed:,.0f} matches/s); worker exit code {code}",
            file=out,
        )
        asyncio.run(_print_leaderboard(settings, top, out))
        report = asyncio.run(_verify(settings))
        print(verify_line(report), file=out)
    return 0 if not report.differences else 1


def verify_line(report: VerifyReport) -> str:
    """The demo's last line: its verify result, worded as `stream-rater verify` words it."""
    return f"verify: recomputed from the matches topic, {verdict(report.players, len(report.differences))}"


async def _verify(settings: Settings) -> VerifyReport:
    """`stream-rater verify` of the demo's ladder: the stream's states against a replay."""
    store = open_store(settings.redis_url, prefix=settings.redis_prefix)
    try:
        return await verify(settings, load_ladders(None, DEMO_LADDER_ENV), DEMO_LADDER, store)
    finally:
        await store.close()


async def _publish_and_follow(
    settings: Settings, events: list[dict[str, Any]], timeout: float, out: TextIO
) -> float:
    follower = asyncio.ensure_future(follow_until(settings, {e["match_id"] for e in events}, timeout))
    summary = await publish(events, settings)
    print(summary.line(), file=out)
    return await follower


async def _print_leaderboard(settings: Settings, top: int, out: TextIO) -> None:
    store = open_store(settings.redis_url, prefix=settings.redis_prefix)
    try:
        rows = await store.leaderboard(DEMO_LADDER, top)
        states = (await store.read(DEMO_LADDER, [p for p, _ in rows], [], [])).players
        effects = await store.players(DEMO_LADDER, effects=True)
    finally:
        await store.close()
    print(f"\nTop {top} of ladder {DEMO_LADDER!r} (TrueSkill, mu - 3 sigma):", file=out)
    for rank, (team, rating) in enumerate(rows, start=1):
        s = states[team]
        print(
            f"{rank:>3}. {team:<24} {rating:7.2f}  (mu {s.mu:6.2f}, sigma {s.sigma:5.2f}, {s.games} games)",
            file=out,
        )
    if "home" in effects:
        home = effects["home"]
        print(f"learned home advantage: {home.mu:+.2f} (sigma {home.sigma:.2f})", file=out)
