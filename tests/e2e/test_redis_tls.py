"""Redis over TLS with a client certificate (`tests.e2e.redis_tls`): a worker, ``serve``,
``verify``, ``void`` and ``replay`` against a TLS-only redis-server that asks for a client
certificate and a password, both secrets read from files (``…_FILE``), every log of the run
free of the secrets and of the API token used; a client without a certificate is refused. And
a worker on a TLS-only Redis Cluster of three masters."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stream_rater.local.demo import ladders_env, stop_process, wait_ready
from stream_rater.local.processes import free_port
from stream_rater.service.auth.tokens import new_token
from tests.e2e.redis_tls import REDIS_SERVER, TlsFiles, make_tls_files, tls_redis, tls_redis_cluster
from tests.e2e.streams import Stream
from tests.helpers import cli, duel, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not Path(REDIS_SERVER).exists(), reason=f"{REDIS_SERVER} (Debian's redis-server) not found"
    ),
]
PLAYERS = ["ann", "ben", "cat", "dan"]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def get(url: str, token: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read()


def applied(port: int, token: str) -> float:
    """The worker's ``stream_rater_matches_applied_total``."""
    _, body = get(f"http://127.0.0.1:{port}/metrics", token)
    return sum(
        sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == "stream_rater_matches_applied_total"
    )


def tls_stream(stream: Stream, url: str, env: dict[str, str]) -> Stream:
    stream.settings = replace(stream.settings, redis_url=url)
    stream.env = env
    return stream


def duels(ladder: str, count: int, prefix: str = "m") -> list[dict]:
    return [
        duel(f"{prefix}{i}", PLAYERS[i % 4], PLAYERS[(i + 1) % 4], ladder=ladder, at=1_700_000_000 + 60 * i)
        for i in range(count)
    ]


@pytest.fixture
def serve_over_tls(tmp_path: Path) -> Iterator:
    started: list[subprocess.Popen] = []

    def start(url: str, env: dict[str, str], log: Path) -> str:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "stream_rater", "serve", "--store", url, "--web-port", str(port)],
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        wait_ready(process, f"http://127.0.0.1:{port}/readyz", 60)
        return f"http://127.0.0.1:{port}"

    yield start
    for process in started:
        assert stop_process(process) in (0, -15)


def test_worker_serve_verify_void_replay_over_redis_tls_with_a_client_certificate(
    stream_factory, tls_files: TlsFiles, serve_over_tls, tmp_path: Path
):
    import os

    token, entry = new_token("ops", frozenset({"read", "metrics"}), None)
    (tmp_path / "tokens").write_text(entry.line() + "\n")
    with tls_redis(tls_files, tmp_path) as url:
        env = {
            **tls_files.client_env(),
            "STREAM_RATER_API_TOKENS_FILE": str(tmp_path / "tokens"),
            "STREAM_RATER_LOG_LEVEL": "debug",
        }
        stream = tls_stream(stream_factory(partitions=1), url, env)
        stream.start_worker()
        events = duels(stream.ladder, 12)
        stream.publish(events)
        wait_for(
            lambda: applied(stream.web_ports[0], token) >= len(events), "every match applied over TLS", 60
        )

        base_env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_RATER_")}
        served = serve_over_tls(
            url, {**base_env, **env, **ladders_env([stream.ladder])}, tmp_path / "serve.log"
        )
        status, body = get(f"{served}/api/ladders/{stream.ladder}/leaderboard", token)
        assert status == 200 and {row["player_id"] for row in json.loads(body)["rows"]} == set(PLAYERS)

        settings = stream.settings
        topics = ("--broker", settings.broker, "--topic-matches", settings.topic_matches)
        common = ("--ladder", stream.ladder, "--store", url, *topics)
        cli_env = {**env, **ladders_env([stream.ladder, "replayed"])}
        verified = cli(
            "verify", *common, "--consumer-group", settings.consumer_group, env=cli_env, timeout=120
        )
        voided = cli(
            "void",
            events[3]["match_id"],
            *("--reason", "wrong result", "--json", *common),
            *("--topic-updates", settings.topic_updates, "--topic-corrections", settings.topic_corrections),
            env=cli_env,
            timeout=120,
        )
        (tmp_path / "replayed.jsonl").write_text("".join(json.dumps(e) + "\n" for e in duels("replayed", 6)))
        replayed = cli("replay", str(tmp_path / "replayed.jsonl"), "--store", url, env=cli_env)
        ratings = cli("ratings", "--ladder", "replayed", "--store", url, env=cli_env)
        no_certificate = cli(
            "ratings",
            *("--ladder", "replayed", "--store", url, "--redis-tls-ca-file", str(tls_files.ca)),
            env={
                **ladders_env(["replayed"]),
                "STREAM_RATER_REDIS_PASSWORD_FILE": env["STREAM_RATER_REDIS_PASSWORD_FILE"],
            },
        )

    runs = [verified, voided, replayed, ratings, no_certificate]
    for run in runs[:4]:
        assert run.returncode == 0, run.args[3] + ": " + run.stderr
    assert json.loads(voided.stdout)["voided"] == [events[3]["match_id"]]
    assert {json.loads(line)["player_id"] for line in ratings.stdout.splitlines()} == set(PLAYERS)
    assert no_certificate.returncode == 1 and no_certificate.stderr.startswith("stream-rater ratings: Redis:")
    assert len(no_certificate.stderr.strip().splitlines()) == 1

    logs = [path.read_text() for path in tmp_path.glob("*.log")] + [r.stdout + r.stderr for r in runs]
    assert "debug" in env["STREAM_RATER_LOG_LEVEL"] and sum(len(log) for log in logs) > 10_000
    for secret in (tls_files.redis_password, tls_files.key_password, token):
        assert not [log for log in logs if secret in log], "a secret was logged"


def test_worker_over_redis_cluster_tls(stream_factory, tls_files: TlsFiles, tmp_path: Path):
    """Two ladders (hash tags on different masters, most likely) rated by a worker on a TLS
    cluster; its read API answers both leaderboards."""
    token, entry = new_token("ops", frozenset({"read", "metrics"}), None)
    (tmp_path / "tokens").write_text(entry.line() + "\n")
    with tls_redis_cluster(tls_files, tmp_path) as url:
        env = {**tls_files.client_env(cluster=True), "STREAM_RATER_API_TOKENS_FILE": str(tmp_path / "tokens")}
        stream = tls_stream(stream_factory(partitions=2, ladders=2), url, env)
        stream.start_worker()
        events = [e for ladder in stream.names for e in duels(ladder, 8, prefix=f"{ladder}-")]
        stream.publish(events)
        port = stream.web_ports[0]
        wait_for(lambda: applied(port, token) >= len(events), "every match applied on the TLS cluster", 60)
        for ladder in stream.names:
            status, body = get(f"http://127.0.0.1:{port}/api/ladders/{ladder}/leaderboard", token)
            assert status == 200 and len(json.loads(body)["rows"]) == len(PLAYERS)
