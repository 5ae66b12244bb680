"""A record batch the worker cannot decode (here: its CRC does not match) never kills it: the
partition that holds it is held with /readyz naming it, the other partitions go on.

On a Tansu of its own: Apache Kafka validates every batch on produce (a corrupt one is refused
with CORRUPT_MESSAGE), so only a broker that stores what it is sent, or a disk that corrupts
it, hands one to a consumer."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from stream_rater.kafka import bootstrap_servers, create_topics, home_partition
from stream_rater.local.runtime import LocalRuntime
from tests.e2e.e2e_support import readiness
from tests.e2e.streams import by_event_id, decoded, exact, replay_events
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def broker_url() -> Iterator[str]:
    """A Tansu of this module's own (whatever broker the session uses)."""
    with LocalRuntime(broker="tansu", redis=False) as runtime:
        yield runtime.broker_url


def corrupt_batch() -> bytes:
    """A record batch of three records whose last payload byte was flipped after its CRC."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 16,
    )
    for offset in range(3):
        builder.append(offset, timestamp=None, key=b"k", value=b'{"match_id": "corrupt"}', headers=[])
    raw = bytearray(builder.build())
    raw[-3] ^= 0xFF
    return bytes(raw)


async def produce_raw(broker_url: str, topic: str, partition: int, batch: bytes) -> int:
    """Append `batch` as it is (no client-side checks) to `topic`'s `partition`; the broker's
    error code (0: stored)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers(broker_url))
    await client.bootstrap()
    try:
        await client._metadata_update(client.cluster, [topic])
        leader = client.cluster.leader_for_partition(TopicPartition(topic, partition))
        response = await client.send(
            leader, ProduceRequest(None, -1, 10_000, [(topic, [(partition, batch)])])
        )
        [(_, [(_, error, *_)])] = response.topics
        return int(error)
    finally:
        await client.close()


def test_a_corrupt_batch_holds_its_partition_and_the_others_go_on(stream_factory, broker_url: str):
    """A batch with a bad CRC first on one ladder's partition: the worker stays up, /readyz
    names the partition and offset, the other ladder's matches are all rated exactly as a
    replay, and nothing of the held ladder is applied."""
    stream = stream_factory(partitions=2, ladders=2)
    held, going = stream.names
    partition = home_partition(held, 2)
    assert home_partition(going, 2) != partition
    worker = stream.start_worker()
    error = asyncio.run(produce_raw(broker_url, stream.settings.topic_matches, partition, corrupt_batch()))
    assert error == 0, f"the broker refused the batch (error {error})"
    matches = [
        stream.match(f"m{i}", f"p{i % 7}", f"p{(i + 3) % 7}", at=1_700_000_000.0 + i, ladder=ladder)
        for i in range(40)
        for ladder in (held, going)
    ]
    stream.publish(matches)
    topic = f"{stream.settings.topic_matches}[{partition}]@0"
    port = stream.web_ports[0]
    wait_for(
        lambda: worker.poll() is not None or topic in readiness(port)[1].get("reason", ""),
        "/readyz naming the held partition",
        60,
    )
    assert worker.poll() is None, f"the worker died: see {stream.tmp}/worker-0.log"
    status, body = readiness(port)
    assert status == 503 and "cannot be decoded" in body["reason"] and "Invalid CRC" in body["reason"]
    wait_for(lambda: len(stream.states(going)) == 7 and stream.applied() >= 40, "the other ladder rated", 60)
    expected, states = replay_events(stream, [m for m in matches if m["ladder"] == going])
    assert exact(stream.all_states()) == exact({**states, held: {}})
    assert by_event_id(decoded(stream.updates(expected=len(expected)))) == by_event_id(expected)
    assert worker.poll() is None, "the worker must not die"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert "\nstream_rater_partitions_held 1.0\n" in response.read().decode()


@pytest.mark.apache_kafka(only=True)
def test_apache_kafka_refuses_a_corrupt_batch_on_produce(apache_broker_url: str, unique_name: str):
    """Why the test above runs on Tansu: Apache Kafka validates each batch's CRC on produce and
    refuses a corrupt one (CORRUPT_MESSAGE, error 2), so through it a worker only meets one that
    a disk corrupted afterwards."""
    topic = f"matches-{unique_name}"
    asyncio.run(create_topics(apache_broker_url, {topic: 1}))
    assert asyncio.run(produce_raw(apache_broker_url, topic, 0, corrupt_batch())) == 2
