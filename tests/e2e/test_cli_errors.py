"""Failures as users meet them on the command line: one line naming the flag, parameter,
file or service, the right exit code, no traceback; bad records reported and skipped."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from stream_rater.kafka import bootstrap_servers, create_topics, topic_partitions
from stream_rater.local.runtime import free_port, redis_server_binary, wait_for_port
from tests.helpers import cli, duel

pytestmark = pytest.mark.e2e

GOOD = json.dumps(duel("m1", "a", "b", at=0))


@pytest.fixture
def one_match(tmp_path: Path) -> Path:
    path = tmp_path / "one.jsonl"
    path.write_text(GOOD + "\n")
    return path


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["replay", "--param", "beta=abc"], 2, ["--param beta=abc", "must be real number"]),
        (["ratings", "--store", "redis://127.0.0.1:1/0"], 1, ["Redis", "127.0.0.1:1"]),
        (
            ["leaderboard", "--ladder", "nosuch", "--store", "memory"],
            2,
            [
                (
                    "unknown ladder 'nosuch' (configured: default; "
                    "no ladders file: set STREAM_RATER_LADDERS_FILE or --ladders-file)"
                )
            ],
        ),
        (["publish", "--broker", "kafka://127.0.0.1:1"], 1, ["Kafka broker", "127.0.0.1"]),
        (["replay", "no-such-file.jsonl"], 2, ["no-such-file.jsonl"]),
        (
            ["bench", "scale", "--players", "10", "--total-players", "100"],
            2,
            ["--players and --total-players"],
        ),
        (
            ["bench", "scale", "--ladders", "1,16", "--total-players", "20"],
            2,
            ["--total-players 20: fewer than 2 players per ladder with 16 ladders"],
        ),
        (
            [
                "void",
                "m1",
                "--ladder",
                "default",
                "--reason",
                "r",
                "--via-topic",
                "--lease",
                "5",
                "--broker",
                "kafka://127.0.0.1:1",
            ],
            2,
            ["--lease: not with --via-topic"],
        ),
        (
            [
                "rerate",
                "--ladder",
                "default",
                "--param",
                "beta=-1",
                "--via-topic",
                "--broker",
                "kafka://127.0.0.1:1",
            ],
            2,
            ["--param beta=-1"],
        ),
        (["dev", "--brokers", "3"], 2, ["--brokers 3 needs --embedded-broker apache-kafka"]),
        (
            ["season", "--ladder", "default", "--param", "k=0.5", "--broker", "kafka://127.0.0.1:1"],
            2,
            ["--param: params.k: is not a season parameter"],
        ),
        (
            [
                "season",
                "--ladder",
                "default",
                "--param",
                "season_shrink=2",
                "--via-topic",
                "--broker",
                "kafka://127.0.0.1:1",
            ],
            2,
            ["--param: params.season_shrink: must be a number from 0 to 1"],
        ),
        (["season", "--ladder", "nosuch", "--broker", "kafka://127.0.0.1:1"], 2, ["unknown ladder 'nosuch'"]),
        (
            ["season", "--ladder", "default", "--via-topic", "--broker", "kafka://127.0.0.1:1"],
            2,
            ["ladder 'default' has no season rules: season_shrink and season_sigma are unset"],
        ),
        (
            ["leaderboard", "--season", "1", "--store", "memory"],
            2,
            ["--season: the ladder has had no season start yet"],
        ),
        (["leaderboard", "--top", "0", "--store", "memory"], 2, ["--top: must be an integer from 1 to 500"]),
        *(
            (
                ["migrate", "--to", to, "--store", "memory"],
                2,
                ["--store: only a Redis store has a stored format"],
            )
            for to in "23"
        ),
        (
            [
                "rerate",
                "--ladder",
                "default",
                "--param",
                "provisional_games=3",
                "--via-topic",
                "--broker",
                "kafka://127.0.0.1:1",
            ],
            2,
            ["--param provisional_games: a ladder rule is set in the ladders configuration"],
        ),
    ],
)
def test_a_failure_is_one_line_with_its_exit_code(
    one_match: Path, args: list[str], code: int, says: list[str]
):
    """Each failure: exit 2 for bad usage or input, 1 for an unreachable service; one stderr
    line, `stream-rater <command>: …`, naming what failed; no traceback."""
    extra = [str(one_match)] if args[0] in ("replay", "publish") and len(args) < 3 else []
    result = cli(*args, *extra)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1 and lines[0].startswith(f"stream-rater {args[0]}: "), result.stderr
    assert all(s in lines[0] for s in says) and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["ratings"],
        ["leaderboard"],
        ["predict", "a", "b"],
        ["serve"],
        ["verify", "--ladder", "default", "--broker", "kafka://127.0.0.1:1"],
        ["void", "m1", "--ladder", "default", "--reason", "r", "--broker", "kafka://127.0.0.1:1"],
        ["rerate", "--ladder", "default", "--broker", "kafka://127.0.0.1:1"],
        ["season", "--ladder", "default", "--broker", "kafka://127.0.0.1:1"],
    ],
)
def test_a_command_without_a_store_names_the_flag_and_the_variable(args: list[str]):
    """Neither --store nor STREAM_RATER_REDIS_URL: exit 2, one line naming both, before any
    service is contacted."""
    result = cli(*args, unset=("STREAM_RATER_REDIS_URL",))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"stream-rater {args[0]}: no store: give --store URL or set STREAM_RATER_REDIS_URL"
    ]


def test_debug_shows_the_traceback():
    """--debug re-raises, so the traceback is there for a bug report."""
    result = cli("--debug", "ratings", "--store", "redis://127.0.0.1:1/0")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_publish_creates_the_topics_and_exits_2_when_lines_were_rejected(broker_url: str, tmp_path: Path):
    """Publishing before any worker creates the three topics with --partitions; the good lines
    are sent, the bad one named by file:line, and the exit is 2 — or 0 with --allow-bad-lines."""
    name = uuid.uuid4().hex[:8]
    path = tmp_path / "mixed.jsonl"
    path.write_text(GOOD + "\n{oops\n" + GOOD.replace("m1", "m2") + "\n")
    flags = [
        "--broker",
        broker_url,
        "--partitions",
        "3",
        "--topic-matches",
        f"matches-{name}",
        str(path),
    ]
    # publish has no flags for the topics it does not write; it creates them as the environment names them
    env = {"STREAM_RATER_TOPIC_UPDATES": f"updates-{name}", "STREAM_RATER_TOPIC_DLQ": f"dlq-{name}"}
    strict = cli("publish", *flags, env=env)
    assert strict.returncode == 2 and f"{path}:2:" in strict.stderr and "sent 2 match events" in strict.stderr
    assert cli("publish", "--allow-bad-lines", *flags, env=env).returncode == 0

    async def counts() -> dict[str, int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers(broker_url))
        await consumer.start()
        try:
            return {
                t: len(await topic_partitions(consumer, f"{t}-{name}")) for t in ("matches", "updates", "dlq")
            }
        finally:
            await consumer.stop()

    assert asyncio.run(counts()) == {"matches": 3, "updates": 3, "dlq": 3}


def test_subscribe_reports_a_bad_record_and_prints_the_ones_after_it(broker_url: str):
    """A record that is not a JSON object is named on stderr (topic[partition]@offset); the
    valid events before and after it are printed."""
    topic = f"updates-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(broker_url, {topic: 1}))
    events = [{"event_id": f"m{i}:a", "ladder": "default", "player_id": "a"} for i in range(2)]

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers(broker_url))
        await producer.start()
        try:
            for value in (json.dumps(events[0]).encode(), b"\xff not json", json.dumps(events[1]).encode()):
                await producer.send_and_wait(topic, value, key=b"default:a")
        finally:
            await producer.stop()

    asyncio.run(produce())
    result = cli(
        "subscribe",
        "--broker",
        broker_url,
        "--topic-updates",
        topic,
        "--from-beginning",
        "--idle-timeout",
        "3",
    )
    assert result.returncode == 0, result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()] == events
    assert f"skipped the record at {topic}[0]@1" in result.stderr


def test_dead_letters_are_listed_and_redriven_exactly_once(broker_url: str):
    """`dlq list --reason` shows the matching dead letters with origin and reason; `dlq redrive`
    sends them back to the matches topic keyed by ladder, and a second redrive sends nothing."""
    name = uuid.uuid4().hex[:8]
    dlq, matches = f"dlq-{name}", f"matches-{name}"
    asyncio.run(create_topics(broker_url, {dlq: 1, matches: 1}))
    fixed = json.dumps({**json.loads(GOOD), "ladder": "eu"}).encode()
    letters = [
        (fixed, "processing failed: ZeroDivisionError: boom"),
        (b"{oops", "not JSON or msgpack: ..."),
        (fixed.replace(b"m1", b"m2"), "processing failed: ZeroDivisionError: boom"),
    ]

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers(broker_url))
        await producer.start()
        try:
            for i, (value, reason) in enumerate(letters):
                await producer.send_and_wait(
                    dlq,
                    value,
                    key=b"old-key",
                    headers=[
                        ("sr-reason", reason.encode()),
                        ("sr-origin-topic", matches.encode()),
                        ("sr-origin-partition", b"0"),
                        ("sr-origin-offset", str(10 + i).encode()),
                    ],
                )
        finally:
            await producer.stop()

    asyncio.run(produce())
    flags = [
        "--broker",
        broker_url,
        "--topic-dlq",
        dlq,
        "--topic-matches",
        matches,
        "--reason",
        "processing failed",
    ]
    listed = cli("dlq", "list", *flags)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 2
    assert f"{dlq}[0]@0 from {matches}[0]@10: processing failed: ZeroDivisionError: boom" in listed.stdout
    first, second = cli("dlq", "redrive", *flags), cli("dlq", "redrive", *flags)
    assert "redrove 2 dead letters" in first.stderr and "redrove 0 dead letters" in second.stderr
    assert "2 redriven before" in second.stderr

    async def sent_back() -> list:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers(broker_url), auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            consumer.subscribe([matches])
            records: list = []
            while len(records) < 2:
                for batch in (await consumer.getmany(timeout_ms=2000)).values():
                    records += batch
            return records
        finally:
            await consumer.stop()

    records = asyncio.run(sent_back())
    assert [(r.key, r.value) for r in records] == [(b"eu", letters[0][0]), (b"eu", letters[2][0])]
    assert [dict(r.headers)["sr-redriven-from"] for r in records] == [
        f"{dlq}[0]@0".encode(),
        f"{dlq}[0]@2".encode(),
    ]


@contextlib.contextmanager
def password_redis(tmp_path: Path, port: int, *flags: str) -> Iterator[None]:
    """A redis-server with password ``s3cret``, no persistence and `flags`, listening on `port`
    until the block ends (then killed by PID)."""
    server = subprocess.Popen(
        [
            *(redis_server_binary(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            *("--requirepass", "s3cret", "--dir", str(tmp_path), *flags),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port("127.0.0.1", port, 30)
        yield
    finally:
        server.kill()
        server.wait()


def test_a_password_protected_redis_is_used_with_its_url_and_a_wrong_password_is_one_line(
    tmp_path: Path, one_match: Path
):
    """Against redis-server --requirepass: the password in the URL works; a wrong one is a
    one-line error naming Redis, exit 1. (The bundled redis-server has no TLS; TLS is the
    same URL with rediss://, which redis-py handles.)"""
    port = free_port()
    with password_redis(tmp_path, port, "--port", str(port)):
        ok = cli("replay", "--store", f"redis://:s3cret@127.0.0.1:{port}/0", str(one_match))
        assert ok.returncode == 0 and "1 applied" in ok.stderr
        wrong = cli("ratings", "--store", f"redis://:nope@127.0.0.1:{port}/0")
        lines = wrong.stderr.strip().splitlines()
        assert (
            wrong.returncode == 1 and len(lines) == 1 and lines[0].startswith("stream-rater ratings: Redis: ")
        )
        assert "password" in lines[0].lower() and "Traceback" not in wrong.stderr


def test_redis_over_tls_with_a_password_is_reached_by_a_rediss_url(tmp_path: Path, one_match: Path):
    """A redis-server with TLS only (a throwaway CA made here with openssl) and requirepass: a
    `rediss://` URL with the CA works; without the CA it is a one-line error naming Redis."""
    if not supports_tls(redis_server_binary()):
        pytest.skip(
            f"{redis_server_binary()} is built without TLS: apt-get install redis-server (.ci/run does)"
        )
    ca_key, ca, key, csr, cert = (
        tmp_path / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem")
    )
    for args in (
        [
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            ca_key,
            "-out",
            ca,
            "-days",
            "1",
            "-subj",
            "/CN=test-ca",
        ],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        [
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            ca,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-out",
            cert,
            "-days",
            "1",
        ],
    ):
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
    port = free_port()
    tls = ("--port", "0", "--tls-port", str(port), "--tls-auth-clients", "no")
    files = ("--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca))
    with password_redis(tmp_path, port, *tls, *files):
        url = f"rediss://:s3cret@127.0.0.1:{port}/0"
        ok = cli("replay", "--store", f"{url}?ssl_ca_certs={ca}&ssl_check_hostname=false", str(one_match))
        assert ok.returncode == 0 and "1 applied" in ok.stderr, ok.stderr
        untrusted = cli("ratings", "--store", url)
        lines = untrusted.stderr.strip().splitlines()
        assert (
            untrusted.returncode == 1
            and len(lines) == 1
            and lines[0].startswith("stream-rater ratings: Redis: ")
        )


def supports_tls(binary: str) -> bool:
    """Whether `binary` accepts TLS directives: one built without TLS exits at once with "Bad
    directive"; one with TLS keeps running (no listener: both ports 0) and is stopped here."""
    probe = subprocess.Popen(
        [binary, "--port", "0", "--tls-port", "0", "--save", "", "--appendonly", "no"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = probe.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.wait()
        return True
    return "Bad directive" not in output
