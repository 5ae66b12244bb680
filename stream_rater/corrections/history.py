"""A ladder's history for a re-rate (files first, then the matches topic in log order), and
`apply_correction`: a correction carried out from it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from stream_rater.checkpoints import Checkpoint, CheckpointSink, configured_sink
from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts import MatchFinished
from stream_rater.corrections.planning import DEFAULT_OPTIONS
from stream_rater.corrections.rerate import (
    BeforeStart,
    Correction,
    Entry,
    Rerate,
    RerateOptions,
    RerateReport,
    Send,
)
from stream_rater.corrections.starting import TooOld, refuse_too_old, starting_checkpoint
from stream_rater.kafka import (
    LogReader,
    committed_offsets,
    deleted_heads,
    home_partition,
    ladder_history,
    partition_count,
    update_sender,
)
from stream_rater.store import RerateStore


class TopicHistory:
    """`ladder`'s matches: `files` (matches the topic no longer retains, in order; they may
    overlap its start: a match applied twice counts once), then the ladder's records of the
    matches topic from the earliest retained offset (or from `start`, a checkpoint's offsets,
    reading only `partitions`: the ladder's); each `read` returns what was appended
    since the previous one. Use as ``async with``: one consumer stays open, so a read during
    a re-rate's switch costs a fetch, not a new connection."""

    def __init__(
        self,
        settings: Settings,
        ladders: Ladders,
        ladder: str,
        files: Iterable[MatchFinished] = (),
        *,
        start: Mapping[int, int] | None = None,
        partitions: Iterable[int] | None = None,
    ) -> None:
        self.ladders, self.ladder = ladders, ladder
        self.limits = settings.limits()
        self._reader = LogReader(settings, settings.topic_matches, start, partitions)
        self._files: list[Entry] = [(match, None) for match in files]
        self._reached: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._settings = settings

    async def __aenter__(self) -> TopicHistory:
        await self._reader.__aenter__()
        try:
            self._committed = await committed_offsets(
                self._settings, self._settings.topic_matches, self._reader.partitions()
            )
        except BaseException:
            await self._reader.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._reader.__aexit__(*exc)

    async def read(self) -> list[Entry]:
        """The entries not returned before (all of them the first time)."""
        records = await self._reader.read()
        self._reached = await self._reader.reached()
        # Decoding a whole topic takes seconds; in a thread, the re-rate's lock keeper still
        # gets its turns on the event loop (the GIL is handed over every few ms).
        found = await asyncio.to_thread(ladder_history, records, self.ladders, self.ladder, self.limits)
        entries, self._files = self._files + list(zip(found.matches, found.where)), []
        return entries

    def reached(self) -> dict[int, int]:
        """Partition → offset up to which the topic was read."""
        return dict(self._reached)

    def committed(self) -> dict[int, int]:
        """Partition → offset the workers' consumer group had committed when this was opened."""
        return dict(self._committed)


@dataclass(frozen=True)
class HistorySources:
    """Where a re-rate's history comes from besides the matches topic: `files` (matches the
    topic no longer holds, read before it; even empty ones say "nothing earlier"), the
    checkpoint `sink` it may start from ("configured": the one the settings configure; None:
    none) and `since` (``rerate --since``: which checkpoint, by id or time)."""

    files: Iterable[MatchFinished] | None = None
    sink: CheckpointSink | str | None = "configured"
    since: str | None = None


#: The topic, after the checkpoints of the configured sink.
CONFIGURED_SOURCES = HistorySources()


async def apply_correction(
    correction: Correction,
    settings: Settings,
    ladders: Ladders,
    store: RerateStore,
    *,
    send: Send | None = None,
    options: RerateOptions = DEFAULT_OPTIONS,
    sources: HistorySources = CONFIGURED_SOURCES,
) -> RerateReport:
    """Carry out `correction` (the CLI's and the workers' one way to): a `Rerate` of its ladder
    run with `options`, from the history in the matches topic (after the `sources`' files),
    sending the correction events with `send` (default: a producer of its own to the updates
    topic). It checks the last twice the workers' batch size of matches for events they have
    not produced (the `Tuning`'s ``recent``). With a checkpoint sink among the `sources`, it
    starts from the checkpoint `corrections.starting` picks (their ``since``: ``rerate
    --since``) and reads only the ladder's partitions from its offsets. Refuses
    (`HistoryTruncated`, `TooOld`, changing nothing) when the topic no longer holds what that
    start needs and no files (even empty ones: "nothing earlier") supply the deleted part."""
    tuning = replace(options.tuning, recent=2 * settings.batch_size)
    job = _Job(correction, settings, ladders, store, replace(options, tuning=tuning), send)
    sink, since, files = sources.sink, sources.since, sources.files
    if isinstance(sink, str):
        async with configured_sink(settings) as configured:
            return await job.run(configured, since, files)
    return await job.run(sink, since, files)


@dataclass(frozen=True)
class _Job:
    """`apply_correction`'s arguments but the start."""

    correction: Correction
    settings: Settings
    ladders: Ladders
    store: RerateStore
    options: RerateOptions
    send: Send | None

    async def run(
        self, sink: CheckpointSink | None, since: str | None, files: Iterable[MatchFinished] | None
    ) -> RerateReport:
        """Pick the start, refuse what the topic cannot serve, re-rate; then keep the
        checkpoints true (`_after`). A match the history from the chosen checkpoint lacks
        (older than every checkpoint kept) is re-rated from the topic's start if the topic
        still has it, else refused."""
        correction, settings, store = self.correction, self.settings, self.store
        live = await store.generations(correction.ladder)
        start = await starting_checkpoint(correction, store, sink, since)
        heads = await deleted_heads(settings, correction.ladder, partitions=live.positions)
        checkpointed = sink is not None and bool(await sink.manifests(correction.ladder))
        refuse_too_old(correction, heads, start, files_supplied=files is not None, checkpointed=checkpointed)
        try:
            rerate = await self._rerate(start, files)
        except BeforeStart as exc:
            if heads and files is None:
                raise TooOld(correction.ladder, heads, None, str(exc)) from None
            rerate = await self._rerate(None, files)
            start = None
        if sink is not None and rerate.switched:
            await _after(sink, store, correction, start, rerate)
        return rerate.report

    async def _rerate(self, start: Checkpoint | None, files: Iterable[MatchFinished] | None) -> Rerate:
        """The re-rate from `start` (None: the topic's start, after `files`), run."""
        correction, settings = self.correction, self.settings
        live = await self.store.generations(correction.ladder)
        partitions = None
        if start is not None:
            count = await partition_count(settings, settings.topic_matches)
            partitions = {home_partition(correction.ladder, count), *live.positions, *start.positions}
            files = ()
        begin = start.positions if start is not None else None
        async with contextlib.AsyncExitStack() as stack:
            history = await stack.enter_async_context(
                TopicHistory(
                    settings, self.ladders, correction.ladder, files or (), start=begin, partitions=partitions
                )
            )
            send = self.send
            if send is None:
                send = await stack.enter_async_context(update_sender(settings))
            rerate = Rerate(self.store, self.ladders, correction, history, send, self.options, start=start)
            await rerate.run()
            return rerate


async def _after(
    sink: CheckpointSink, store: RerateStore, correction: Correction, start: Checkpoint | None, rerate: Rerate
) -> None:
    """After a switch, keep every checkpoint true: those made after `start` (every one without
    a start) passed what was corrected and are dropped; `start` itself is written again with
    the live voids and parameters (it passed none of the corrected matches), and the copy
    replaces it."""
    manifests = await sink.manifests(correction.ladder)
    ids = [m.id for m in manifests]
    newer = manifests[ids.index(start.id) + 1 :] if start is not None and start.id in ids else manifests
    if start is not None:
        voids = dict(await store.voids(correction.ladder))
        await sink.write(
            replace(start, voids=voids, params=dict(rerate.overrides) or None, id="", created=start.created)
        )
        newer = [*newer, *(m for m in manifests if m.id == start.id)]
    for manifest in newer:
        await sink.drop(manifest)
