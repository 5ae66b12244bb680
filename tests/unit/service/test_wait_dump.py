"""The SIGUSR1 dump: each task's await chain down to what it waits on, and one line per
batch the pipeline holds (where it is, its records)."""

from __future__ import annotations

import asyncio
import logging

from stream_rater.service.batch_handler import CommittedBatch
from stream_rater.service.pipeline import BatchPipeline
from stream_rater.service.wait_dump import dump, spans
from tests.unit.service.consumed import Record


class StuckHandler:
    """A handler whose commit waits until `release` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def commit(self, messages, *, narrow=False):
        await self.wait_for_redis()
        return CommittedBatch(messages, None, [], 0.0)  # type: ignore[arg-type]

    async def emit(self, batch):
        return None

    async def wait_for_redis(self) -> None:
        await self.release.wait()


async def test_the_dump_names_the_stuck_batch_and_the_frame_it_waits_in(caplog):
    handler = StuckHandler()
    pipeline = BatchPipeline(handler, ack=lambda messages: None)  # type: ignore[arg-type]
    await pipeline.submit([Record(0, 7), Record(0, 8), Record(2, 3)])
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, "stream_rater.service.wait_dump"):
        dump([("worker", asyncio.get_running_loop())], [pipeline.in_flight])
    lines = [r.getMessage() for r in caplog.records]
    assert any("pipeline batch p0@7-8(2) p2@3-3(1) for" in line and "committing" in line for line in lines)
    assert any("_commit@" in line and "wait_for_redis@" in line for line in lines), lines
    handler.release.set()
    await pipeline.drain()
    assert pipeline.in_flight() == [pipeline.in_flight()[-1]], "only the summary line once drained"


def test_spans_group_offsets_by_partition():
    assert spans([Record(1, 5), Record(0, 2), Record(1, 6)]) == "p0@2-2(1) p1@5-6(2)"
    assert spans([]) == "(none)"
