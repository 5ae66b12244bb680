"""Clients we did not write on `dev`'s default broker, the session's Tansu, as `dev`'s startup
note says (`tansu_clients_note`): librdkafka from `TANSU_MIN_LIBRDKAFKA` on (confluent-kafka's
bundled one) produces, and its group consumer, with ``session.timeout.ms=6000``, gets its
partitions and reads; kcat works exactly when its librdkafka is that new (Debian 12's, 2.0.2,
is refused with 'ApiVersionRequest failed'). And `stream-rater subscribe`, which joins no group,
says when it waits for the topic's partitions and when it reads them, so it never looks stuck."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid

import pytest

from stream_rater.cli.stream import TANSU_MIN_LIBRDKAFKA
from tests.e2e.clients_support import kcat
from tests.helpers import cli

pytestmark = pytest.mark.e2e

__all__ = ["kcat"]  # a fixture of clients_support

#: A group consumer's session timeout the note recommends: Tansu completes a join after half of
#: it (3 s), where librdkafka's default (45 s) takes 23 s.
SESSION_TIMEOUT_MS = 6000
EVENT = {"event_id": "m1:alice", "ladder": "chess", "player_id": "alice"}


def version(text: str) -> tuple[int, ...]:
    """``2.16.0`` → ``(2, 16, 0)``."""
    return tuple(int(part) for part in text.split(".")[:3])


@pytest.fixture(scope="module")
def published(tansu_bootstrap: str) -> str:
    """A topic of its own holding one record, produced by confluent-kafka (acks=all,
    idempotent, key = ladder, as "Publish from any language" says); its name."""
    from confluent_kafka import Producer, libversion

    assert version(libversion()[0]) >= TANSU_MIN_LIBRDKAFKA, libversion()  # the claim's client
    topic = f"tansu-clients-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": tansu_bootstrap, "acks": "all", "enable.idempotence": True})
    outcomes: list[object] = []
    producer.produce(
        topic, json.dumps(EVENT).encode(), key=b"chess:alice", on_delivery=lambda e, _: outcomes.append(e)
    )
    assert producer.flush(30) == 0 and outcomes == [None], outcomes
    return topic


def test_librdkafka_of_the_notes_version_produces_and_its_group_consumer_reads(
    tansu_bootstrap: str, published: str
):
    """confluent-kafka's group consumer (subscribe) gets its partitions and reads the record,
    well within the 23 s librdkafka's default session timeout would take."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": tansu_bootstrap,
            "group.id": f"{published}-group",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
        }
    )
    consumer.subscribe([published])
    deadline = time.monotonic() + 15  # a join in half the session timeout (3 s) and a fetch
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                assert json.loads(message.value()) == EVENT
                return
        pytest.fail(f"no record within 15 s (assignment: {consumer.assignment()})")
    finally:
        consumer.close()


def test_kcat_talks_to_tansu_exactly_when_its_librdkafka_is_new_enough(tansu_bootstrap: str, kcat: str):
    """kcat -V names its librdkafka; kcat produces to Tansu if and only if that is at least
    `TANSU_MIN_LIBRDKAFKA`, and an older one fails on ApiVersions, as the note says."""
    about = subprocess.run([kcat, "-V"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"librdkafka (\d+\.\d+\.\d+)", about)
    assert found, about
    done = subprocess.run(
        [
            kcat,
            "-P",
            "-b",
            tansu_bootstrap,
            "-t",
            f"kcat-{uuid.uuid4().hex[:8]}",
            "-X",
            "socket.timeout.ms=10000",
        ],
        input=b"probe\n",
        capture_output=True,
        timeout=60,
    )
    new_enough = version(found.group(1)) >= TANSU_MIN_LIBRDKAFKA
    assert (done.returncode == 0) == new_enough, (found.group(1), done.stderr[-1000:])
    assert new_enough or b"ApiVersionRequest failed" in done.stderr, done.stderr[-1000:]


def test_subscribe_says_when_it_waits_for_partitions_and_when_it_reads_them(
    tansu_bootstrap: str, published: str
):
    """Its stderr tells each step, then the event comes on stdout."""
    flags = ("--broker", f"kafka://{tansu_bootstrap}", "--topic-updates", published)
    result = cli("subscribe", *flags, "--from-beginning", "--count", "1", check=True, timeout=60)
    assert json.loads(result.stdout) == EVENT
    waiting, reading = result.stderr.splitlines()
    assert waiting == f"stream-rater subscribe: connected; waiting for the partitions of {published}"
    assert re.fullmatch(
        rf"stream-rater subscribe: reading {published} partitions [0-9,]+ from the oldest retained event; "
        "waiting for events",
        reading,
    ), reading
