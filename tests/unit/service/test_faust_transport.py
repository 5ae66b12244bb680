"""`BatchBuffer`: how the worker's agent takes its records a fetched batch at a time — bounded,
flow-controlled and cleared like faust's stream buffers, records tracked until acknowledged
(faust's app and consumer, no broker)."""

from __future__ import annotations

import asyncio

import pytest
from faust.transport import consumer as faust_consumer
from faust.types import TP
from faust.types.tuples import ConsumerMessage

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.service.app import create_app
from stream_rater.service.faust_transport import BatchBuffer
from stream_rater.store.memory import MemoryStore

TOPIC = "matches-buffer"
PART = TP(TOPIC, 0)


@pytest.fixture
async def app():
    app = create_app(
        Settings(broker="kafka://127.0.0.1:9", topic_matches=TOPIC, consumer_group="buffer-test"),
        Ladders([Ladder("default", "trueskill")]),
        store=MemoryStore(),
    )
    app.flow_control.resume()
    return app


def messages(app, offsets, generation: int | None = None) -> list[ConsumerMessage]:
    generation = app.consumer_generation_id if generation is None else generation
    return [
        ConsumerMessage(TOPIC, 0, o, 0.0, 0, [], None, b"{}", None, tp=PART, generation_id=generation)
        for o in offsets
    ]


