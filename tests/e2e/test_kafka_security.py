"""Kafka security on a real broker: a one-node Apache Kafka whose clients' listener speaks
SASL_SSL (SCRAM-SHA-512 over TLS, its certificate from a throwaway CA made here with trustme).
Over that listener alone, configured by the ``STREAM_RATER_KAFKA_*`` settings, `publish` sends,
a worker rates, `subscribe` receives, `verify` finds the stream equal to a replay and `void`
re-rates; a wrong password or an unknown CA is a one-line failure naming it. Needs java and
mvn; without them the module skips (under CI=true a skip fails)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization  # trustme's own dependency

from stream_rater.config.settings import env_name
from stream_rater.local.apache_kafka import (
    SASL_MECHANISM,
    ApacheKafkaCluster,
    JavaToolMissing,
    SaslSslListener,
    java_binary,
    kafka_libs,
)
from stream_rater.local.demo import start_worker, stop_process, tagged_settings, wait_ready, worker_env
from stream_rater.local.runtime import free_port
from tests.e2e.e2e_support import worker_test_env
from tests.helpers import assert_gone, cli, duel

pytestmark = pytest.mark.e2e

USER, PASSWORD = "rater", "rater-secret"
MATCHES = 40
#: The JVM starts in seconds on an idle machine; the suite's neighbours slow it down.
STARTUP_TIMEOUT = 180.0


@dataclass(frozen=True)
class SecureKafka:
    """The broker's SASL_SSL address and the file of the CA that signed its certificate."""

    bootstrap: str
    cafile: Path


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """A one-node Apache Kafka with a SASL_SSL listener (user `USER`), its certificate for
    127.0.0.1 issued by a fresh CA; stopped by PID at the end of the module."""
    try:
        java_binary()
        kafka_libs()
    except JavaToolMissing as exc:
        pytest.skip(str(exc))
    workdir = tmp_path_factory.mktemp("secure-kafka")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    listener = SaslSslListener(
        {USER: PASSWORD}, pkcs8.decode(), "".join(pem.bytes().decode() for pem in leaf.cert_chain_pems)
    )
    cafile = workdir / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    cluster = ApacheKafkaCluster(workdir, sasl_ssl=listener, startup_timeout=STARTUP_TIMEOUT)
    cluster.start()
    try:
        yield SecureKafka(cluster.sasl_ssl_bootstrap_servers, cafile)
    finally:
        pids = [child.process.pid for child in cluster.children]
        cluster.stop()
        assert_gone(pids)


def security_env(kafka: SecureKafka, password: str = PASSWORD, cafile: Path | None = None) -> dict[str, str]:
    """The ``STREAM_RATER_*`` variables of a SASL_SSL connection to `kafka` (its broker URL too)."""
    return {
        env_name("broker"): f"kafka://{kafka.bootstrap}",
        env_name("kafka_security_protocol"): "SASL_SSL",
        env_name("kafka_sasl_mechanism"): SASL_MECHANISM,
        env_name("kafka_sasl_username"): USER,
        env_name("kafka_sasl_password"): password,
        env_name("kafka_ssl_cafile"): str(cafile or kafka.cafile),
    }


def events(lines: str) -> list[dict]:
    """The JSON lines `subscribe` printed."""
    return [json.loads(line) for line in lines.splitlines()]


