"""Contract test: the private and internal names of faust-streaming, mode-streaming and aiokafka
that stream_rater uses or overrides still exist with the shape we rely on. `USED` lists them
(where and why), `CALLED` what faust must still call; the pins in pyproject.toml are the
versions this checks."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, MutableMapping, MutableSet
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.consumer import fetcher as aiokafka_fetcher
from faust.tables import TableManager as FaustTableManager
from faust.transport import base as faust_base
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import Message
from mode import Service
from mode import Worker as ModeWorker

FT, WEB = "stream_rater/service/faust_transport.py", "stream_rater/service/web.py"
LIFE = "stream_rater/service/faust_lifecycle.py"
GONE = object()


def is_event(value: Any, _: Any) -> bool:
    """An asyncio/mode Event (what we wait on or test)."""
    return callable(getattr(value, "wait", None)) and callable(getattr(value, "is_set", None))


# (distribution, owner: a class or module, or an instance of `live`, dotted name, shape: the
#  parameters we pass or override with, or a check of (value, owner), where and why we use it)
USED = [
    (
        "faust-streaming",
        faust_aiokafka.Consumer,
        "_drain_messages",
        ("self", "fetcher"),
        f"{FT} overrides it to guard each fetched batch instead of each message",
    ),
    (
        "faust-streaming",
        faust_aiokafka.Consumer,
        "_new_consumer_thread",
        ("self",),
        f"{FT} overrides it to build a consumer thread with a configurable fetch wait",
    ),
    (
        "faust-streaming",
        faust_aiokafka.AIOKafkaConsumerThread,
        "_create_worker_consumer",
        ("self", "transport"),
        f"{FT} overrides it to set the aiokafka consumer's fetch wait",
    ),
    (
        "faust-streaming",
        faust_consumer.ConsumerThread,
        "__init__",
        ("self", "consumer"),
        f"{FT} builds its consumer thread as _ConsumerThread(consumer, loop=, beacon=)",
    ),
    (
        "mode-streaming",
        Service,
        "__init__",
        ("self", "beacon", "loop"),
        f"{FT}: the consumer thread passes loop= and beacon= on to mode's Service",
    ),
    (
        "faust-streaming",
        faust.App,
        "_new_transport",
        ("self",),
        f"{FT} overrides it so the app uses our Transport",
    ),
    (
        "faust-streaming",
        faust_base.Transport,
        "__init__",
        ("self", "url", "app"),
        f"{FT}'s App._new_transport builds Transport(conf.broker_consumer, app)",
    ),
    (
        "faust-streaming",
        faust_aiokafka.Transport,
        "Consumer",
        lambda cls, _: issubclass(cls, faust_consumer.Consumer),
        f"{FT}'s Transport sets it to BatchGuardConsumer",
    ),
    (
        "faust-streaming",
        faust_aiokafka.Producer,
        "_ensure_producer",
        ("self",),
        f"{FT}'s aiokafka_producer: the worker sends whole batches through faust's own aiokafka producer",
    ),
    (
        "aiokafka",
        "producer",
        "client.fetch_all_metadata",
        (),
        f"{FT}'s broker_answers: readiness asks the broker for metadata through faust's producer",
    ),
    (
        "aiokafka",
        "kafka",
        "_client.fetch_all_metadata",
        (),
        "stream_rater/kafka/admin.py's topic_partitions: a consumer's own metadata lacks untracked topics",
    ),
    (
        "faust-streaming",
        faust_consumer.Consumer,
        "seek",
        ("self", "partition", "offset"),
        f"{FT} overrides it to know the offset a buffered partition must go on from",
    ),
    (
        "faust-streaming",
        faust_consumer.Consumer,
        "perform_seek",
        ("self",),
        f"{FT} overrides it to go on from the committed offsets after a rebalance",
    ),
    (
        "faust-streaming",
        "consumer",
        "_committed_offset",
        lambda m, _: isinstance(m, MutableMapping),
        f"{FT}'s perform_seek reads the committed offsets faust sought to",
    ),
    (
        "faust-streaming",
        faust_consumer.Consumer,
        "_add_gap",
        ("self", "tp", "offset_from", "offset_to"),
        f"{FT}'s fetch loop records offset gaps as faust's does (a buffered partition's only after a re-read)",
    ),
    (
        "faust-streaming",
        faust_aiokafka.Consumer,
        "position",
        ("self", "tp"),
        f"{FT}'s fetch loop compares a buffered partition's position with the next record to deliver",
    ),
    (
        "faust-streaming",
        "consumer",
        "flow_active",
        lambda v, _: isinstance(v, bool),
        f"{FT}'s fetch loop looks for undelivered records only while the flow is active",
    ),
    (
        "faust-streaming",
        faust_consumer.Consumer,
        "getmany",
        ("self", "timeout"),
        f"{FT}'s fetch loop fetches with getmany(timeout=1.0)",
    ),
    (
        "faust-streaming",
        "consumer",
        "_read_offset",
        lambda m, _: isinstance(m, MutableMapping) and m[TP("contract", 0)] is None,
        f"{FT}'s fetch loop reads and sets the read offset per TP",
    ),
    (
        "faust-streaming",
        "consumer",
        "_commit_every",
        lambda v, _: v is None or isinstance(v, int),
        f"{FT}'s fetch loop commits every broker_commit_every acks",
    ),
    (
        "faust-streaming",
        "consumer",
        "_n_acked",
        lambda v, _: isinstance(v, int),
        f"{FT}'s fetch loop reads and resets the ack count",
    ),
    (
        "faust-streaming",
        "consumer",
        "callback",
        lambda v, _: callable(v),
        f"{FT}'s fetch loop hands records of other topics to the conductor",
    ),
    (
        "faust-streaming",
        "consumer",
        "suspend_flow",
        is_event,
        f"{FT}'s fetch loop abandons a batch when a rebalance suspends the flow",
    ),
    (
        "faust-streaming",
        faust_aiokafka.Consumer,
        "consumer_stopped_errors",
        lambda v, _: isinstance(v, tuple) and all(issubclass(e, BaseException) for e in v),
        f"{FT}'s fetch loop catches them on shutdown",
    ),
    (
        "faust-streaming",
        faust_consumer,
        "CONSUMER_FETCHING",
        lambda v, _: isinstance(v, str),
        f"{FT}'s fetch loop sets and unsets this diag flag",
    ),
    (
        "faust-streaming",
        "consumer",
        "unacked",
        lambda s, c: isinstance(s, MutableSet) and s is c.unacked,
        (
            f"{FT}'s BatchBuffer.take adds taken records to this live set, holding a rebalance back "
            "(BatchBuffer.release takes out those dropped unacknowledged)"
        ),
    ),
    (
        "faust-streaming",
        faust_consumer.Consumer,
        "pause_partitions",
        ("self", "tps"),
        f"{FT}'s BatchBuffer.pause stops fetching a partition whose ladder is lost (parked)",
    ),
    (
        "faust-streaming",
        faust_consumer.Consumer,
        "resume_partitions",
        ("self", "tps"),
        f"{FT}'s BatchBuffer.resume fetches a parked partition again once its records are applied",
    ),
    (
        "faust-streaming",
        Message,
        "__slots__",
        lambda v, _: {"tracked", "generation_id"} <= set(v),
        f"{FT}'s BatchBuffer.take drops old generations and marks taken records tracked",
    ),
    (
        "faust-streaming",
        "app",
        "consumer_generation_id",
        lambda v, _: isinstance(v, int),
        f"{FT}'s BatchBuffer.take drops records of an earlier consumer generation",
    ),
    (
        "faust-streaming",
        "app",
        "flow_control.manage_queue",
        ("queue",),
        f"{FT}'s BatchBuffer registers itself to be cleared with faust's stream buffers",
    ),
    (
        "faust-streaming",
        "app",
        "flow_control.acquire",
        (),
        f"{FT}'s BatchBuffer.put waits while the flow is suspended",
    ),
    (
        "faust-streaming",
        "app",
        "topics.acks_enabled_for",
        ("topic",),
        f"{FT}'s fetch loop records gaps only for acking topics",
    ),
    (
        "faust-streaming",
        faust.App,
        "web_server",
        ("self", "service"),
        f"{WEB} serves the dashboard as the worker's web server (needs faust >= 0.15.3)",
    ),
    (
        "mode-streaming",
        Service,
        "wait_first",
        ("self", "coros", "timeout"),
        f"{FT}'s fetch loop races a batch's delivery against suspend_flow.wait()",
    ),
    (
        "mode-streaming",
        ModeWorker,
        "_sentinel_task",
        ("self",),
        f"{LIFE}'s Worker overrides it: the loop's last turns before it closes (1 s in mode)",
    ),
    (
        "mode-streaming",
        ModeWorker,
        "_on_sigusr1",
        ("self",),
        f"{LIFE}'s Worker overrides it: SIGUSR1 logs what the worker waits on (wait_dump)",
    ),
    (
        "faust-streaming",
        FaustTableManager,
        "on_start",
        ("self",),
        f"{LIFE}'s TableManager overrides it: recovery starts without faust's 1 s wait for tables",
    ),
    (
        "faust-streaming",
        FaustTableManager,
        "_update_channels",
        ("self",),
        f"{LIFE}'s TableManager calls it as faust's own start does, then recovery.start()",
    ),
    ("mode-streaming", "service", "diag.set_flag", ("flag",), f"{FT}'s fetch loop flags FETCHING"),
    ("mode-streaming", "service", "diag.unset_flag", ("flag",), f"{FT}'s fetch loop unflags FETCHING"),
    (
        "mode-streaming",
        "service",
        "_stopped",
        is_event,
        f"{FT}'s fetch loop stops when the consumer's or the fetcher's is set",
    ),
    (
        "aiokafka",
        "kafka",
        "_fetch_max_wait_ms",
        lambda v, _: v == 123,
        f"{FT}'s consumer thread sets it after construction (faust passes no value through)",
    ),
    (
        "aiokafka",
        "kafka",
        "_isolation_level",
        lambda v, _: v == "read_uncommitted",
        f"{FT}'s consumer thread sets it to read_committed after construction (faust reads uncommitted)",
    ),
    (
        "faust-streaming",
        faust_consumer.Consumer,
        "pause_partitions",
        ("self", "tps"),
        f"{FT}'s fetch loop holds a partition whose fetched batch cannot be decoded",
    ),
    (
        "faust-streaming",
        "consumer",
        "_thread._ensure_consumer",
        (),
        f"{FT}'s _undecodable_partition looks into the aiokafka consumer of faust's thread",
    ),
    (
        "aiokafka",
        aiokafka_fetcher.PartitionRecords,
        "_unpack_records",
        lambda v, _: inspect.isgeneratorfunction(v),
        f"{FT}'s _undecodable_partition finds the batch that failed by its generator, closed by the error",
    ),
]

# (distribution, faust/aiokafka function, text its source must contain, why)
CALLED = [
    (
        "faust-streaming",
        faust_consumer.Fetcher._fetcher.fun,
        "._drain_messages(self)",
        "the Fetcher must run our overridden fetch loop",
    ),
    (
        "faust-streaming",
        faust_consumer.ThreadDelegateConsumer.__init__,
        "self._new_consumer_thread()",
        "the consumer must build its thread with our override",
    ),
    (
        "faust-streaming",
        faust_aiokafka.AIOKafkaConsumerThread._create_consumer,
        "self._create_worker_consumer(",
        "the thread must build the worker's consumer with our override",
    ),
    (
        "faust-streaming",
        faust.App.transport.fget,
        "self._new_transport()",
        "the app must build its transport with our override",
    ),
    (
        "faust-streaming",
        faust.App._on_partitions_revoked,
        "self.flow_control.clear",
        "a rebalance must clear the buffers managed by flow_control, BatchBuffer among them",
    ),
    (
        "faust-streaming",
        faust_consumer.Consumer.on_partitions_revoked,
        "self._paused_partitions.difference_update(revoked)",
        (
            "a rebalance must un-pause the partitions it revokes: a parked partition (its ladder "
            "lost) is dropped then, and whoever gets it fetches it from its committed offset"
        ),
    ),
    (
        "faust-streaming",
        faust_consumer.Consumer.perform_seek,
        "self._committed_offset.update(",
        "perform_seek must leave the committed offsets it sought to in _committed_offset",
    ),
    (
        "aiokafka",
        AIOKafkaConsumer.start,
        "self._fetch_max_wait_ms",
        "the consumer must read the fetch wait we set when it starts",
    ),
    (
        "aiokafka",
        AIOKafkaConsumer.start,
        "isolation_level=self._isolation_level",
        "the consumer's fetcher must take the isolation level we set when it starts",
    ),
    (
        "aiokafka",
        AIOKafkaConsumer.start,
        "self._fetcher = Fetcher(",
        "the consumer's fetcher is where _undecodable_partition looks",
    ),
    (
        "aiokafka",
        aiokafka_fetcher.Fetcher.__init__,
        "self._records = collections.OrderedDict()",
        "the fetcher must keep its fetched results per partition in _records",
    ),
    (
        "aiokafka",
        aiokafka_fetcher.FetchResult.__init__,
        "self._partition_records = partition_records",
        "a fetched result must keep its PartitionRecords in _partition_records",
    ),
    (
        "aiokafka",
        aiokafka_fetcher.PartitionRecords.__init__,
        "self._records_iterator = self._unpack_records()",
        "PartitionRecords must decode in the generator _undecodable_partition inspects",
    ),
    (
        "aiokafka",
        aiokafka_fetcher.PartitionRecords._unpack_records,
        'raise Errors.CorruptRecordException(f"Invalid CRC - {tp}")',
        "a CRC mismatch must raise CorruptRecordException (UNDECODABLE) from the fetch",
    ),
]


@pytest.fixture
async def live() -> AsyncIterator[SimpleNamespace]:
    """Objects of the installed packages only (no stream_rater code), never started."""
    app = faust.App("contract-test", broker="kafka://127.0.0.1:9", web_enabled=False)
    kafka = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", fetch_max_wait_ms=123)
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")
    yield SimpleNamespace(app=app, consumer=app.consumer, kafka=kafka, producer=producer, service=Service())
    await kafka.stop()
    await producer.stop()


def label(owner: Any) -> str:
    """`owner` as failures and test ids name it: ``consumer()`` for an instance of `live`."""
    return f"{owner}()" if isinstance(owner, str) else owner.__name__


@pytest.mark.parametrize(
    "package, owner, name, shape, why", USED, ids=[f"{label(u[1])}.{u[2]}" for u in USED]
)
def test_name_still_has_our_shape(
    live: SimpleNamespace, package: str, owner: Any, name: str, shape: Any, why: str
) -> None:
    where = f"{package} {version(package)}: {label(owner)}.{name}"
    parent = value = getattr(live, owner) if isinstance(owner, str) else owner
    for part in name.split("."):
        parent, value = value, getattr(value, part, GONE)
        assert value is not GONE, f"{where} is gone; {why} — re-check before raising the pin"
    if callable(shape):
        assert shape(value, parent), f"{where} changed ({value!r}); {why} — re-check before raising the pin"
        return
    params = inspect.signature(value).parameters
    ours = [p for p in params if p in shape]
    extra = [
        p
        for p, v in params.items()
        if p not in shape and v.default is v.empty and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)
    ]
    assert ours == list(shape) and not extra, (
        f"{where} is now {inspect.signature(value)}; {why}, relying on ({', '.join(shape)}) "
        "— re-check before raising the pin"
    )


@pytest.mark.parametrize("package, caller, text, why", CALLED, ids=[c[2] for c in CALLED])
def test_faust_still_calls_what_we_override_or_set(package: str, caller: Any, text: str, why: str) -> None:
    assert text in inspect.getsource(caller), (
        f"{package} {version(package)}: {caller.__qualname__} no longer contains {text!r}, but "
        f"{why} — re-check before raising the pin"
    )


def test_a_rebalance_clears_the_buffers_before_it_waits_for_the_records_taken() -> None:
    """BatchBuffer's `on_clear` releases the records parked for a lost ladder (the pipeline's
    `abandon`); faust must clear the buffers before it waits for every record taken to be
    acknowledged, or a parked partition would hold the rebalance back until the ladder is back."""
    source = inspect.getsource(faust.App._on_partitions_revoked)
    clear, wait = source.find("self.flow_control.clear"), source.find("self._consumer_wait_empty")
    assert 0 <= clear < wait, (
        f"faust-streaming {version('faust-streaming')}: App._on_partitions_revoked no longer clears the "
        "buffers before it waits for the records taken — re-check BatchBuffer.on_clear before raising the pin"
    )
