"""``stream-rater archive`` as a process beside two ``stream-rater worker`` processes: killed
with -9 mid-run and restarted, the archive still holds every event of the updates topic exactly
once (the oracle: the topic read back with a plain consumer); and its one-line CLI errors.
Runs on the suite's broker and on a local Apache Kafka ([apache-kafka])."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from stream_rater.archive import ArchiveReader
from stream_rater.config.settings import Settings, env_name
from stream_rater.explain import explain_match
from stream_rater.local.demo import ladders_env, stop_process
from stream_rater.local.runtime import free_port
from stream_rater.queries import Queries
from stream_rater.store import open_store
from stream_rater.store.memory import MemoryStore
from tests.archive_support import count
from tests.e2e.conftest import Scrape
from tests.e2e.streams import decoded, random_matches
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka]

MATCHES = 1500


def start_archive(
    settings: Settings, url: str, group: str, log: Path, metrics_port: int, ladders: list[str]
) -> subprocess.Popen:
    """A ``stream-rater archive`` child of its own session (the stream's `ladders`, whose
    matches' placings it keeps), small batches so that a kill lands mid-run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_RATER_")}
    env.update(ladders_env(ladders, "trueskill"))
    env.update(
        {env_name("broker"): settings.broker, env_name("archive_url"): url, env_name("session_timeout"): "3"}
    )
    argv = [sys.executable, "-m", "stream_rater", "archive", "--topic-updates", settings.topic_updates]
    argv += ["--topic-matches", settings.topic_matches]
    argv += ["--group", group, "--batch-size", "100", "--metrics-port", str(metrics_port)]
    with log.open("a") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def scrape(port: int) -> Scrape:
    """The archive's /metrics (empty when it does not answer)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            body = response.read().decode()
    except OSError:
        return Scrape()
    return Scrape(
        {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }
    )


def test_the_archive_killed_mid_run_holds_every_event_exactly_once(
    stream_factory, archive_url, unique_name, tmp_path
):
    stream = stream_factory(partitions=4, ladders=3, batch_size=100)
    stream.start_worker()
    stream.start_worker()
    port, log = free_port(), tmp_path / "archive.log"
    archive = start_archive(stream.settings, archive_url, unique_name, log, port, stream.names)
    try:
        matches = random_matches(stream, MATCHES, players=40, seed=3)
        stream.publish(matches, rate=1000)
        wait_for(lambda: count(archive_url) > 200, "the archive to be part-way", 120)
        os.kill(archive.pid, signal.SIGKILL)
        archive.wait()
        killed_at = count(archive_url)
        archive = start_archive(stream.settings, archive_url, unique_name, log, port, stream.names)
        records = stream.updates(2 * MATCHES)  # the oracle: the topic read with a plain consumer
        events = decoded(records)
        expected = {(e["ladder"], e.get("kind", "match"), e["event_id"]) for e in events}
        wait_for(lambda: count(archive_url) >= len(expected), f"{len(expected)} archived events", 120)
        wait_for(lambda: scrape(port).total("stream_rater_archive_lag") == 0 and scrape(port), "lag 0", 60)
        with psycopg.connect(archive_url) as conn:
            rows = conn.execute("SELECT ladder, kind, event_id FROM rating_events").fetchall()
        assert len(rows) == len(set(rows)) == len(expected) and set(rows) == expected
        assert killed_at < len(expected), "the kill landed after the archive had finished"
        assert scrape(port).total("stream_rater_archive_poison_records_total") == 0
        asyncio.run(reads_reach_into_the_archive(stream, archive_url, events, matches))
    finally:
        code = stop_process(archive)
    assert code == 0, log.read_text()[-3000:]


async def reads_reach_into_the_archive(stream, url: str, events: list, matches: list) -> None:
    """The past is PostgreSQL's: the busiest player's history reaches past Redis's two changes,
    from the archive; and a match explained as once its marker expired (a store that has none)
    gives, from the archive, its players and the result they had."""
    ladders, reader = stream.ladders, ArchiveReader(url)
    store = open_store(stream.settings.redis_url, prefix=stream.settings.redis_prefix)
    try:
        (ladder, player), played = Counter((e["ladder"], e["player_id"]) for e in events).most_common(1)[0]
        answer = await Queries(store, ladders, history_limit=2, archive=reader).history(ladder, player, 50)
        assert answer["source"] == "archive" and len(answer["history"]) == min(played, 50) > 2
        match = next(m for m in reversed(matches) if len({t["rank"] for t in m["teams"]}) == 2)  # decided
        explained = await explain_match(
            MemoryStore(), ladders.get(match["ladder"]), match["match_id"], 2, reader
        )
        winner = min(match["teams"], key=lambda team: team["rank"])["players"][0]["id"]
        results = {p["player_id"]: p["actual"]["result"] for p in explained["players"]}
        assert explained["source"] == "archive" and results[winner] == "win" and len(results) == 2
    finally:
        await store.close()
        await reader.close()


def run_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_RATER_")}
    return subprocess.run(
        [sys.executable, "-m", "stream_rater", "archive", *argv],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        ((), 2, "not configured: --archive-url / STREAM_RATER_ARCHIVE_URL"),
        (
            ("--archive-url", "redis://h:1/0"),
            2,
            "--archive-url / STREAM_RATER_ARCHIVE_URL: expected a postgresql:// URL",
        ),
        (
            ("--migrate", "--archive-url", "postgresql://u:secret@127.0.0.1:1/db"),
            1,
            "archive postgresql://u:***@127.0.0.1:1/db",
        ),
    ],
    ids=["missing", "not-postgres", "unreachable"],
)
def test_cli_errors_are_one_line_naming_the_flag_or_url(argv, code, says):
    done = run_cli(*argv)
    assert done.returncode == code, done.stderr
    assert (
        done.stderr.count("\n") == 1
        and done.stderr.startswith("stream-rater archive: ")
        and says in done.stderr
    )
    assert "secret" not in done.stderr


def test_migrate_twice_from_the_cli(archive_url):
    first = run_cli("--migrate", "--archive-url", archive_url)
    again = run_cli("--migrate", "--archive-url", archive_url)
    assert (first.returncode, first.stdout, again.returncode, again.stdout) == (
        0,
        "archive schema: applied [1, 2]\n",
        0,
        "archive schema: up to date\n",
    )