def test_publish_worker_subscribe_verify_and_void_over_sasl_ssl(
    secure_kafka: SecureKafka, redis_url: str, unique_name: str, tmp_path: Path
):
    """Every Kafka client of the service on the SASL_SSL listener: `publish` sends the matches,
    a worker rates them, `subscribe` receives one rating change per player per match, `verify`
    finds the worker's states equal to a replay of the topic, `void` re-rates without a match
    (its correction events reach `subscribe`) and `verify` agrees again."""
    ladder = unique_name
    settings = tagged_settings(
        unique_name,
        broker=f"kafka://{secure_kafka.bootstrap}",
        redis_url=redis_url,
        partitions=1,
        web_port=free_port(),
    )
    extra = {**security_env(secure_kafka), **worker_test_env([ladder], tmp_path / "faust-data")}
    env = worker_env(settings, extra)
    rng = random.Random(23)
    players = [f"p{i}" for i in range(8)]
    matches = [duel(f"m{i}", *rng.sample(players, 2), ladder=ladder) for i in range(MATCHES)]
    matches_file = tmp_path / "matches.jsonl"
    matches_file.write_text("".join(json.dumps(m) + "\n" for m in matches))
    subscribe = ("subscribe", "--from-beginning", "--ladder", ladder, "--idle-timeout", "60", "--count")
    verify = ("verify", "--ladder", ladder, "--store", redis_url)

    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = start_worker(settings, extra, log)
        try:
            wait_ready(worker, f"http://127.0.0.1:{settings.web_port}/readyz", STARTUP_TIMEOUT)
            published = cli("publish", str(matches_file), env=env, check=True)
            assert published.stderr.startswith(f"sent {MATCHES} match events"), published.stderr

            rated = events(cli(*subscribe, str(2 * MATCHES), env=env, check=True).stdout)
            assert sorted(e["event_id"] for e in rated) == sorted(
                f"{m['match_id']}:{team['players'][0]['id']}" for m in matches for team in m["teams"]
            )
            verified = cli(*verify, env=env, check=True).stdout
            players_rated = len({e["player_id"] for e in rated})
            summary = (
                f"{MATCHES} matches from the topic (0 invalid records skipped, 0 the model could not rate); "
                f"{players_rated} players, none differ from the replay"
            )
            assert verified.splitlines() == [f"ladder {ladder!r}: {summary}"], verified

            voided = cli("void", "m3", "--reason", "proof", "--ladder", ladder, "--json", env=env, check=True)
            report = json.loads(voided.stdout)
            assert report["voided"] == ["m3"]
            # Every event so far (the void's corrections were sent before it returned; a re-rate
            # may repeat the worker's last batch's events ahead of them: at least once).
            everything = ("subscribe", "--from-beginning", "--ladder", ladder, "--idle-timeout", "5")
            fixes = [e for e in events(cli(*everything, env=env, check=True).stdout) if "correction" in e]
            assert len(fixes) == report["corrections"] > 0
            assert all(e["correction"]["voided"] == ["m3"] for e in fixes), fixes
            again = cli(*verify, env=env, check=True)
            assert again.stdout.strip().endswith(" players, none differ from the replay"), again.stdout
        finally:
            code = stop_process(worker)
    assert code == 0, log_path.read_text()[-4000:]


@pytest.mark.parametrize("command", ["publish", "subscribe", "verify"])
@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        pytest.param("password", " refused the SASL credentials (--kafka-sasl-username", id="wrong-password"),
        pytest.param(
            "ca", ": TLS certificate verification failed (unable to get local issuer", id="unknown-ca"
        ),
    ],
)
def test_a_wrong_password_or_an_unknown_ca_is_one_line(
    secure_kafka: SecureKafka, redis_url: str, tmp_path: Path, command: str, wrong: str, says: str
):
    """A wrong SASL password, or a CA file of another CA: exit 1 and one stderr line naming the
    broker, what failed and the setting to check; no traceback."""
    other_ca = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    env = security_env(
        secure_kafka,
        password="not-the-password" if wrong == "password" else PASSWORD,
        cafile=other_ca if wrong == "ca" else None,
    )
    matches_file = tmp_path / "one.jsonl"
    matches_file.write_text(json.dumps(duel("m1", "a", "b")) + "\n")
    args = {
        "publish": [str(matches_file)],
        "subscribe": ["--count", "1"],
        "verify": ["--ladder", "default", "--store", redis_url],
    }[command]
    result = cli(command, *args, env=env, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"stream-rater {command}: Kafka broker {secure_kafka.bootstrap}{says}"), lines
