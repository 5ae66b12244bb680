"""The worker app: its consumer is faust's with one guard per fetched batch, and records of the
matches topic go to the agent's batch buffer (no broker needed: the delivery loop is driven
with records in memory); the worker's garbage-collector set-up; its bounded stop (`StopWatch`,
and the bounded wait for the correction task)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
from faust.types import TP

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.service.app import (
    EXIT_STOP_TIMEOUT,
    StopWatch,
    create_app,
    use_uvloop,
)
from stream_rater.service.corrections import CorrectionHandler
from stream_rater.service.faust_transport import YIELD_EVERY, BatchGuardConsumer
from stream_rater.store.memory import MemoryStore

TOPIC = "matches-transport"
PART = TP(TOPIC, 0)
OTHER = TP("another-topic", 0)


def consumer(**settings: float) -> BatchGuardConsumer:
    app = create_app(
        Settings(
            broker="kafka://127.0.0.1:9", topic_matches=TOPIC, consumer_group="transport-test", **settings
        ),
        Ladders([Ladder("default", "trueskill")]),
        store=MemoryStore(),
    )
    return app.consumer


async def records(offsets: list[int], tp: TP = PART) -> AsyncIterator[tuple[TP, SimpleNamespace]]:
    for offset in offsets:
        yield tp, SimpleNamespace(topic=tp.topic, offset=offset)


def test_the_worker_app_consumes_with_the_batch_guard_consumer():
    assert isinstance(consumer(), BatchGuardConsumer)


async def test_a_batch_is_delivered_in_order_from_the_read_offset_on():
    """Records before the read offset are skipped; the rest reach the conductor in order and
    move the read offset, across the loop's periodic yields."""
    c = consumer()
    delivered: list[int] = []

    async def callback(message: SimpleNamespace) -> None:
        delivered.append(message.offset)

    c.callback = callback
    c._read_offset[OTHER] = 3
    offsets = [1, 2, *range(3, 3 + 2 * YIELD_EVERY)]
    await c._deliver(records(offsets, OTHER))
    assert delivered == offsets[2:]
    assert c._read_offset[OTHER] == offsets[-1]


async def test_the_matches_topic_goes_to_the_batch_buffer_in_one_step():
    """The agent's topic bypasses the conductor: the fetched records land in its buffer, in
    order, and move the read offset."""
    c = consumer()
    c.app.flow_control.resume()
    delivered: list[int] = []

    async def callback(message: SimpleNamespace) -> None:
        delivered.append(message.offset)

    c.callback = callback
    offsets = list(range(2 * YIELD_EVERY))
    await c._deliver(records(offsets))
    buffer = c.app.batch_buffers[TOPIC]
    assert delivered == []
    assert [m.offset for m in buffer._records] == offsets
    assert c._read_offset[PART] == offsets[-1]


async def test_the_consumers_fetch_wait_is_the_configured_one():
    """faust fixes 1.5 s; the worker's aiokafka consumer gets ``fetch_max_wait`` instead."""
    c = consumer(fetch_max_wait=0.2)
    assert c._new_consumer_thread()._create_worker_consumer(c.transport)._fetch_max_wait_ms == 200


def test_the_matches_group_member_heartbeats_a_third_of_the_session_timeout():
    """As every group member of the service (`kafka.group_options`)."""
    conf = consumer(session_timeout=4.5).app.conf
    assert (conf.broker_session_timeout, conf.broker_heartbeat_interval) == (4.5, 1.5)


async def test_the_consumer_thread_sets_the_configured_switch_interval():
    """The consumer's fetches run in a thread of their own: ``switch_interval`` bounds how long a
    fetched batch waits for the GIL while the agent computes."""
    before = sys.getswitchinterval()
    c = consumer(switch_interval=0.0007)
    try:
        c._new_consumer_thread()._create_worker_consumer(c.transport)
        assert sys.getswitchinterval() == pytest.approx(0.0007)
    finally:
        sys.setswitchinterval(before)


async def test_a_buffered_partition_is_delivered_strictly_in_sequence():
    """After a seek, a jump in the matches topic's offsets is not a gap: the partition is sought
    back to the expected offset and nothing past the jump is delivered; what was delivered
    already is skipped; a jump to the same offset twice in a row is a real gap."""
    c = consumer()
    c.app.flow_control.resume()
    sought: list[tuple[TP, int]] = []
    gaps: list[tuple[int, int]] = []

    async def seek(tp: TP, offset: int) -> None:
        sought.append((tp, offset))

    async def add_gap(tp: TP, start: int, end: int) -> None:
        gaps.append((start, end))

    c._seek, c._add_gap = seek, add_gap
    buffer = c.app.batch_buffers[TOPIC]
    await c.seek(PART, 10)
    await c._deliver(records([10, 11, 15, 16]))
    assert [m.offset for m in buffer._records] == [10, 11]
    assert sought[-1] == (PART, 12) and gaps == []
    await c._deliver(records([10, 11, 12, 13]))
    assert [m.offset for m in buffer._records] == [10, 11, 12, 13]
    await c._deliver(records([20]))
    await c._deliver(records([20, 21]))
    assert [m.offset for m in buffer._records][-2:] == [20, 21]
    assert gaps == [(14, 20)]


