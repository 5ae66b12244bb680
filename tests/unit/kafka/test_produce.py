"""Every producer of ours waits for all in-sync replicas (acks=all) so that an acknowledged
record survives a broker failover."""

from __future__ import annotations

import stream_rater.kafka.produce
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.kafka.produce import PRODUCER_ACKS, new_producer
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
