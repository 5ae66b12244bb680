"""Checkpoints on a real broker (the compacted checkpoints topic) and a real Redis: a verified
checkpoint of a live ladder; a writer killed between its chunks and its manifest leaves nothing
usable; a void after the checkpoint starts from it and equals a replay; one before it starts
from the beginning."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from stream_rater.bench.rerate_history import commit_group
from stream_rater.checkpoints import Checkpointer, KafkaSink, MemorySink, ReplayNeeds, Replica, latest_usable
from stream_rater.contracts import parse_match
from stream_rater.corrections.rerate import Correction
from stream_rater.offline.verify import verify
from stream_rater.service import metrics
from stream_rater.service.checkpointing import checkpoint_rounds
from tests.integration.checkpointing import (
    Lab,
    checkpointed,
    discard,
    duels,
    exact,
    new_lab,
    next_round_recovers,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def lab(broker_url, redis_url, unique_name):
    async for made in new_lab(broker_url, redis_url, unique_name):
        yield made


KILLED_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from stream_rater.checkpoints import KafkaSink, ReplayNeeds, latest_usable
    from stream_rater.checkpoints.format import encode
    from stream_rater.config.settings import Settings

    async def main():
        settings = Settings(broker=sys.argv[1], topic_checkpoints=sys.argv[2])
        async with KafkaSink(settings) as sink:
            checkpoint = await latest_usable(sink, sys.argv[3], ReplayNeeds({}, None))
            checkpoint.id, checkpoint.positions = "ck-torn", {0: 10**6}
            chunks, _ = encode(checkpoint, 300)
            await sink.write_chunks(checkpoint, chunks)
            print(len(chunks), flush=True)
            await asyncio.to_thread(sys.stdin.readline)  # killed here, before the manifest

    asyncio.run(main())
    """
)


async def test_a_verified_checkpoint_and_a_writer_killed_before_its_manifest(lab: Lab):
    await lab.publish(duels(lab.ladder, 300))
    await lab.work()
    async with KafkaSink(lab.settings) as sink:
        checkpointer = Checkpointer(lab.settings, lab.ladders, lab.store, sink, lab.ladder)
        done = await checkpointer.round(force=True)
        await checkpointer.close()
        assert done.written is not None and done.written.positions == {0: 300}, done.line()
        assert done.compared == 25 and done.moving == 0
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_WRITER,
            lab.settings.broker,
            lab.settings.topic_checkpoints,
            lab.ladder,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and int(writer.stdout.readline()) > 3  # chunks written
    finally:
        writer.kill()
        writer.wait()
    async with KafkaSink(lab.settings) as sink:
        assert [m.id for m in await sink.manifests(lab.ladder)] == [done.written.id]
        found = await latest_usable(sink, lab.ladder, ReplayNeeds({}, None))
        assert found is not None and found.id == done.written.id and found.positions == {0: 300}


async def test_a_void_starts_from_the_checkpoint_before_the_voided_match(lab: Lab):
    await lab.publish(duels(lab.ladder, 300))
    await lab.work()
    async with KafkaSink(lab.settings) as sink:
        written = await checkpointed(lab, sink)
        await lab.publish(duels(lab.ladder, 100, first=300))
        await lab.work()
        send = discard

        after = await lab.void("m350", sink, send)
        assert after.checkpoint == written.id and after.applied == 99, after.line()
        assert exact(await lab.store.players(lab.ladder)) == exact(await lab.oracle({"m350"}))
        before = await lab.void("m100", sink, send)
        assert before.checkpoint is None and before.applied == 398, before.line()
        assert exact(await lab.store.players(lab.ladder)) == exact(await lab.oracle({"m100", "m350"}))


