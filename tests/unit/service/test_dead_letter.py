"""The worker's log of its dead letters: each once, with where, ladder and why, rate-limited."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.processor import Processor
from stream_rater.service.batch_handler import BatchHandler, Topics
from stream_rater.service.batch_metrics import BatchMetrics
from stream_rater.service.dead_letter import DeadLetterLog
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel, poison_model, poisoned

LADDERS = Ladders([Ladder("default", "trueskill"), Ladder("eu", "trueskill")])


@dataclass
class Record:
    """A consumed record as faust's Message presents it."""

    value: bytes
    offset: int
    key: bytes | None = None
    topic: str = "matches"
    partition: int = 2


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def worker(dead_log: DeadLetterLog) -> tuple[BatchHandler, list]:
    sent: list = []

    async def send(records: list) -> None:
        sent.extend(records)

    topics = Topics(updates="updates", dlq="dlq")
    sensor = BatchMetrics(LADDERS, dead_log=dead_log)
    return BatchHandler(Processor(LADDERS, MemoryStore()), send, topics=topics, sensor=sensor), sent


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "stream_rater.service.dead_letter"]


async def test_each_dead_letter_is_logged_once_with_where_ladder_and_reason(caplog):
    caplog.set_level(logging.WARNING)
    handler, sent = worker(DeadLetterLog())
    bad = [
        Record(b"\x00garbage", offset=7),
        Record(json.dumps({"match_id": "x", "ladder": "eu"}).encode(), offset=8),
        Record(json.dumps(duel("m1", "a", "b")).encode(), offset=9),
    ]
    await handler.handle(bad)
    assert [t for t, *_ in sent].count("dlq") == 2
    assert lines(caplog) == [
        (
            "dead letter matches[2]@7: not JSON or msgpack: starts with byte 0x00, expected '{' "
            "(a JSON object) or a msgpack map"
        ),
        "dead letter matches[2]@8 (ladder 'eu'): finished_at: is required",
    ]


async def test_a_match_the_model_cannot_rate_is_logged_once_with_its_traceback(monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    poison_model(monkeypatch, LADDERS, "eu")
    handler, _ = worker(DeadLetterLog())
    await handler.handle([Record(json.dumps(poisoned(duel("p1", "a", "b", ladder="eu"))).encode(), offset=3)])
    [record] = [r for r in caplog.records if "p1" in r.getMessage() or "matches[2]@3" in r.getMessage()]
    assert record.getMessage().startswith("dead letter matches[2]@3 (ladder 'eu'): ") and record.exc_info


async def test_beyond_the_burst_dead_letters_are_counted_and_summed_up_once_the_interval_ends(caplog):
    caplog.set_level(logging.WARNING)
    clock = Clock()
    handler, _ = worker(DeadLetterLog(burst=3, interval=60.0, clock=clock))
    await handler.handle([Record(b"{}", offset=i) for i in range(10)])
    assert len(lines(caplog)) == 3
    clock.now = 61.0
    await handler.handle([Record(b"{}", offset=10)])
    assert lines(caplog)[3:] == [
        "… and 7 more dead letters in the last 61 s",
        "dead letter matches[2]@10: match_id: is required",
    ]
