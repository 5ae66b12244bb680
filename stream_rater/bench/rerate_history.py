"""``stream-rater bench rerate`` with ``--history-matches N`` (default 1,000,000): what a void
costs on a ladder with a long history, from a checkpoint and from the start, and what a
store-loss recovery costs with and without one; on the embedded runtime (Tansu and Redis).

1. `N` 1-vs-1 matches among 10,000 players are published and applied to Redis as the worker
   applies them (its `Processor`, batches of 1,000, the group's offsets committed after each).
2. ``stream-rater checkpoint`` writes a verified checkpoint `gap` matches before the match
   `back` matches from the end (what the cadence leaves at worst, with a cadence of `gap`).
3. Store loss: the ladder's keys are deleted and it is recovered from that checkpoint, then
   deleted again and recovered from the topic's start; both must give the same states.
4. The match `back` from the end is voided (from the checkpoint), then the first match (from
   the start), while a live feeder keeps applying new matches at `rate` per second: each
   void's time, how long live commits of the ladder were refused (freeze to switch), how
   long its corrected players were held (switch to the last correction event sent), and the
   slowest of the feeder's matches to apply (what a live match actually waited).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TextIO

from stream_rater.checkpoints import Checkpointer, CheckpointSink, KafkaSink
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts import MatchFinished, parse_match
from stream_rater.corrections.history import HistorySources, apply_correction
from stream_rater.corrections.rerate import Correction, RerateOptions, RerateReport, Tuning
from stream_rater.kafka import client_options, ladder_history, read_log
from stream_rater.kafka.produce import match_record, send_records
from stream_rater.local.runtime import LocalRuntime
from stream_rater.offline.recovery import recover
from stream_rater.processor import Processor
from stream_rater.store import StateStore, open_store

LADDER = "bench-history"
PLAYERS = 10_000

Entries = list[tuple[MatchFinished, tuple[int, int] | None]]


def duels(first: int, n: int) -> list[dict[str, Any]]:
    """`n` 1-vs-1 matches among `PLAYERS` players, a minute apart."""
    rng = random.Random(first)
    return [
        {
            "match_id": f"h{i}",
            "ladder": LADDER,
            "finished_at": 1.6e9 + 60 * i,
            "teams": [
                {"rank": r, "players": [{"id": f"p{p}"}]} for r, p in enumerate(rng.sample(range(PLAYERS), 2))
            ],
        }
        for i in range(first, first + n)
    ]


@dataclass
class Bench:
    """The runtime's settings, the ladder, its store and the worker's processor."""

    settings: Settings
    ladders: Ladders
    store: StateStore
    processor: Processor
    entries: Entries
    applied: int = 0

    async def work(self, upto: int, batch: int = 1000) -> float:
        """Apply the entries up to `upto` as the worker does; seconds taken."""
        began = time.perf_counter()
        while self.applied < upto:
            chunk = self.entries[self.applied : min(upto, self.applied + batch)]
            result = await self.processor.process([m for m, _ in chunk], [w for _, w in chunk])
            self.processor.produced(result)
            self.applied += len(chunk)
            last = chunk[-1][1]
            assert last is not None
            await commit_group(self.settings, {last[0]: last[1] + 1})
        return time.perf_counter() - began


async def commit_group(settings: Settings, offsets: dict[int, int]) -> None:
    """Commit the workers' group offsets of the matches topic, as a worker does after a batch."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    consumer = AIOKafkaConsumer(
        **client_options(settings), group_id=settings.consumer_group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = {
            TopicPartition(settings.topic_matches, p): OffsetAndMetadata(o, "") for p, o in offsets.items()
        }
        consumer.assign(list(tps))
        await consumer.commit(tps)
    finally:
        await consumer.stop()