async def test_verify_from_a_checkpoint_agrees_with_verify_from_the_start(lab: Lab):
    await lab.publish(duels(lab.ladder, 300))
    await lab.work()
    async with KafkaSink(lab.settings) as sink:
        written = await checkpointed(lab, sink)
        await lab.publish(duels(lab.ladder, 120, first=300))
        await lab.work()
        await commit_group(lab.settings, {0: 420})
        tail = await verify(lab.settings, lab.ladders, lab.ladder, lab.store, wait=5, sink=sink)
    whole = await verify(lab.settings, lab.ladders, lab.ladder, lab.store, wait=5, sink=None)
    assert (tail.matches, whole.matches) == (120, 420)
    assert tail.differences == whole.differences == [] and tail.players == whole.players == 25
    assert tail.checkpoint is not None and written.id in tail.checkpoint and whole.checkpoint is None
    assert any(line.startswith(f"recomputed from checkpoint {written.id}") for line in tail.lines())


class DownSink(MemorySink):
    """A checkpoint sink whose writes fail, as a checkpoints topic that is down."""

    async def _put(self, items):
        raise ConnectionError("the checkpoints topic is down")


async def test_a_sink_that_is_down_delays_checkpoints_and_never_live_rating(lab: Lab):
    await lab.publish(duels(lab.ladder, 200))
    await lab.work()
    failures = metrics.CHECKPOINT_FAILURES.labels(lab.ladder, "error")
    before = failures._value.get()
    rounds: list = []
    failed = await checkpoint_rounds(
        lab.settings, lab.ladders, lab.store, DownSink(), [lab.ladder], force=True, report=rounds.append
    )
    assert failed == 1 and rounds == [] and failures._value.get() == before + 1
    await lab.publish(duels(lab.ladder, 100, first=200))
    await lab.work()  # live rating goes on meanwhile
    assert exact(await lab.store.players(lab.ladder)) == exact(await lab.oracle())
    sink = MemorySink()
    failed = await checkpoint_rounds(
        lab.settings, lab.ladders, lab.store, sink, [lab.ladder], force=True, report=rounds.append
    )
    assert failed == 0 and rounds[0].written is not None and rounds[0].written.positions == {0: 300}
    assert metrics.CHECKPOINT_AGE.labels(lab.ladder)._value.get() < 60


async def test_rerate_since_a_checkpoint_applies_the_new_parameters_from_it_on(lab: Lab):
    await lab.publish(duels(lab.ladder, 300))
    await lab.work()
    async with KafkaSink(lab.settings) as sink:
        written = await checkpointed(lab, sink)
        await lab.publish(duels(lab.ladder, 100, first=300))
        await lab.work()
        await commit_group(lab.settings, {0: 400})
        params = {"beta": 2.0}
        report = await lab.correct(Correction("rerate", lab.ladder, params=params), sink, since=written.id)
        assert report.checkpoint == written.id and report.applied == 100, report.line()
        start = await sink.load((await sink.manifests(lab.ladder))[0])
        oracle = await Replica(lab.ladders, lab.ladder, start, params=params).open()
        await oracle.apply([(parse_match(e, lab.ladders), (0, i)) for i, e in enumerate(lab.published)])
        assert exact(await lab.store.players(lab.ladder)) == exact(await oracle.store.players(lab.ladder))
        checked = await verify(lab.settings, lab.ladders, lab.ladder, lab.store, wait=5, sink=sink)
        assert checked.differences == [] and checked.matches == 100, checked.lines()
        assert checked.checkpoint is not None and written.id not in checked.checkpoint  # the relabeled copy


