"""What the client-conformance tests (test_producers, test_clients) share: Kafka's Java console
tools and kcat, found once per module, and reading rating-changed events back with them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from stream_rater.config.settings import Settings
from stream_rater.kafka import bootstrap_servers
from stream_rater.local.apache_kafka import JavaToolMissing, java_binary, kafka_libs
from stream_rater.local.class_archive import JIT_OPTIONS


@pytest.fixture(scope="module")
def tools() -> Path:
    """Kafka's command-line tools' jars (console producer and consumer)."""
    try:
        java_binary()
        return kafka_libs(part="tools")
    except JavaToolMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def kcat() -> str:
    found = shutil.which("kcat")
    if not found:
        pytest.skip("kcat (librdkafka's command-line client; Debian package kcat) is not installed")
    return found


def java_tool(tools: Path, main: str, *args: str) -> list[str]:
    """The command line of one of Kafka's console tools (C1 alone, as the local broker: a
    short run on a shared machine)."""
    return [java_binary(), "-Xmx256m", *JIT_OPTIONS, "-cp", f"{tools}/*", main, *args]


def consumed_by_kcat(settings: Settings, count: int) -> list[dict]:
    """The first `count` rating-changed events, read by librdkafka (kcat -C)."""
    done = subprocess.run(
        ["kcat", "-C", "-b", bootstrap_servers(settings.broker), "-t", settings.topic_updates,
         "-o", "beginning", "-c", str(count), "-q", "-f", "%s\\n", "-X", "isolation.level=read_committed"],
        check=True, timeout=60, capture_output=True,
    )  # fmt: skip
    return [json.loads(line) for line in done.stdout.splitlines()]


def consumed_by_java(tools: Path, settings: Settings, count: int) -> list[dict]:
    """The first `count` rating-changed events, read by Kafka's Java consumer (ConsoleConsumer)."""
    argv = java_tool(
        tools, "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", bootstrap_servers(settings.broker), "--topic", settings.topic_updates,
        "--from-beginning", "--max-messages", str(count), "--timeout-ms", "60000",
        "--consumer-property", "isolation.level=read_committed",
    )  # fmt: skip
    done = subprocess.run(argv, timeout=90, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]