async def _timed(job: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    began = time.perf_counter()
    result = await job()
    return result, time.perf_counter() - began


async def _lose(store: StateStore) -> None:
    """Delete every key of the ladder: a Redis restarted without persistence."""
    client = store.client  # type: ignore[attr-defined]
    keys = [k async for k in client.scan_iter(match=f"*{{{LADDER}}}*", count=10_000)]
    for i in range(0, len(keys), 10_000):
        await client.unlink(*keys[i : i + 10_000])


async def _recoveries(bench: Bench, sink: CheckpointSink, out: TextIO) -> dict[str, float]:
    """Recover the lost ladder from the checkpoint, then from the start; their seconds."""
    before = await bench.store.players(LADDER)
    found: dict[str, float] = {}
    for name, used in (("from the checkpoint", sink), ("from the start", None)):
        await _lose(bench.store)
        (summary, _, start, _), seconds = await _timed(
            lambda used=used: recover(bench.settings, bench.ladders, LADDER, bench.store, used)  # type: ignore[misc]
        )
        same = {p: s[:4] for p, s in (await bench.store.players(LADDER)).items()} == {
            p: s[:4] for p, s in before.items()
        }
        print(
            f"store-loss recovery {name}: {summary.applied:,} matches replayed in {seconds:.1f} s "
            f"({'checkpoint ' + start.id if start else 'no checkpoint'}); states as before the loss: {same}",
            file=out,
        )
        found[name] = seconds
    return found


async def _void(bench: Bench, sink: CheckpointSink, match_id: str, rate: float) -> tuple[RerateReport, float]:
    """Void `match_id` while a feeder publishes new matches at `rate` per second and applies
    each from its place in the topic, as the worker does; the re-rate's report and the
    longest a feeder's match took to apply (seconds: a match waits while the ladder is frozen
    or one of its players held)."""
    from stream_rater.kafka.produce import new_producer

    stop = asyncio.Event()
    producer = new_producer(bench.settings)
    await producer.start()
    longest = 0.0

    async def feed() -> None:
        nonlocal longest
        first = 10**8 + int(time.time())
        for i in range(10**6):  # made one at a time: making them all first would hold the loop
            [event] = duels(first + i, 1)
            if stop.is_set():
                return
            topic, key, value, _ = match_record(bench.settings.topic_matches, event)
            sent = await producer.send_and_wait(topic, value, key=key)
            began = time.perf_counter()
            await bench.processor.process(
                [parse_match(event, bench.ladders)], [(sent.partition, sent.offset)]
            )
            longest = max(longest, time.perf_counter() - began)
            await asyncio.sleep(1 / rate)

    feeder = asyncio.create_task(feed())
    try:
        correction = Correction("void", LADDER, (match_id,), "bench")
        # A re-rate of 1 M matches on a loaded machine can keep the event loop from renewing a
        # 10 s lease (its garbage collections alone): the operator's --lease 60.
        report = await apply_correction(
            correction,
            bench.settings,
            bench.ladders,
            bench.store,
            options=RerateOptions(Tuning(lease=60.0)),
            sources=HistorySources(sink=sink),
        )
    finally:
        stop.set()
        await feeder
        await producer.stop()
    return report, longest


async def _prepare(settings: Settings, history: int, out: TextIO) -> Bench:
    """Publish `history` matches and apply them as the worker does."""
    ladders = Ladders([Ladder(LADDER, "trueskill")])
    events = duels(0, history)
    began = time.perf_counter()
    for i in range(0, history, 50_000):
        await send_records(
            settings, [match_record(settings.topic_matches, e) for e in events[i : i + 50_000]]
        )
    records, _ = await read_log(settings, settings.topic_matches, timeout=1800.0)  # a loaded machine
    found = await asyncio.to_thread(ladder_history, records, ladders, LADDER, settings.limits())
    del records
    print(f"{history:,} matches published and read back in {time.perf_counter() - began:.1f} s", file=out)
    store = open_store(settings.redis_url, prefix=settings.redis_prefix)
    entries: Entries = list(zip(found.matches, found.where))
    return Bench(settings, ladders, store, Processor(ladders, store), entries)


async def _measure(
    settings: Settings, history: int, back: int, gap: int, rate: float, out: TextIO
) -> dict[str, Any]:
    """Steps 1-4 of the module docstring; the figures."""
    bench = await _prepare(settings, history, out)
    at = history - back - gap
    seconds = await bench.work(at)
    print(f"live: {at:,} matches applied in {seconds:.1f} s ({at / seconds:,.0f}/s)", file=out)
    async with KafkaSink(settings) as sink:
        checkpointer = Checkpointer(settings, bench.ladders, bench.store, sink, LADDER)
        done, seconds = await _timed(lambda: checkpointer.round(force=True))
        await checkpointer.close()
        print(f"checkpoint: {done.line()} in {seconds:.1f} s", file=out)
        await bench.work(history)
        figures: dict[str, Any] = {"recovery": await _recoveries(bench, sink, out)}
        for name, index in (("back", history - back), ("start", 0)):
            (report, longest), wall = await _timed(lambda index=index: _void(bench, sink, f"h{index}", rate))  # type: ignore[misc]
            print(
                f"void of h{index} ({name}): {wall:.2f} s in all (choosing and reading the checkpoint included); "
                f"{report.line()} ({report.steps_line()}); the live feeder's slowest match took {longest * 1000:.1f} ms",
                file=out,
            )
            figures[name], figures[f"{name} wall"], figures[f"{name} longest"] = report, wall, longest
    await bench.store.close()
    return figures


def run(history_matches: int, back: int, gap: int, rate: float, out: TextIO = sys.stdout) -> dict[str, Any]:
    """Run the benchmark on the embedded runtime and print its figures."""
    settings = Settings(partitions=1, matches_retention_hours=-1)
    with LocalRuntime(topics=settings.topics()) as runtime:
        settings = replace(settings, broker=runtime.broker_url, redis_url=runtime.redis_url)
        figures = asyncio.run(_measure(settings, history_matches, back, gap, rate, out))
    recent, start, wall, whole = (
        figures["back"],
        figures["start"],
        figures["back wall"],
        figures["start wall"],
    )
    print(
        f"void {back:,} back: {wall:.2f} s = {100 * wall / whole:.2f} % of the void "
        f"at the start ({whole:.1f} s); live ladder blocked {recent.blocked_seconds * 1000:.1f} ms and "
        f"{start.blocked_seconds * 1000:.1f} ms (the slowest live match {figures['back longest'] * 1000:.1f} ms "
        f"and {figures['start longest'] * 1000:.1f} ms); store-loss recovery "
        f"{figures['recovery']['from the checkpoint']:.1f} s from the checkpoint vs "
        f"{figures['recovery']['from the start']:.1f} s from the start",
        file=out,
    )
    return figures
