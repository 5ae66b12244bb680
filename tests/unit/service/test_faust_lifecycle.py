"""faust's and mode's fixed one-second waits at a worker's start and stop, shortened
(`faust_lifecycle`); no broker needed. Each check's bound is the second it removes: with
faust's or mode's own step it fails whatever the machine's load."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import faust
import pytest
from faust.tables.recovery import Recovery

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.service import faust_lifecycle
from stream_rater.service.app import Worker, create_app
from stream_rater.store.memory import MemoryStore


@pytest.fixture
def app() -> faust.App:
    return create_app(
        Settings(broker="kafka://127.0.0.1:9", consumer_group="lifecycle-test"),
        Ladders([Ladder("default", "trueskill")]),
        store=MemoryStore(),
    )


async def test_the_worker_starts_recovery_without_fausts_wait_for_tables(
    app: faust.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker declares no faust tables; faust's table manager sleeps 1 s for them before
    it starts recovery (and so before the worker joins its group)."""
    recovering: list[Recovery] = []

    async def start(self: Recovery) -> None:
        recovering.append(self)

    monkeypatch.setattr(Recovery, "start", start)
    monkeypatch.setattr(app.consumer, "assignment", set)  # the consumer thread is not started
    monkeypatch.setattr(app.consumer, "pause_partitions", lambda tps: None)
    tables: Any = app.tables
    assert isinstance(tables, faust_lifecycle.TableManager) and not tables
    started = time.monotonic()
    await tables.on_start()
    assert time.monotonic() - started < 1.0  # faust's own start sleeps 1.0 s
    assert recovering == [tables.recovery]
    await asyncio.wait_for(tables.wait_until_tables_registered(), 1.0)


def test_the_worker_closes_its_event_loop_without_modes_second(app: faust.App) -> None:
    """mode turns the event loop 1 s after the stop before it closes it, most of a worker's
    stop; the worker turns it `faust_lifecycle.LAST_TURNS_SECONDS`."""
    loop = asyncio.new_event_loop()
    worker = Worker(app, stop_timeout=5.0, loop=loop)
    started = time.monotonic()
    worker._shutdown_loop()
    assert time.monotonic() - started < 1.0  # mode's own step sleeps 1.0 s
    assert loop.is_closed()
