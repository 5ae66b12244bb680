"""`settle_gc`: the garbage collector of a worker and of ``serve`` kept off their hot path."""

from __future__ import annotations

import gc

from stream_rater.service import metrics
from stream_rater.service.gc_tuning import GC_YOUNG_THRESHOLD, settle_gc, time_gc_pauses


def test_settle_gc_freezes_start_up_objects_and_collects_young_objects_less_often():
    before = gc.get_threshold()
    try:
        settle_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_every_collection_is_timed_by_generation_once_per_process():
    """A full collection shows in the gen-2 pause histogram; installing twice times it once."""
    time_gc_pauses()
    time_gc_pauses()
    timed = [c for c in gc.callbacks if getattr(c, "times_gc_pauses", False)]
    assert len(timed) == 1
    full = metrics.GC_PAUSE.labels("2")
    before = full._sum.get(), sum(b.get() for b in full._buckets)
    gc.collect(2)
    after = full._sum.get(), sum(b.get() for b in full._buckets)
    assert after[1] == before[1] + 1 and after[0] > before[0]
    gc.callbacks.remove(timed[0])
