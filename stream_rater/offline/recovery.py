"""Recovering a ladder the store lost from the latest checkpoint (``replay --from-topic
--store``, ``STREAM_RATER_ON_STORE_LOSS=rebuild``): `recover` picks where the rebuild starts,
reads only the ladder's partitions from there, and runs `offline.rebuild` on that history.

- The ladder's store is empty (Redis restarted without persistence): the newest checkpoint
  that can seed it (none past a season start) is written into the live generation — states,
  shadows, applied markers and its parameter overrides (a re-rate's new parameters) — with the
  voids of the newest checkpoint, usable or not (a void after a season start is only in the
  checkpoints past it), and the matches after it are replayed with them.
- The store kept a part (a failover that lost the last writes): the commits it kept are a
  prefix of the ladder's, so the newest usable checkpoint its positions reach is the start;
  the matches after it that the store has are found applied, the rest applied.
- Either way the checkpoint must lie within the consumer group's committed offsets: the
  events of the matches before it were produced before the loss, the rebuild produces those
  of the matches after it the group had not acknowledged (`offline.rebuild`).
- No such checkpoint (or none configured): the whole topic, as before checkpoints. Into an
  empty store, with the voids and parameter overrides of the newest checkpoint, usable or not
  (one past a season start: the store lost them with the rest; without checkpoints nothing
  keeps them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from stream_rater.checkpoints import Checkpoint, CheckpointSink, ReplayNeeds, latest_usable, seed
from stream_rater.checkpoints.state import SEED_MARKERS
from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts import MatchFinished
from stream_rater.kafka import (
    LadderHistory,
    committed_offsets,
    deleted_heads,
    home_partition,
    ladder_history,
    partition_count,
    read_log,
    refuse_truncated,
)
from stream_rater.offline.rebuild import rebuild
from stream_rater.offline.replay import ReplaySummary
from stream_rater.processor import MatchResult
from stream_rater.store import StateStore


async def recovery_start(
    store: StateStore, sink: CheckpointSink | None, ladder: str, committed: Mapping[int, int]
) -> tuple[Checkpoint | None, bool]:
    """The checkpoint a rebuild of `ladder` starts from (None: the topic's start), and whether
    it must be written into the store first (the store has nothing of the ladder)."""
    if sink is None:
        return None, False
    live = await store.generations(ladder)
    empty = not live.positions and not (await store.read(ladder, [], [], [])).watermark
    if empty:
        anything = ReplayNeeds(None, None, any_params=True, whole=True)
        found = await latest_usable(sink, ladder, anything, within=committed)
        return found, True
    needs = ReplayNeeds(await store.voids(ladder), live.params, whole=True)
    start = await latest_usable(sink, ladder, needs, within=committed)
    if start is not None and all(live.positions.get(p, 0) >= o for p, o in start.positions.items()):
        return start, False
    return None, False


async def history_from(
    settings: Settings,
    ladders: Ladders,
    ladder: str,
    start: Checkpoint | None,
    files: Iterable[MatchFinished] | None = None,
) -> LadderHistory:
    """`ladder`'s valid matches from `start`'s offsets on its partitions (None: the whole topic,
    after `files`); `HistoryTruncated` when the topic lacks offsets that needs."""
    begin, partitions = None, None
    if start is not None:
        count = await partition_count(settings, settings.topic_matches)
        begin, partitions = start.positions, {home_partition(ladder, count), *start.positions}
    records, _ = await read_log(settings, settings.topic_matches, start=begin, partitions=partitions)
    history = await asyncio.to_thread(ladder_history, records, ladders, ladder, settings.limits())
    heads = await deleted_heads(settings, ladder, partitions=history.positions)
    missing = [h for h in heads if h.earliest > (begin or {}).get(h.partition, 0)]
    refuse_truncated(ladder, missing, supplied=start is None and files is not None)
    if start is None and files is not None:
        earlier = list(files)
        history.matches[:0] = earlier
        history.where[:0] = [None] * len(earlier)
    return history


async def recover(
    settings: Settings,
    ladders: Ladders,
    ladder: str,
    store: StateStore,
    sink: CheckpointSink | None,
    *,
    batch_size: int = 1000,
    on_result: Callable[[MatchResult], None] | None = None,
    files: Iterable[MatchFinished] | None = None,
) -> tuple[ReplaySummary, int, Checkpoint | None, LadderHistory]:
    """Rebuild `ladder` in `store` from the latest usable checkpoint (see the module
    docstring): the replay's summary, the events produced, the checkpoint (None: from the
    topic's start) and the history replayed."""
    count = await partition_count(settings, settings.topic_matches)
    committed = await committed_offsets(settings, settings.topic_matches, range(count))
    start, empty = await recovery_start(store, sink, ladder, committed)
    history = await history_from(settings, ladders, ladder, start, files)
    if start is not None:
        applied = set(start.applied)  # skipped by the replay, markers or not (`SEED_MARKERS`)
        kept = [i for i, m in enumerate(history.matches) if m.match_id not in applied]
        history.matches = [history.matches[i] for i in kept]
        history.where = [history.where[i] for i in kept]
    if empty and sink is not None:
        # The voids and parameters went with the store. The newest checkpoint, usable or not,
        # has every void (a void of a match `start` passed dropped `start`), `start` the
        # parameters its states were rated with.
        newest = await latest_usable(sink, ladder, ReplayNeeds(None, None, any_params=True))
        if newest is not None:
            live = (await store.generations(ladder)).live
            await store.set_voids(ladder, newest.voids, [], live)
            await store.restore_params(ladder, live, (start or newest).params)
    if start is not None and empty:
        await seed(store, ladders, start, None, shadows=True, markers=SEED_MARKERS)
    summary, produced = await rebuild(
        settings, ladders, history, store, batch_size=batch_size, on_result=on_result
    )
    return summary, produced, start, history
