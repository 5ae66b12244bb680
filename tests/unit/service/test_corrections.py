"""The worker's correction task: its consumer joins its group with the worker's session
timeout, and is stopped however the task ends."""

from __future__ import annotations

import asyncio

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.service import corrections
from stream_rater.service.corrections import CorrectionHandler
from stream_rater.store.memory import MemoryStore


class StartingForever:
    """An `AIOKafkaConsumer` stand-in whose start never ends (a broker slow to answer); it
    sets `starting` when its start begins."""

    starting: asyncio.Event

    def __init__(self, *topics: str, **options: object) -> None:
        self.options = options
        self.stopped = False

    async def start(self) -> None:
        self.starting.set()
        await asyncio.Event().wait()

    async def stop(self) -> None:
        self.stopped = True


async def test_a_stop_during_the_consumers_start_stops_the_consumer(monkeypatch: pytest.MonkeyPatch):
    made: list[StartingForever] = []
    StartingForever.starting = asyncio.Event()
    monkeypatch.setattr(
        corrections, "AIOKafkaConsumer", lambda *a, **o: made.append(StartingForever(*a, **o)) or made[-1]
    )

    async def send(records: object) -> None:
        return None

    handler = CorrectionHandler(
        Settings(broker="kafka://127.0.0.1:9", session_timeout=4.5),
        Ladders([Ladder("default", "trueskill")]),
        send,
        MemoryStore,
    )
    task = asyncio.ensure_future(handler.consume())
    await asyncio.wait_for(StartingForever.starting.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert made[0].stopped
    # Tansu hands a new member its partitions after half the session timeout; aiokafka's own
    # 10 s made a worker stopped within 5 s of its start wait for that join.
    assert made[0].options["session_timeout_ms"] == 4500
    assert made[0].options["heartbeat_interval_ms"] == 1500
