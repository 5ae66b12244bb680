"""The archive against a real PostgreSQL and a Kafka-protocol broker: every event once under
redelivery and out-of-order partitions, poison records counted and skipped, PostgreSQL down or
refusing writes without losing anything, migrations idempotent."""

from __future__ import annotations

import asyncio
import random

import psycopg
import pytest

from stream_rater.archive import ArchiveSchemaError, archived_event, migrate, schema_version, write_batch
from stream_rater.config.settings import Settings
from stream_rater.contracts.codecs import encode_event
from stream_rater.local.postgres import LocalPostgres
from stream_rater.waiting import wait_until_async
from tests.archive_support import (
    archived,
    correction,
    count,
    events,
    metric,
    records,
    running_archiver,
    send,
    wait_count,
)


def settings_of(kafka_bootstrap: str, topic: str) -> Settings:
    return Settings(broker=f"kafka://{kafka_bootstrap}", topic_updates=topic, session_timeout=3.0)


async def test_migrations_applied_twice_are_a_no_op(archive_url, tmp_path):
    async with await psycopg.AsyncConnection.connect(archive_url) as conn:
        assert await schema_version(conn) == 0
        assert await migrate(conn) == [1, 2]
        assert await migrate(conn) == []
        assert await schema_version(conn) == 2
        newer = tmp_path / "0001_events.sql"
        newer.write_text("SELECT 1")
        await conn.execute("INSERT INTO schema_version (version, name) VALUES (7, 'future')")
        await conn.commit()
        with pytest.raises(ArchiveSchemaError, match="newer than this stream-rater knows"):
            await migrate(conn)