def test_faust_credentials_follow_the_plain_clients_security_mapping():
    """The worker's faust credentials and the plain clients' options come from one mapping."""
    import faust

    from stream_rater.kafka import client_options
    from stream_rater.service.app import broker_credentials

    assert broker_credentials(Settings(broker="kafka://h:1")) is None
    assert isinstance(
        broker_credentials(Settings(broker="kafka://h:1", kafka_security_protocol="SSL")),
        faust.SSLCredentials,
    )
    sasl = Settings(
        broker="kafka://h:1",
        kafka_security_protocol="sasl_ssl",
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username="u",
        kafka_sasl_password="p",
    )
    credentials, options = broker_credentials(sasl), client_options(sasl)
    assert (credentials.mechanism.value, credentials.username, credentials.password) == (
        options["sasl_mechanism"],
        options["sasl_plain_username"],
        options["sasl_plain_password"],
    )
    assert credentials.ssl_context is not None


def test_the_stop_watch_exits_once_after_the_timeout_less_a_margin_saying_what_it_waited_for(caplog):
    exited: list[int] = []
    done = threading.Event()

    def exit(code: int) -> None:
        exited.append(code)
        done.set()

    watch = StopWatch(0.2, lambda: "the agent's last batch", exit=exit)
    assert watch.deadline == 0.2 - 0.02 and StopWatch(30.0, str).deadline == 29.0
    watch.arm()
    watch.arm()
    assert done.wait(10)
    assert exited == [EXIT_STOP_TIMEOUT]
    [record] = [r for r in caplog.records if "still waiting for" in r.getMessage()]
    assert "the agent's last batch" in record.getMessage()


async def test_a_correction_task_stuck_in_its_consumers_close_holds_the_stop_only_briefly(
    monkeypatch, caplog
):
    """The stop cancels the correction task and waits for it at most a share of its timeout:
    its consumer's close may wait up to uvloop's 30 s TLS shutdown timeout for the broker to
    close a connection, the worker's whole stop_timeout. Past the bound the stop goes on, and a
    warning says where the task waits."""
    started, closing = asyncio.Event(), asyncio.Event()
    never = asyncio.get_running_loop().create_future()  # the TLS connections' closing

    async def consume(self: CorrectionHandler) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # getmany: no request
        finally:
            closing.set()
            await never

    monkeypatch.setattr(CorrectionHandler, "consume", consume)
    app = create_app(  # waits for the task a share of the stop timeout: here 0.05 s
        Settings(
            broker="kafka://127.0.0.1:9", topic_matches=TOPIC, consumer_group="stop-test", stop_timeout=0.25
        ),
        Ladders([Ladder("default", "trueskill")]),
        store=MemoryStore(),
    )
    [carry_out] = [task for task in app._app_tasks if task.__name__ == "carry_out_corrections"]
    corrections = asyncio.ensure_future(carry_out())
    await started.wait()
    stop = asyncio.ensure_future(app.on_before_shutdown.send())
    try:
        done, _ = await asyncio.wait({stop}, timeout=3)
        assert stop in done and closing.is_set() and not corrections.done()
        [warning] = [r for r in caplog.records if "has not ended" in r.getMessage()]
        assert "the correction task" in warning.getMessage() and "consume@" in warning.getMessage()
    finally:
        never.set_result(None)
        await asyncio.gather(corrections, stop, return_exceptions=True)


def test_the_workers_modules_load_neither_numpy_nor_jwt():
    """numpy cost every worker's start about 0.45 CPU-s, for two read-API answers a worker
    may never give (a balance, a rating histogram): those load it when first asked. PyJWT
    (with cryptography, about 0.2 CPU-s) loads where the settings accept JWTs."""
    probe = "import sys, stream_rater.service.app; print([m for m in ('numpy', 'jwt') if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_worker_store_knows_as_many_board_scores_as_states_it_holds():
    """`STREAM_RATER_KNOWN_STATES` bounds the leaderboard scores the worker's Redis store keeps
    (`store.redis.boards`) as it bounds the states its processor holds (no connection made)."""
    from stream_rater.service.app import open_worker_store

    store = open_worker_store(Settings(redis_url="redis://127.0.0.1:1/0", known_states=7))
    assert store.known_boards.limit == 7


def test_the_worker_runs_its_event_loops_on_uvloop():
    """`run_worker` calls `use_uvloop` first: every loop made from then on (the agent's, the
    Kafka consumer thread's) is uvloop's."""
    uvloop = pytest.importorskip("uvloop")
    policy = asyncio.get_event_loop_policy()
    try:
        use_uvloop()
        loop = asyncio.new_event_loop()
        try:
            assert isinstance(loop, uvloop.Loop)
        finally:
            loop.close()
    finally:
        asyncio.set_event_loop_policy(policy)