async def settle() -> None:
    """Let every ready task run until it waits."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_take_returns_at_most_the_batch_size_in_order(app):
    buffer = BatchBuffer(app, maxsize=100)
    await buffer.put(messages(app, range(7)))
    assert [m.offset for m in await buffer.take(5, within=1.0)] == [0, 1, 2, 3, 4]
    assert [m.offset for m in await buffer.take(5, within=0.01)] == [5, 6]


async def test_take_waits_within_for_a_fuller_batch(app):
    """A short batch waits up to `within` for more records; a full one does not wait."""
    buffer = BatchBuffer(app, maxsize=100)
    await buffer.put(messages(app, [0]))
    taking = asyncio.ensure_future(buffer.take(3, within=30.0))
    await settle()
    await buffer.put(messages(app, [1]))
    await settle()
    assert not taking.done()
    await buffer.put(messages(app, [2]))
    assert [m.offset for m in await asyncio.wait_for(taking, 5)] == [0, 1, 2]


async def test_take_goes_at_once_when_ready_and_fills_until_ready(app):
    """With the caller idle (`ready` done) a lone record goes at once; while the caller is
    busy the batch fills until `ready` is done, then goes with what arrived."""
    buffer = BatchBuffer(app, maxsize=100)
    idle = asyncio.get_running_loop().create_future()
    idle.set_result(None)
    await buffer.put(messages(app, [0]))
    assert [m.offset for m in await asyncio.wait_for(buffer.take(100, 30.0, idle), 5)] == [0]
    busy = asyncio.get_running_loop().create_future()
    await buffer.put(messages(app, [1]))
    taking = asyncio.ensure_future(buffer.take(100, 30.0, busy))
    await settle()
    await buffer.put(messages(app, [2, 3]))
    await settle()
    assert not taking.done()
    busy.set_result(None)
    assert [m.offset for m in await asyncio.wait_for(taking, 5)] == [1, 2, 3]


async def test_put_waits_while_the_buffer_is_full_and_while_the_flow_is_suspended(app):
    buffer = BatchBuffer(app, maxsize=2)
    await buffer.put(messages(app, [0, 1]))
    putting = asyncio.ensure_future(buffer.put(messages(app, [2])))
    await settle()
    assert not putting.done()
    await buffer.take(2, within=0)
    await asyncio.wait_for(putting, 5)
    app.flow_control.suspend()
    suspended = asyncio.ensure_future(buffer.put(messages(app, [3])))
    await settle()
    assert not suspended.done()
    app.flow_control.resume()
    await asyncio.wait_for(suspended, 5)


async def test_a_rebalance_clears_what_was_not_taken_and_wakes_a_waiting_put(app):
    """faust's flow control clears the buffer (the partition's next owner reads those records
    again); a fetch loop that waited for room goes on once the flow resumes, not before."""
    buffer = BatchBuffer(app, maxsize=2)
    await buffer.put(messages(app, [0, 1]))
    putting = asyncio.ensure_future(buffer.put(messages(app, [2])))
    await settle()
    assert not putting.done()
    app.flow_control.suspend()
    app.flow_control.clear()
    await settle()
    assert not putting.done() and not buffer._records
    app.flow_control.resume()
    await asyncio.wait_for(putting, 5)
    assert [m.offset for m in buffer._records] == [2]


async def test_taken_records_are_tracked_until_acknowledged(app):
    """Taken records hold a rebalance back (faust's ``wait_empty``) until `ack`; records of an
    earlier consumer generation are dropped, not acknowledged."""
    app.topics.acking_topics.add(TOPIC)
    buffer = BatchBuffer(app, maxsize=100)
    stale = messages(app, [0], generation=app.consumer_generation_id - 1)
    await buffer.put(stale + messages(app, [1, 2]))
    taken = await buffer.take(10, within=0)
    assert [m.offset for m in taken] == [1, 2]
    assert set(app.consumer.unacked) == set(taken)
    buffer.ack(taken)
    assert not app.consumer.unacked
    assert all(m.acked for m in taken) and not stale[0].acked


async def test_records_fetched_but_never_delivered_are_read_again(app, monkeypatch):
    """faust's getmany drops the rest of a fetched batch when the consumer generation changes;
    with no later record to reveal the jump, the partition's position (710, the log's end) is
    past the next record to deliver (14). The partition is read again from 14; the same
    offsets found missing twice in a row are a real gap, counted as faust counts gaps."""
    consumer = app.consumer
    sought, gaps = [], []
    position = {PART: 710}

    async def seek(self, tp, offset):
        sought.append((tp, offset))

    async def add_gap(tp, start, end):
        gaps.append((tp, start, end))

    async def at(tp):
        return position[tp]

    monkeypatch.setattr(faust_consumer.Consumer, "seek", seek)
    monkeypatch.setattr(consumer, "assignment", lambda: {PART})
    monkeypatch.setattr(consumer, "position", at)
    monkeypatch.setattr(consumer, "_add_gap", add_gap)
    await consumer.seek(PART, 14)
    sought.clear()

    await consumer._find_dropped()
    assert sought == [(PART, 14)] and gaps == []

    consumer.flow_active = False  # a rebalance: it seeks to the committed offsets itself
    await consumer._find_dropped()
    assert sought == [(PART, 14)]

    consumer.flow_active = True  # read again, and still nothing delivered up to 710: a gap
    await consumer._find_dropped()
    assert gaps == [(PART, 14, 709)] and sought == [(PART, 14)]
    position[PART] = 710
    await consumer._find_dropped()
    assert sought == [(PART, 14)] and len(gaps) == 1


async def test_a_rebalance_reads_a_partition_without_a_committed_offset_again_from_its_start(
    app, monkeypatch
):
    """Records 0-49 of a partition the group never committed were delivered to the buffer,
    then a rebalance cleared it. faust's seek to the committed offsets leaves such a partition
    where it is (past record 49): the partition is sought to its log's start instead, and
    record 0 is delivered again; one with a committed offset goes on from there as before."""
    consumer = app.consumer
    committed = TP(TOPIC, 1)
    sought = []

    async def seek(self, tp, offset):
        sought.append((tp, offset))

    async def seek_to_committed():
        return {PART: None, committed: 500}

    async def earliest_offsets(*tps):
        return dict.fromkeys(tps, 0)

    monkeypatch.setattr(faust_consumer.Consumer, "seek", seek)
    monkeypatch.setattr(consumer, "seek_to_committed", seek_to_committed)
    monkeypatch.setattr(consumer, "earliest_offsets", earliest_offsets)
    monkeypatch.setattr(consumer, "assignment", lambda: {PART, committed})
    for offset in range(50):
        assert await consumer._in_sequence(PART, offset) == "deliver"
    app.flow_control.clear()

    await consumer.perform_seek()
    assert sought == [(PART, 0)]
    assert await consumer._in_sequence(PART, 0) == "deliver"
    assert await consumer._in_sequence(committed, 500) == "deliver"


async def test_pause_resume_release_and_on_clear_reach_faust(app):
    """What the pipeline parks a partition by: `pause`/`resume` fetching it, `release` taken
    records from what holds a rebalance back, and `on_clear` told when a rebalance clears."""
    buffer = BatchBuffer(app, maxsize=100, topic=TOPIC)
    buffer.pause([0])
    assert PART in app.consumer._paused_partitions and PART not in app.consumer._get_active_partitions()
    buffer.resume([0])
    assert PART not in app.consumer._paused_partitions
    await buffer.put(messages(app, [0, 1]))
    taken = await buffer.take(2, within=0.01)
    buffer.release(taken[:1])
    assert taken[0] not in app.consumer.unacked and taken[1] in app.consumer.unacked
    cleared: list[bool] = []
    buffer.on_clear.append(lambda: cleared.append(True))
    app.flow_control.clear()
    assert cleared == [True]
