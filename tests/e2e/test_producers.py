"""Producers we do not write, as game services publish: through librdkafka (`kcat`), Kafka's own
Java client (its console producer) and aiokafka, with every compression codec, idempotent
producers, keys and headers, and transactions that commit or abort. Each test ends with the
oracle: the worker's events and states exactly a replay of what was committed to the log,
and the offline tools (``verify``, ``replay --from-topic``) reading the same log agree.

On Apache Kafka alone (needs java and mvn; under CI=true a skip fails): Tansu, the embedded
broker, refuses librdkafka's ApiVersions request and has no transactions."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from aiokafka import AIOKafkaClient, AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords

from stream_rater.config.settings import Settings
from stream_rater.kafka import bootstrap_servers, read_log
from stream_rater.waiting import wait_until_async
from tests.e2e.clients_support import consumed_by_java, consumed_by_kcat, java_tool, kcat, tools
from tests.e2e.e2e_support import worker_test_env
from tests.e2e.streams import Stream, by_event_id, exact, replay_events
from tests.helpers import cli, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

__all__ = ["kcat", "tools"]  # fixtures of clients_support

#: Compression codecs of the Kafka protocol, by the number a record batch's attributes hold.
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
#: Matches per client and codec: enough JSON for librdkafka to find compression worth it (it
#: sends a batch uncompressed when compressing does not make it smaller).
PER_BATCH = 8
#: A header every foreign producer sets (the worker ignores headers; they must not trip it).
HEADER = ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


def publish_kcat(settings: Settings, codec: str, matches: list[dict]) -> None:
    """`matches` through librdkafka: keyed by ladder, a header, idempotent, acks=all, `codec`."""
    lines = "".join(f"{m['ladder']}\t{json.dumps(m)}\n" for m in matches)
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap_servers(settings.broker), "-t", settings.topic_matches,
         "-K", "\t", "-z", codec, "-H", "=".join(HEADER),
         "-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=50"],
        input=lines.encode(), check=True, timeout=60, capture_output=True,
    )  # fmt: skip


def publish_java(tools: Path, settings: Settings, codec: str, matches: list[dict]) -> None:
    """`matches` through Kafka's Java producer (ConsoleProducer): keyed by ladder, a header,
    idempotent, acks=all, `codec`. The tool sets compression.type, linger.ms and acks from its
    own flags, over any --producer-property."""
    lines = "".join(f"{HEADER[0]}:{HEADER[1]}\t{m['ladder']}\t{json.dumps(m)}\n" for m in matches)
    argv = java_tool(
        tools, "org.apache.kafka.tools.ConsoleProducer",
        "--bootstrap-server", bootstrap_servers(settings.broker), "--topic", settings.topic_matches,
        "--property", "parse.key=true", "--property", "parse.headers=true",
        "--compression-codec", codec, "--request-required-acks", "all", "--timeout", "50",
        "--producer-property", "enable.idempotence=true",
    )  # fmt: skip
    done = subprocess.run(argv, input=lines.encode(), timeout=90, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]


async def publish_aiokafka(settings: Settings, codec: str, matches: list[dict]) -> None:
    """`matches` through aiokafka: keyed by ladder, a header, idempotent, acks=all, `codec`."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers(settings.broker),
        compression_type=None if codec == "none" else codec,
        enable_idempotence=True,
        acks="all",
        linger_ms=50,
    )
    await producer.start()
    try:
        for m in matches:
            await producer.send(
                settings.topic_matches,
                json.dumps(m).encode(),
                key=m["ladder"].encode(),
                headers=[(HEADER[0], HEADER[1].encode())],
            )
        await producer.flush()
    finally:
        await producer.stop()


