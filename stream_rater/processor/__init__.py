"""Batch of validated match events in → state commits + rating-changed events out.

Transport-agnostic (no faust): the stream worker and `replay` both call `Processor.process`,
so what the stream computes and what a replay computes are the same by construction. How it
keeps a batch to one read and one commit, exactly once, is in README.md beside this module.

- `results`: what a batch returns (`MatchResult`, `BatchResult`) and the errors it raises;
- `planner`: the pure part — one ladder's matches applied to a snapshot (`plan_batch`);
- `known_states`: the states a processor holds between batches;
- `ledger`: what it remembers of its own commits (watermarks, unconfirmed, produced);
- `core`: `Processor`, the store round trips around the planner;
- `skipping`: the one rule by which a match the model fails on is skipped (`process_skipping`).
"""

from stream_rater.processor.batch import PriorObserver
from stream_rater.processor.core import Processor, Retries, Target
from stream_rater.processor.planner import plan_batch
from stream_rater.processor.results import (
    BatchResult,
    MatchResult,
    NonFiniteRating,
    StoreLost,
    TooManyConflicts,
    Unratable,
    is_late,
    points_created,
)
from stream_rater.processor.skipping import Attempt, Skipped, process_skipping

__all__ = [
    "Attempt",
    "BatchResult",
    "MatchResult",
    "NonFiniteRating",
    "PriorObserver",
    "Processor",
    "Retries",
    "Skipped",
    "StoreLost",
    "Target",
    "TooManyConflicts",
    "Unratable",
    "is_late",
    "plan_batch",
    "points_created",
    "process_skipping",
]
