"""The checkpoint loop (``stream-rater checkpoint --loop``): a `Checkpointer` per ladder, a
round each every `interval` seconds. A failed round (the sink or broker down, the store not
answering, a checkpoint that differs from the live ladder) is logged and counted and tried
again at the next one: checkpoints are delayed, live rating — another process — goes on;
``stream_rater_checkpoint_age_seconds`` says how late they are."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from stream_rater.checkpoints import Checkpointer, CheckpointSink, Round, Unverified
from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.service import metrics
from stream_rater.store.base import StateStore

log = logging.getLogger(__name__)


async def checkpoint_rounds(
    settings: Settings,
    ladders: Ladders,
    store: StateStore,
    sink: CheckpointSink,
    names: Sequence[str],
    *,
    force: bool = False,
    every: float | None = None,
    report: Callable[[Round], None] = lambda r: None,
) -> int:
    """One round per ladder of `names` (with `every`, again every `every` s until cancelled);
    how many rounds failed (of the last pass, when looping)."""
    checkpointers = {n: Checkpointer(settings, ladders, store, sink, n) for n in names}
    written = dict.fromkeys(names, time.time())
    try:
        while True:
            failed = 0
            for name, checkpointer in checkpointers.items():
                failed += not await _round(checkpointer, force, report)
                if checkpointer.written:
                    written[name] = time.time()
                    checkpointer.written = False
                metrics.CHECKPOINT_AGE.labels(name).set(time.time() - written[name])
            if every is None:
                return failed
            await asyncio.sleep(every)
    finally:
        for checkpointer in checkpointers.values():
            await checkpointer.close()


async def _round(checkpointer: Checkpointer, force: bool, report: Callable[[Round], None]) -> bool:
    """One round of `checkpointer`; False if it failed (logged and counted)."""
    ladder = checkpointer.ladder
    try:
        done = await checkpointer.round(force)
    except Unverified as exc:
        log.error("checkpoint of ladder %r not written: %s", ladder, exc)
        metrics.CHECKPOINT_FAILURES.labels(ladder, "unverified").inc()
        await checkpointer.close()
        checkpointer.replica = None  # start again from the last checkpoint
        return False
    except Exception as exc:  # the sink, broker or store down: delayed, tried again
        log.warning("checkpoint round of ladder %r failed: %r; tried again later", ladder, exc)
        metrics.CHECKPOINT_FAILURES.labels(ladder, "error").inc()
        await checkpointer.close()
        checkpointer.replica = None
        return False
    if done.written is not None:
        metrics.CHECKPOINTS_WRITTEN.labels(ladder).inc()
    report(done)
    return True
