"""The cyclic garbage collector kept off a long-running process's hot path (the worker's and
``serve``'s): a light module, so that ``serve`` gets it without importing the worker (faust)."""

from __future__ import annotations

import gc
import time

from stream_rater.service import metrics

#: Allocations (net) between two young-generation collections; Python's default is 700.
GC_YOUNG_THRESHOLD = 50_000


def settle_gc() -> None:
    """Keep the cyclic garbage collector off a worker's or ``serve``'s hot path.

    Everything made at start-up (modules, the app, the ladders) moves to the permanent
    generation, so older-generation collections stop re-scanning it, and a young collection
    runs every `GC_YOUNG_THRESHOLD` allocations: each batch allocates tens of thousands of
    short-lived objects (a dict per event, tuples per state), and an answer of the read API
    leaves only a few reference cycles behind. Measured with ``stream-rater bench e2e``: about
    4,570 matches per CPU-second before, 5,150-5,990 after; ``bench api``: some 30 µs per answer.
    The threshold counts allocations net of deallocations, so a collection comes when a batch
    in hand has grown by that many objects; at 10,000 a 500-match batch was scanned (and
    promoted, and scanned again) mid-way: the worker's collections took 0.27-0.35 s of its
    3.5 s CPU in a 20,000-match ``bench e2e``, at 50,000 0.14 s (young ones 0.16 ms each).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    time_gc_pauses()


def time_gc_pauses() -> None:
    """Time every collection into the `stream_rater_gc_pause_seconds` metric (once per
    process): a full collection stops the worker, which shows as a latency spike."""
    if any(getattr(callback, "times_gc_pauses", False) for callback in gc.callbacks):
        return
    by_generation = [metrics.GC_PAUSE.labels(str(g)) for g in range(3)]
    started = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            by_generation[info["generation"]].observe(time.perf_counter() - started[0])

    callback.times_gc_pauses = True  # type: ignore[attr-defined]
    gc.callbacks.append(callback)