async def test_checkpoints_across_the_window_each_void_starts_from_the_one_before_its_match(lab: Lab):
    """Two checkpoints (segments m0..m299 and m300..m599) are kept; a void after the second
    starts from it, one between them from the first; a void older than every checkpoint kept
    (the first dropped) is re-rated from the topic's start, which still has it."""
    async with KafkaSink(lab.settings) as sink:
        checkpointer = Checkpointer(lab.settings, lab.ladders, lab.store, sink, lab.ladder)
        written = []
        for first in (0, 300):
            await lab.publish(duels(lab.ladder, 300, first=first))
            await lab.work()
            written.append((await checkpointer.round(force=True)).written)
        await checkpointer.close()
        first, second = written
        assert first is not None and second is not None
        await lab.publish(duels(lab.ladder, 100, first=600))
        await lab.work()
        late = await lab.void("m650", sink)
        assert late.checkpoint == second.id and late.applied == 99
        middle = await lab.void("m400", sink)
        assert middle.checkpoint == first.id and middle.applied == 398
        assert exact(await lab.store.players(lab.ladder)) == exact(await lab.oracle({"m400", "m650"}))
        kept = await sink.manifests(lab.ladder)
        assert len(kept) == 1 and kept[0].voids == {
            "m400",
            "m650",
        }  # the first, rewritten; the second dropped
        checkpointer = Checkpointer(  # starts again from the rewritten one
            lab.settings, lab.ladders, lab.store, sink, lab.ladder
        )
        third = (await checkpointer.round(force=True)).written
        await checkpointer.close()
        assert third is not None and third.positions == {0: 700}
        await sink.drop(kept[0])  # only the third is left: segment m300..m699
        old = await lab.void("m100", sink)
        assert old.checkpoint is None and old.voided == ["m100"]
        assert exact(await lab.store.players(lab.ladder)) == exact(await lab.oracle({"m100", "m400", "m650"}))


async def test_a_void_that_died_before_rewriting_the_checkpoints_gets_a_true_one_at_the_next_round(lab: Lab):
    """A void killed between its switch and rewriting the checkpoints (here: made without a
    sink) leaves the newest checkpoint with the old voids, which a recovery of a lost store
    would use. The next round of the checkpointer writes one with the live voids whatever the
    cadence, and a recovery from it equals the live ladder."""
    await lab.publish(duels(lab.ladder, 300))
    await lab.work(produce=True)
    async with KafkaSink(lab.settings) as sink:
        await checkpointed(lab, sink)
        await lab.publish(duels(lab.ladder, 100, first=300))
        await lab.work(produce=True)
        stale = await checkpointed(lab, sink)
        await lab.void("m350", None)
        written = await next_round_recovers(lab, sink, {"m350"})
        assert written.id != stale.id


async def test_a_running_loop_rewrites_the_checkpoints_a_same_parameters_rerate_dropped(lab: Lab):
    """A re-rate with the parameters the loop's replica already has switches the generation and
    (from the topic's start) drops every checkpoint: the replica still holds, so nothing makes
    it start again, yet the next round of the same checkpointer writes one whatever the cadence
    (a lost store would otherwise recover without the parameters)."""
    params = {"beta": 2.0}
    await lab.publish(duels(lab.ladder, 200))
    await lab.work(produce=True)
    async with KafkaSink(lab.settings) as sink:
        await lab.correct(Correction("rerate", lab.ladder, params=params), sink)
        checkpointer = Checkpointer(lab.settings, lab.ladders, lab.store, sink, lab.ladder)
        try:
            assert (await checkpointer.round(force=True)).written is not None
            await lab.correct(Correction("rerate", lab.ladder, params=params), None)
            for manifest in await sink.manifests(lab.ladder):  # as a correction from the start does
                await sink.drop(manifest)
            done = await checkpointer.round()
        finally:
            await checkpointer.close()
        assert done.written is not None and done.written.params == params, done.line()


async def test_a_correction_that_dropped_every_checkpoint_gets_one_at_the_next_round(lab: Lab):
    """A void older than every checkpoint re-rates from the topic's start and drops them all:
    the next round writes one with the live voids whatever the cadence (no more matches may
    come to reach it), and a recovery from it equals the live ladder."""
    await lab.publish(duels(lab.ladder, 200))
    await lab.work(produce=True)
    async with KafkaSink(lab.settings) as sink:
        await checkpointed(lab, sink)
        report = await lab.void("m10", sink)
        assert report.checkpoint is None and await sink.manifests(lab.ladder) == [], report.line()
        await next_round_recovers(lab, sink, {"m10"})