async def test_batches_written_twice_and_partitions_in_any_order_keep_each_event_once(archive_url):
    evs = [*events("lad", 30), correction("lad", "p1")]
    batch = [archived_event(encode_event(e), "t", i % 3, i // 3) for i, e in enumerate(evs)]
    async with await psycopg.AsyncConnection.connect(archive_url) as conn:
        await migrate(conn)
        by_partition = {p: [b for b in batch if b.partition == p] for p in range(3)}
        assert await write_batch(conn, by_partition[2] + by_partition[0]) == len(
            by_partition[2] + by_partition[0]
        )
        assert await write_batch(conn, batch) == len(by_partition[1])  # a redelivery of everything
        shuffled = batch[:]
        random.Random(7).shuffle(shuffled)
        assert await write_batch(conn, shuffled + shuffled) == 0
    assert sorted(archived(archive_url)) == sorted(
        ("lad", e.get("kind", "match"), e["event_id"]) for e in evs
    )


def test_every_event_once_under_redelivery_from_the_topic(
    kafka_bootstrap, topic_factory, archive_url, unique_name
):
    topic = topic_factory(partitions=4)
    asyncio.run(
        _every_event_once_under_redelivery_from_the_topic(topic, kafka_bootstrap, archive_url, unique_name)
    )


async def _every_event_once_under_redelivery_from_the_topic(topic, kafka_bootstrap, archive_url, unique_name):
    settings = settings_of(kafka_bootstrap, topic)
    evs = events(unique_name, 200, players=17)
    await send(settings, records(topic, evs))
    await send(settings, records(topic, evs[50:120]))  # a worker's redelivery re-emits them
    async with running_archiver(settings, archive_url, f"{unique_name}-a"):
        await wait_count(archive_url, len(evs))
    duplicates = metric("stream_rater_archive_events_duplicate_total")
    async with running_archiver(settings, archive_url, f"{unique_name}-b"):  # a new group: all again
        await wait_until_async(
            lambda: _at_least("stream_rater_archive_events_duplicate_total", duplicates + 270),
            "the second group to have read everything",
            60,
        )
    assert count(archive_url) == len(evs)


async def _at_least(name: str, value: float, **labels: str) -> bool:
    return metric(name, **labels) >= value


def test_a_poison_record_is_counted_and_skipped(kafka_bootstrap, topic_factory, archive_url, unique_name):
    topic = topic_factory(partitions=1)
    asyncio.run(_a_poison_record_is_counted_and_skipped(topic, kafka_bootstrap, archive_url, unique_name))


async def _a_poison_record_is_counted_and_skipped(topic, kafka_bootstrap, archive_url, unique_name):
    settings = settings_of(kafka_bootstrap, topic)
    evs = events(unique_name, 5)
    poison = [(topic, b"k", b"\x00\x01 not an event", []), (topic, b"k", b'{"event_id": "x"}', [])]
    nul = dict(evs[0], event_id="m0:p\u0000", player_id="p\u0000")  # PostgreSQL text cannot hold NUL
    before = metric("stream_rater_archive_poison_records_total")
    await send(settings, [*records(topic, evs[:3]), *poison, *records(topic, [nul, *evs[3:]])])
    async with running_archiver(settings, archive_url, unique_name):
        await wait_count(archive_url, len(evs))
        await wait_until_async(
            lambda: _at_least("stream_rater_archive_poison_records_total", before + 3), "3 poison records", 30
        )
    assert metric("stream_rater_archive_poison_records_total") == before + 3


@pytest.fixture
def own_postgres():
    """A PostgreSQL of this test alone (it is stopped and restarted), stopped by PID afterwards."""
    with LocalPostgres() as pg:
        yield pg


def test_postgres_down_then_back_loses_nothing(kafka_bootstrap, topic_factory, own_postgres, unique_name):
    topic = topic_factory(partitions=2)
    asyncio.run(_postgres_down_then_back_loses_nothing(topic, kafka_bootstrap, own_postgres, unique_name))


async def _postgres_down_then_back_loses_nothing(topic, kafka_bootstrap, own_postgres, unique_name):
    settings = settings_of(kafka_bootstrap, topic)
    url = own_postgres.url
    async with running_archiver(settings, url, unique_name):
        await send(settings, records(topic, events(unique_name, 20)))
        await wait_count(url, 40)
        failures = metric("stream_rater_archive_write_failures_total", reason="sqlstate_08")
        own_postgres.stop_server()
        await send(settings, records(topic, events(unique_name, 30, start=20)))
        await wait_until_async(lambda: _failed_since(failures), "a failed write while PostgreSQL is down", 30)
        await asyncio.to_thread(own_postgres.restart)
        await wait_count(url, 100)
        own_postgres.kill()  # a crash this time, then back
        await send(settings, records(topic, events(unique_name, 10, start=50)))
        await asyncio.to_thread(own_postgres.restart)
        await wait_count(url, 120)


async def _failed_since(before: float) -> bool:
    from prometheus_client import REGISTRY

    total = sum(
        s.value
        for m in REGISTRY.collect()
        if m.name == "stream_rater_archive_write_failures"
        for s in m.samples
        if s.name.endswith("_total")
    )
    return total > before


def test_a_read_only_postgres_holds_the_batch_until_it_takes_writes(
    kafka_bootstrap, topic_factory, archive_url, postgres_url, unique_name
):
    topic = topic_factory(partitions=2)
    asyncio.run(
        _a_read_only_postgres_holds_the_batch_until_it_takes_writes(
            topic, kafka_bootstrap, archive_url, postgres_url, unique_name
        )
    )


async def _a_read_only_postgres_holds_the_batch_until_it_takes_writes(
    topic, kafka_bootstrap, archive_url, postgres_url, unique_name
):
    settings = settings_of(kafka_bootstrap, topic)
    db = archive_url.rsplit("/", 1)[1]
    async with running_archiver(settings, archive_url, unique_name):
        await send(settings, records(topic, events(unique_name, 10)))
        await wait_count(archive_url, 20)
        refused = metric("stream_rater_archive_write_failures_total", reason="sqlstate_25")
        _admin(postgres_url, f'ALTER DATABASE "{db}" SET default_transaction_read_only = on', db)
        await send(settings, records(topic, events(unique_name, 10, start=10)))
        await wait_until_async(
            lambda: _at_least("stream_rater_archive_write_failures_total", refused + 2, reason="sqlstate_25"),
            "writes refused as read-only",
            30,
        )
        assert count(archive_url) == 20
        _admin(postgres_url, f'ALTER DATABASE "{db}" RESET default_transaction_read_only', db)
        await wait_count(archive_url, 40)


def _admin(server_url: str, statement: str, db: str) -> None:
    """Run `statement`, then end the sessions of `db` so that new ones see the change."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(statement.encode())
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (db,))