async def batch_codecs(settings: Settings, start: int = 0, topic: str | None = None) -> set[int]:
    """The codecs of the record batches of `topic`'s (default: the matches topic's) partition 0
    from offset `start` to its end, read raw from the broker (what a consumer decompresses)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers(settings.broker))
    await client.bootstrap()
    try:
        tp = TopicPartition(topic or settings.topic_matches, 0)
        await client._metadata_update(client.cluster, [tp.topic])
        leader, codecs, offset, end = client.cluster.leader_for_partition(tp), set(), start, start + 1
        while offset < end:
            request = FetchRequest(100, 1, 8 << 20, 0, [(tp.topic, [(0, offset, 8 << 20)])])
            [(_, [(_, error, end, *rest)])] = (await client.send(leader, request)).topics
            records, before = MemoryRecords(rest[-1]), offset
            while records.has_next():
                batch = records.next_batch()
                codecs.add(batch.compression_type)
                offset = batch.next_offset
            assert error == 0 and offset > before, (error, offset)
        return codecs
    finally:
        await client.close()


async def end_offset(settings: Settings) -> int:
    """The high watermark of the matches topic's partition 0."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers(settings.broker))
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic_matches, 0)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


def duels(stream: Stream, prefix: str, first: int, n: int = PER_BATCH) -> list[dict]:
    """`n` duels among ten players, finished one second apart from match number `first` on."""
    return [
        stream.match(f"{prefix}-{i}", f"p{i % 10}", f"p{(3 * i + 1) % 10}", at=1_700_000_000.0 + first + i)
        for i in range(n)
    ]


def rated(stream: Stream, count: int, what: str) -> None:
    """Wait until `count` matches are applied; fail at once, with the log, if the worker died."""
    [worker] = stream.workers
    log = stream.tmp / "worker-0.log"
    wait_for(lambda: worker.poll() is not None or stream.applied() >= count, what, timeout=60)
    assert worker.poll() is None, f"the worker died ({what}):\n{log.read_text()[-3000:]}"
    assert stream.applied() == count, what


def offline_tools_agree(stream: Stream, expected: list[dict]) -> None:
    """`verify` finds the store equal to a replay of the matches topic, and `replay
    --from-topic` emits `expected` (both read the topic as the worker did)."""
    settings, env = stream.settings, worker_test_env(stream.names, stream.tmp / "cli-data")
    topic = ["--broker", settings.broker, "--topic-matches", settings.topic_matches]
    cli("verify", "--ladder", stream.ladder, "--store", settings.redis_url, *topic,
        "--consumer-group", settings.consumer_group, env=env, check=True)  # fmt: skip
    out = stream.tmp / "replayed.jsonl"
    cli("replay", "--from-topic", "--ladder", stream.ladder, "--store", "memory", *topic,
        "--out", str(out), env=env, check=True)  # fmt: skip
    replayed = [json.loads(line) for line in out.read_text().splitlines()]
    assert by_event_id(replayed) == by_event_id(expected)


