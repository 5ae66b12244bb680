"""Every producer of ours waits for all in-sync replicas (acks=all) so that an acknowledged
record survives a broker failover, and sends a keyed record to the partition Kafka's default
partitioner (murmur2) would."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner

import stream_rater.kafka.produce
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.kafka.produce import PRODUCER_ACKS, keyed_partition, new_producer
from stream_rater.service.app import create_app
from stream_rater.store.memory import MemoryStore

SETTINGS = Settings(broker="kafka://127.0.0.1:9", consumer_group="acks-test")


def test_our_producers_wait_for_all_in_sync_replicas(monkeypatch):
    made: list[dict] = []
    monkeypatch.setattr(
        stream_rater.kafka.produce, "AIOKafkaProducer", lambda **options: made.append(options)
    )
    new_producer(SETTINGS, max_batch_size=1024)
    assert PRODUCER_ACKS == "all" and made[0]["acks"] == "all" and made[0]["max_batch_size"] == 1024


def test_the_worker_app_producer_waits_for_all_in_sync_replicas():
    app = create_app(SETTINGS, Ladders([Ladder("default", "trueskill")]), store=MemoryStore())
    assert app.conf.producer_acks == -1 and app.producer.acks == -1  # faust's form of "all"


#: Partitions of 1,000 the Java client's default partitioner gives these keys (as published with
#: kafka-python's murmur2 port, checked against ``org.apache.kafka.clients.producer``).
JAVA_PARTITIONS = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}


def test_keyed_partitions_are_the_java_clients():
    assert {key: keyed_partition(key, range(1000)) for key in JAVA_PARTITIONS} == JAVA_PARTITIONS


def test_keyed_partitions_are_aiokafkas_default_partitioners_for_any_key_and_partition_count():
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randrange(60)) for _ in range(5000)] + [f"l:p{i}".encode() for i in range(5000)]
    for count in (1, 2, 3, 8, 100):
        partitions = list(range(count))
        ours = [keyed_partition(key, partitions) for key in keys]
        assert ours == [DefaultPartitioner()(key, partitions, partitions) for key in keys]
