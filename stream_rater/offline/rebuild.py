"""Rebuild a ladder whose store lost data from the matches topic, so that subscribers miss
nothing: ``stream-rater replay --from-topic --ladder L --store URL`` (deploy/README.md, "Store loss",
recovering a lost store).

The rebuild applies the ladder's history in log order through the same `Processor` a worker
uses, with each record's position (so the store's per-partition positions are right again).
What it must also get right is the rating-changed events: a match's events reach
``rating-updates`` once its batch is acknowledged, and the consumer group's committed offset
of its partition says how far that went. So, per match, by where its record is:

- before the group's committed offset: its events were produced before the loss; the rebuild
  marks its marker produced (it shrinks, as a worker's do);
- at or after it (the matches that arrived while the store was lost, and any the group had not
  acknowledged yet): the rebuild produces its events to ``rating-updates`` itself, then marks
  them produced. They are the events a replay computes, with the same event_id a redelivery
  would re-emit, so a subscriber that dedupes by event_id sees each once; the worker, when it
  goes on, finds those matches applied and re-emits only what a marker still holds.

Why produce rather than leave the markers holding the events for the worker to re-emit: the
store then never holds more than one batch's events whatever the history's length, and it
holds when the group has no committed offset (a new group, or its offsets expired): every
match then counts as not acknowledged, and its events are produced again — at least once,
never lost, at the cost of duplicates the subscribers drop by event_id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.kafka import LadderHistory, committed_offsets, update_sender
from stream_rater.offline.replay import ReplaySummary, replay
from stream_rater.processor import BatchResult, MatchResult, Processor
from stream_rater.store import StateStore
from stream_rater.store.base import Event


def unacknowledged(
    result: BatchResult, where: Sequence[tuple[int, int] | None], committed: dict[int, int]
) -> list[Event]:
    """The events of `result`'s matches whose records (`where`) are at or after the group's
    `committed` offset of their partition (0 where it has none): not known to be produced. A
    match with no place came from a ``--history`` file, from before anything the topic still
    holds: long produced."""
    return [
        event
        for r, place in zip(result.results, where)
        if place is not None and place[1] >= committed.get(place[0], 0)
        for event in r.events
    ]


async def rebuild(
    settings: Settings,
    ladders: Ladders,
    history: LadderHistory,
    store: StateStore,
    *,
    batch_size: int = 1000,
    on_result: Callable[[MatchResult], None] | None = None,
) -> tuple[ReplaySummary, int]:
    """Apply `history` (read from the matches topic) to `store` and produce the events of its
    matches the consumer group has not acknowledged (see the module docstring). Returns the
    replay's summary and how many events were produced."""
    committed = await committed_offsets(settings, settings.topic_matches, sorted(history.positions))
    produced = 0
    async with update_sender(settings) as send:

        async def emit(result: BatchResult, where: Sequence[tuple[int, int] | None]) -> None:
            nonlocal produced
            events = unacknowledged(result, where, committed)
            if events:
                await send(events)
                produced += len(events)

        summary = await replay(
            history.matches,
            Processor(ladders, store),
            batch_size=batch_size,
            on_result=on_result,
            where=history.where,
            on_batch=emit,
        )
    return summary, produced