async def compress_on_the_broker(settings: Settings, *topics: str) -> None:
    """Make the broker store `topics` zstd-compressed, whatever their producer sends (an
    operator's topic setting): what the worker writes there is then read back compressed."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers(settings.broker))
    await admin.start()
    try:
        configs = {"compression.type": "zstd"}
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t, configs=configs) for t in topics]
        )
    finally:
        await admin.close()


def test_every_client_and_codec_is_rated_and_read_back_by_every_client(stream_factory, kcat, tools):
    """aiokafka, librdkafka (kcat) and Kafka's Java producer each publish matches with every
    codec (none, gzip, snappy, lz4, zstd), keyed by ladder, with a header, idempotent and
    acks=all, to one worker: each batch is stored compressed as asked and rated; the
    rating-changed events (stored zstd-compressed by the broker) read back by kcat, by the
    Java consumer and by `subscribe`, and the stored states, are exactly a replay's; `verify`
    and `replay --from-topic` agree; an lz4-compressed invalid record is dead-lettered and
    `dlq list` (its topic zstd too) shows it."""
    stream = stream_factory(partitions=1)
    settings = stream.settings
    asyncio.run(compress_on_the_broker(settings, settings.topic_updates, settings.topic_dlq))
    stream.start_worker()
    publishers = {
        "aiokafka": lambda codec, batch: asyncio.run(publish_aiokafka(stream.settings, codec, batch)),
        "kcat": lambda codec, batch: publish_kcat(stream.settings, codec, batch),
        "java": lambda codec, batch: publish_java(tools, stream.settings, codec, batch),
    }
    sent: list[dict] = []
    for client, publish in publishers.items():
        for codec in CODECS:
            batch = duels(stream, f"{client}-{codec}", len(sent))
            start = asyncio.run(end_offset(stream.settings))
            publish(codec, batch)
            sent += batch
            rated(stream, len(sent), f"{client} with {codec}: all rated")
            stored = asyncio.run(batch_codecs(stream.settings, start))
            assert stored == {CODECS[codec]}, f"{client} with {codec}: batches stored with codecs {stored}"
    expected, states = replay_events(stream, sent)
    assert exact(stream.all_states()) == exact(states)
    assert by_event_id(consumed_by_kcat(settings, len(expected))) == by_event_id(expected)
    assert by_event_id(consumed_by_java(tools, settings, len(expected))) == by_event_id(expected)
    assert asyncio.run(batch_codecs(settings, topic=settings.topic_updates)) == {CODECS["zstd"]}
    flags = ["--broker", settings.broker, "--topic-updates", settings.topic_updates]
    subscribed = cli("subscribe", "--from-beginning", "--count", str(len(expected)), *flags, check=True)
    assert by_event_id([json.loads(line) for line in subscribed.stdout.splitlines()]) == by_event_id(expected)
    offline_tools_agree(stream, expected)
    dead_letter_listed(stream)


def dead_letter_listed(stream: Stream) -> None:
    """An invalid record, lz4-compressed by kcat, is dead-lettered with its reason and origin,
    and `dlq list` reads it back from the (zstd) dead-letter topic."""
    settings = stream.settings
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap_servers(settings.broker), "-t", settings.topic_matches,
         "-K", "\t", "-z", "lz4", "-H", "=".join(HEADER)],
        input=f"{stream.ladder}\t{'not a match ' * 20}\n".encode(), check=True, timeout=60, capture_output=True,
    )  # fmt: skip
    flags = [
        "--broker",
        settings.broker,
        "--topic-matches",
        settings.topic_matches,
        "--topic-dlq",
        settings.topic_dlq,
    ]

    def listed() -> list[dict]:
        out = cli("dlq", "list", "--json", *flags, check=True).stdout
        return [json.loads(line) for line in out.splitlines()]

    [letter] = wait_for(listed, "the invalid record dead-lettered and listed", 60)
    headers = letter["headers"]
    assert headers["sr-origin-topic"] == settings.topic_matches and headers[HEADER[0]] == HEADER[1]
    assert headers["sr-reason"] and letter["value"].startswith("not a match")
    assert asyncio.run(batch_codecs(settings, topic=settings.topic_dlq)) == {CODECS["zstd"]}


def test_matches_of_aborted_transactions_are_never_rated(stream_factory):
    """A transactional producer that aborts and one that commits, their records interleaved
    with plain ones, then a committed and an aborted transaction one after the other: the
    worker rates the plain and committed matches in log order, never an aborted one (no
    state, no event), and `verify` and `replay --from-topic` read the same."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    plain, committed = duels(stream, "plain", 0), duels(stream, "committed", 100)
    aborted = [stream.match(f"aborted-{i}", f"ghost{i}", f"ghost{i + 10}") for i in range(6)]
    expected_order = asyncio.run(publish_transactions(stream.settings, plain, committed, aborted))
    rated(stream, len(expected_order), "the plain and committed matches rated")
    expected, states = replay_events(stream, expected_order)
    assert exact(stream.all_states()) == exact(states), "aborted matches must leave no state"
    stream.updates(expected=len(expected))  # all produced: the read below goes to the end
    events = [
        json.loads(r.value) for r in asyncio.run(read_log(stream.settings, stream.settings.topic_updates))[0]
    ]
    assert {e["match_id"] for e in events} == {m["match_id"] for m in expected_order}
    assert by_event_id(events) == by_event_id(expected)
    offline_tools_agree(stream, expected)


async def publish_transactions(
    settings: Settings, plain: list[dict], committed: list[dict], aborted: list[dict]
) -> list[dict]:
    """Publish as the test above says; returns the plain and committed matches in log order."""
    boot = bootstrap_servers(settings.broker)
    producers = [
        AIOKafkaProducer(bootstrap_servers=boot),
        AIOKafkaProducer(bootstrap_servers=boot, transactional_id=f"{settings.topic_matches}-aborts"),
        AIOKafkaProducer(bootstrap_servers=boot, transactional_id=f"{settings.topic_matches}-commits"),
    ]
    simple, aborts, commits = producers
    for producer in producers:
        await producer.start()

    async def send(producer: AIOKafkaProducer, match: dict) -> None:
        await producer.send_and_wait(
            settings.topic_matches, json.dumps(match).encode(), key=match["ladder"].encode()
        )

    order: list[dict] = []
    try:
        await aborts.begin_transaction()
        await commits.begin_transaction()
        for i in range(3):  # interleaved: plain, aborted, committed records while both are open
            await send(simple, plain[i])
            await send(aborts, aborted[i])
            await send(commits, committed[i])
            order += [plain[i], committed[i]]
        await aborts.abort_transaction()
        await commits.commit_transaction()
        await send(simple, plain[3])
        async with commits.transaction():  # one after the other: markers between plain records
            for match in committed[3:6]:
                await send(commits, match)
        await aborts.begin_transaction()
        for match in aborted[3:]:
            await send(aborts, match)
        await aborts.abort_transaction()
        for match in plain[4:]:
            await send(simple, match)
        return order + plain[3:4] + committed[3:6] + plain[4:]
    finally:
        for producer in producers:
            await producer.stop()


def test_a_log_read_ends_at_the_last_stable_offset(stream_factory):
    """`read_log` (replay, verify, re-rates) returns committed records only and does not wait
    for a transaction still open: it stops at the last stable offset, past the markers."""
    stream = stream_factory(partitions=1)
    settings, boot = stream.settings, bootstrap_servers(stream.settings.broker)

    async def settled(offset: int) -> tuple[list, dict[int, int]]:
        """`read_log` once the last stable offset reached `offset`: the coordinator writes a
        commit's markers after the producer's commit returns."""
        read: list[tuple[list, dict[int, int]]] = []

        async def reached() -> bool:
            read[:] = [await read_log(settings, settings.topic_matches, timeout=20)]
            return read[0][1][0] >= offset

        await wait_until_async(reached, f"the last stable offset at {offset}", 60, interval=0.1)
        return read[0]

    async def run() -> None:
        simple = AIOKafkaProducer(bootstrap_servers=boot)
        open_one = AIOKafkaProducer(bootstrap_servers=boot, transactional_id=f"{settings.topic_matches}-open")
        await simple.start()
        await open_one.start()
        try:
            await open_one.begin_transaction()
            await open_one.send_and_wait(settings.topic_matches, b"committed", key=b"k")
            await open_one.commit_transaction()  # its marker is the log's last offset
            records, reached = await settled(2)
            assert [r.value for r in records] == [b"committed"] and reached == {0: 2}
            await open_one.begin_transaction()
            await open_one.send_and_wait(settings.topic_matches, b"open", key=b"k")
            await simple.send_and_wait(settings.topic_matches, b"after", key=b"k")
            records, reached = await read_log(settings, settings.topic_matches, timeout=20)
            assert [r.value for r in records] == [b"committed"] and reached == {0: 2}
            await open_one.commit_transaction()
            records, reached = await settled(5)
            assert [r.value for r in records] == [b"committed", b"open", b"after"] and reached == {0: 5}
        finally:
            await simple.stop()
            await open_one.stop()

    asyncio.run(run())
