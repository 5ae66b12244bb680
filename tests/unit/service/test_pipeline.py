"""The worker's batch handler with an in-memory store and a recording producer: order of
effects, dead letters, retries on transient errors and shutdown while failing; the pipeline
that overlaps consecutive batches and keeps their commits, emits and acks in order."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pytest
import redis.exceptions
from aiokafka.errors import KafkaConnectionError

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import Limits, parse_match
from stream_rater.kafka import LadderHistory
from stream_rater.offline.replay import replay
from stream_rater.offline.verify import compare
from stream_rater.processor import Processor, Skipped, StoreLost
from stream_rater.service import metrics
from stream_rater.service.batch_handler import BatchHandler, Retrying, Topics, WorkerStopping
from stream_rater.service.order_watch import OrderWatch
from stream_rater.service.pipeline import BatchPipeline
from stream_rater.store import Commit, CommitConflict, PlayerState, StateWrite
from stream_rater.store.memory import MemoryStore
from stream_rater.waiting import wait_until_async
from tests.fault_support import REFUSALS
from tests.helpers import duel, poison_model, poisoned

LADDERS = Ladders([Ladder("default", "trueskill")])


@dataclass
class Record:
    """A consumed record as faust's Message presents it."""

    value: bytes | None
    key: bytes | None = None
    topic: str = "matches"
    partition: int = 0
    offset: int = 0


def record(match_id: str, a: str, b: str, **fields: object) -> Record:
    """A consumed record holding a 1-vs-1 match: `a` beats `b` (offset 0 unless given: a later
    record of a ladder needs a later offset, or it reads as applied already)."""
    return Record(json.dumps(duel(match_id, a, b, at=0)).encode(), **fields)


class Producer:
    """Records what was sent; resolves every send at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes, list]] = []

    async def send(self, records: list[tuple[str, bytes | None, bytes, list]]) -> None:
        self.sent += records


class FlakyStore(MemoryStore):
    """Refuses the first `failures` commits with a Redis connection error."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if self.failures:
            self.failures -= 1
            raise redis.exceptions.ConnectionError("connection reset")
        return await super().commit_many(commits)


def handler(
    store: MemoryStore, producer: Producer, stopping: Callable[[], bool] = lambda: False, **kwargs
) -> BatchHandler:
    return BatchHandler(
        Processor(LADDERS, store),
        producer.send,
        topics=Topics(updates="updates", dlq="dlq"),
        retrying=Retrying(0.01, stopping),
        **kwargs,
    )


async def test_valid_events_are_produced_keyed_by_ladder_and_player():
    """Each rating change goes to the updates topic keyed `<ladder>:<player_id>`, in match order."""
    producer = Producer()
    await handler(MemoryStore(), producer).handle(
        [record("m1", "a", "b", offset=0), record("m2", "b", "c", offset=1)]
    )
    assert [(t, k) for t, k, _, _ in producer.sent] == [
        ("updates", b"default:a"),
        ("updates", b"default:b"),
        ("updates", b"default:b"),
        ("updates", b"default:c"),
    ]
    assert [json.loads(v)["event_id"] for _, _, v, _ in producer.sent] == ["m1:a", "m1:b", "m2:b", "m2:c"]


def miskeyed(ladder: str, partition: int) -> float:
    return metrics.MATCHES_MISKEYED.labels(ladder, str(partition))._value.get()


def test_order_watch_counts_records_not_keyed_by_their_ladder(caplog):
    """A record keyed by its ladder passes on whatever partition the ladder's records arrive
    (any hashing partitioner); one keyed otherwise is counted per ladder and partition and
    warned about once per interval."""
    now = [0.0]
    watch = OrderWatch(warn_every=60.0, clock=lambda: now[0])
    before = miskeyed("eu", 5)
    assert watch.check(Record(None, key=b"eu", partition=5), "eu")
    assert not watch.check(Record(None, key=b"m-17", partition=5), "eu")
    assert not watch.check(Record(None, key=None, partition=5), "eu")
    assert miskeyed("eu", 5) - before == 2
    assert len([r for r in caplog.records if "'eu'" in r.getMessage()]) == 1
    now[0] = 61.0
    watch.check(Record(None, key=b"m-18", partition=5), "eu")
    assert len([r for r in caplog.records if "'eu'" in r.getMessage()]) == 2


def test_order_watch_reports_a_split_ladder_by_name_with_the_fix(caplog):
    """A ladder whose records arrive on a second partition is a split ladder: the gauge names
    it with its partition count, each partition is marked for the alert rule, and the warning
    names the partitions and the producer setting that fixes it; another ladder is untouched."""
    watch = OrderWatch()
    assert watch.check(Record(None, key=b"na", partition=1), "na")
    assert watch.check(Record(None, key=b"eu-split", partition=2), "eu-split")
    assert not watch.check(Record(None, key=b"eu-split", partition=3), "eu-split")
    assert not watch.check(Record(None, key=b"eu-split", partition=0), "eu-split")
    assert metrics.SPLIT_LADDERS.labels("eu-split")._value.get() == 3
    marked = {p for ladder, p in metrics.LADDER_PARTITION._metrics if ladder == "eu-split"}
    assert marked == {"0", "2", "3"}
    assert ("na",) not in metrics.SPLIT_LADDERS._metrics
    [first, *_] = [r.getMessage() for r in caplog.records if "split ladder 'eu-split'" in r.getMessage()]
    assert "partitions [2, 3]" in first and "key every match by its ladder" in first
    assert "round-robin" in first and "verify" in first


async def test_late_matches_are_counted_once_per_applied_match():
    """The late counter moves by the number of newly applied late matches, not redeliveries."""
    late = lambda: metrics.MATCHES_LATE.labels("default")._value.get()  # noqa: E731
    store, producer = MemoryStore(), Producer()
    first = json.dumps(duel("new", "a", "b", at=100))
    old = json.dumps(duel("old", "a", "b", at=50))
    start = late()
    await handler(store, producer).handle([Record(first.encode()), Record(old.encode(), offset=1)])
    await handler(store, producer).handle([Record(old.encode(), offset=1)])
    assert late() - start == 1
    assert [json.loads(v).get("late") for _, _, v, _ in producer.sent] == [None, None, True, True, True, True]


async def test_invalid_events_are_dead_lettered_with_reason_and_origin():
    """A bad event goes to the DLQ with its bytes, reason and origin; the rest still flows."""
    producer = Producer()
    bad = Record(b'{"match_id": "x"}', key=b"x", partition=3, offset=41)
    await handler(MemoryStore(), producer).handle([bad, record("m1", "a", "b", offset=42)])
    [(topic, key, value, headers)] = [s for s in producer.sent if s[0] == "dlq"]
    assert (topic, key, value) == ("dlq", b"x", bad.value)
    assert dict(headers) == {
        "sr-reason": b"finished_at: is required",
        "sr-origin-topic": b"matches",
        "sr-origin-partition": b"3",
        "sr-origin-offset": b"41",
    }
    assert sum(1 for s in producer.sent if s[0] == "updates") == 2


@dataclass
class HeadedRecord(Record):
    """A consumed record with headers."""

    headers: list[tuple[str, bytes]] | None = None


async def test_a_dead_letter_keeps_at_most_max_event_bytes_of_value_key_and_headers():
    """An oversized record's dead letter holds the first `max_event_bytes` of its value and key
    and the leading headers that fit that budget, and says what was cut."""
    producer = Producer()
    big = HeadedRecord(
        b"v" * 500, key=b"k" * 300, offset=7, headers=[("a", b"1" * 60), ("b", b"2" * 60), ("c", b"3")]
    )
    await handler(MemoryStore(), producer, limits=Limits(max_event_bytes=100)).handle([big])
    [(_, key, value, headers)] = producer.sent
    assert (key, value) == (b"k" * 100, b"v" * 100)
    assert headers[0] == ("a", b"1" * 60) and ("b", b"2" * 60) not in headers
    found = dict(headers)
    assert found["sr-truncated"] == b"500" and found["sr-key-truncated"] == b"300"
    assert found["sr-headers-dropped"] == b"2" and found["sr-origin-offset"] == b"7"


async def test_transient_store_errors_are_retried_until_the_commit_lands():
    """A Redis connection error is retried with backoff; the batch then commits once."""
    store, producer = FlakyStore(failures=2), Producer()
    result = await handler(store, producer).handle([record("m1", "a", "b")])
    assert [r.duplicate for r in result.results] == [False]
    assert (await store.players("default"))["a"].games == 1
    assert len(producer.sent) == 2


class FlakyProducer(Producer):
    """Fails the first `failures` sends as a broker that dropped the connection."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def send(self, records: list[tuple[str, bytes | None, bytes, list]]) -> None:
        if self.failures:
            self.failures -= 1
            raise KafkaConnectionError("broker went away")
        await super().send(records)


async def test_transient_broker_errors_are_retried_until_the_events_are_sent():
    """A failed produce is retried with backoff; the match is committed once and its events sent."""
    store, producer = MemoryStore(), FlakyProducer(failures=3)
    await handler(store, producer).handle([record("m1", "a", "b")])
    assert [json.loads(v)["event_id"] for _, _, v, _ in producer.sent] == ["m1:a", "m1:b"]
    assert (await store.players("default"))["a"].games == 1


async def test_failing_batch_at_shutdown_is_left_unacknowledged():
    """When the worker stops while Redis still fails, the batch raises and nothing is produced."""
    producer = Producer()
    with pytest.raises(WorkerStopping):
        await handler(FlakyStore(failures=10**6), producer, stopping=lambda: True).handle(
            [record("m1", "a", "b")]
        )
    assert producer.sent == []


async def test_a_match_the_model_cannot_process_is_dead_lettered_alone(monkeypatch):
    """A match that fails inside the processor goes to the DLQ; the batch's other matches apply."""
    model = LADDERS.get("default").rating_model
    real = model.rate_match

    def fail_on_z(teams, outcome):
        if any(r.mu == 99.0 for team in teams for r in team):
            raise ZeroDivisionError("boom")
        return real(teams, outcome)

    store = MemoryStore()
    await handler(store, Producer()).handle([record("seed", "z", "y")])
    players = await store.players("default")
    await store.commit(
        Commit("default", [StateWrite("z", players["z"]._replace(mu=99.0, version=2), 1)], {"poke": []})
    )
    monkeypatch.setattr(model, "rate_match", fail_on_z)
    producer = Producer()
    await handler(store, producer).handle(
        [record("m1", "a", "b", offset=1), record("m2", "z", "c", key=b"m2-key", partition=3, offset=7)]
    )
    dead = [s for s in producer.sent if s[0] == "dlq"]
    assert len(dead) == 1
    _, key, value, headers = dead[0]
    headers = dict(headers)
    assert (key, value) == (b"m2-key", record("m2", "z", "c").value)
    assert headers["sr-reason"] == b"processing failed: ZeroDivisionError: boom"
    assert (headers["sr-origin-topic"], headers["sr-origin-partition"], headers["sr-origin-offset"]) == (
        b"matches",
        b"3",
        b"7",
    )
    assert headers["sr-error-type"] == b"ZeroDivisionError"
    assert b"fail_on_z" in headers["sr-traceback"]
    assert {json.loads(v)["match_id"] for t, _, v, _ in producer.sent if t == "updates"} == {"m1"}


class LoggingStore(MemoryStore):
    """Notes each commit's matches in a log it shares with a `LoggingProducer`."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    async def commit_many(self, commits):
        self.log += [f"commit {m}" for c in commits for m in c.markers]
        return await super().commit_many(commits)


class LoggingProducer(Producer):
    """Notes each send's topic in the shared log."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    async def send(self, records):
        self.log += [f"send {topic}" for topic, *_ in records]
        await super().send(records)


async def test_a_match_the_model_cannot_process_is_with_the_broker_before_a_later_match_commits(monkeypatch):
    """Once a later match of the ladder commits, its stored position is past the failing record and
    a redelivery reads that record as applied: so its dead letter is sent first, and a crash in
    between cannot lose it."""
    model = LADDERS.get("default").rating_model
    real = model.rate_match

    def fail_on_x(teams, outcome):
        if any(r.mu == 25.0 and r.sigma < 0 for team in teams for r in team):
            raise ZeroDivisionError("boom")
        return real(teams, outcome)

    monkeypatch.setattr(model, "rate_match", lambda teams, outcome: fail_on_x(teams, outcome))
    log: list[str] = []
    store = LoggingStore(log)
    await store.commit(
        Commit("default", [StateWrite("x", PlayerState(25.0, -1.0, 1, None, 1), 0)], {"poke": []})
    )
    log.clear()
    await handler(store, LoggingProducer(log)).handle(
        [record("m1", "x", "c", offset=1), record("m2", "a", "b", offset=2)]
    )
    assert log.index("send dlq") < log.index("commit m2")
    assert log.count("send dlq") == 1


class GatedProducer(Producer):
    """Holds every send until the test opens its gate; records the order of sends."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def send(self, records: list[tuple[str, bytes | None, bytes, list]]) -> None:
        await self.gate.wait()
        await super().send(records)


async def settle() -> None:
    """Let every ready task run until it waits."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_the_pipeline_commits_the_next_batch_while_the_previous_one_is_produced():
    """Batch 2 is committed (it reads batch 1's states) while batch 1's events still wait for
    the broker; events and acks then follow batch order."""
    store, producer, acked = MemoryStore(), GatedProducer(), []
    pipeline = BatchPipeline(
        handler(store, producer), ack=lambda messages: acked.append([m.offset for m in messages])
    )
    await pipeline.submit([record("m1", "a", "b", offset=1)])
    await pipeline.submit([record("m2", "a", "c", offset=2)])
    await settle()
    assert (await store.players("default"))["a"].games == 2
    assert acked == [] and producer.sent == []
    producer.gate.set()
    await pipeline.drain()
    assert acked == [[1], [2]]
    assert [json.loads(v)["event_id"] for _, _, v, _ in producer.sent] == ["m1:a", "m1:b", "m2:a", "m2:c"]


class SendLog(Producer):
    """Records each send's event ids as one entry; holds every send until `gate` is set, and
    then fails the first one with `error` if given."""

    def __init__(self, error: Exception | None = None) -> None:
        super().__init__()
        self.sends: list[list[str]] = []
        self.gate = asyncio.Event()
        self.error = error

    async def send(self, records: list[tuple[str, bytes | None, bytes, list]]) -> None:
        await self.gate.wait()
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        self.sends.append([json.loads(v)["event_id"] for _, _, v, _ in records])


async def test_the_batches_committed_during_an_emit_go_out_together_in_the_next_one():
    """Batches 2 and 3 commit while batch 1's events wait for the broker: they are produced
    in one send after it, in batch order, and every batch is acknowledged in order."""
    producer, acked = SendLog(), []
    pipeline = BatchPipeline(
        handler(MemoryStore(), producer), ack=lambda ms: acked.append([m.offset for m in ms]), depth=4
    )
    for i, (a, b) in enumerate([("a", "b"), ("a", "c"), ("b", "c")], start=1):
        await pipeline.submit([record(f"m{i}", a, b, offset=i)])
    await settle()
    producer.gate.set()
    await pipeline.drain()
    assert producer.sends == [["m1:a", "m1:b"], ["m2:a", "m2:c", "m3:b", "m3:c"]]
    assert acked == [[1], [2], [3]]


async def test_after_a_failed_emit_no_later_batch_is_produced_or_acknowledged():
    """Batch 2, committed while batch 1's emit failed, and batch 3, submitted after, are
    neither produced nor acknowledged (the broker would accept them)."""
    producer, acked = SendLog(KafkaConnectionError()), []
    work = handler(MemoryStore(), producer, stopping=lambda: True)
    pipeline = BatchPipeline(work, ack=acked.append, depth=4)
    await pipeline.submit([record("m1", "a", "b", offset=1)])
    await pipeline.submit([record("m2", "c", "d", offset=2)])
    await settle()
    producer.gate.set()
    with pytest.raises(WorkerStopping):
        await pipeline.drain()
    await pipeline.submit([record("m3", "e", "f", offset=3)])
    with pytest.raises(WorkerStopping):
        await pipeline.drain()
    assert producer.sends == [] and acked == []


async def test_the_pipeline_holds_the_caller_back_at_its_depth():
    """`submit` returns while fewer than `depth` batches are in hand, then waits for the oldest."""
    producer, acked = GatedProducer(), []
    pipeline = BatchPipeline(handler(MemoryStore(), producer), ack=acked.append, depth=2)
    await pipeline.submit([record("m1", "a", "b")])
    second = asyncio.ensure_future(pipeline.submit([record("m2", "c", "d")]))
    await settle()
    assert not second.done()
    producer.gate.set()
    await asyncio.wait_for(second, 5)
    await pipeline.drain()
    assert len(acked) == 2


class GatedStore(MemoryStore):
    """Holds every commit until the test opens its gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        await self.gate.wait()
        return await super().commit_many(commits)


async def test_committed_is_done_while_idle_and_when_the_commit_in_hand_is():
    """`committed()` is done at once with nothing in hand, pending while a batch commits, and
    done as soon as that commit is (its events may still be on their way)."""
    store, producer = GatedStore(), GatedProducer()
    pipeline = BatchPipeline(handler(store, producer), ack=lambda messages: None)
    assert pipeline.committed().done()
    await pipeline.submit([record("m1", "a", "b")])
    committing = pipeline.committed()
    await settle()
    assert not committing.done()
    store.gate.set()
    await asyncio.wait_for(committing, 5)
    assert pipeline.committed().done() and producer.sent == []
    producer.gate.set()
    await pipeline.drain()


async def test_after_a_failed_batch_no_later_batch_is_committed_or_acknowledged():
    store, acked = FlakyStore(failures=10**6), []
    pipeline = BatchPipeline(handler(store, Producer(), stopping=lambda: True), ack=acked.append)
    await pipeline.submit([record("m1", "a", "b")])
    await settle()
    store.failures = 0
    await pipeline.submit([record("m2", "c", "d")])
    with pytest.raises(WorkerStopping):
        await pipeline.drain()
    assert acked == [] and await store.players("default") == {}


class LostReplyStore(MemoryStore):
    """Runs the first commit, then fails as if its reply was lost on the way back (by default
    the connection dropped; `error` a socket timeout in a network partition, say)."""

    def __init__(self, error: Exception | None = None) -> None:
        super().__init__()
        self.lose = True
        self.error = error or redis.exceptions.ConnectionError("reply lost")

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        refusals = await super().commit_many(commits)
        if self.lose:
            self.lose = False
            raise self.error
        return refusals


def counted(metric, ladder: str = "default") -> float:
    return metric.labels(ladder)._value.get()


@pytest.mark.parametrize(
    "error",
    [
        redis.exceptions.ConnectionError("reply lost"),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
    ],
)
async def test_a_commit_whose_reply_was_lost_counts_as_applied_not_duplicate(error):
    """The retry finds the markers of its own commit: applied goes up by the matches, duplicates
    not at all, and each event is produced once — also when the commit timed out (a socket
    timeout ending a network partition: it may or may not have been applied)."""
    applied, duplicate = counted(metrics.MATCHES_APPLIED), counted(metrics.MATCHES_DUPLICATE)
    producer = Producer()
    store = LostReplyStore(error)
    await handler(store, producer).handle([record(f"r{i}", "a", "b", offset=i) for i in range(3)])
    assert (await store.players("default"))["a"].games == 3
    assert (counted(metrics.MATCHES_APPLIED) - applied, counted(metrics.MATCHES_DUPLICATE) - duplicate) == (
        3,
        0,
    )
    assert len(producer.sent) == 6


async def test_a_batch_committed_but_not_produced_is_reemitted_then_its_markers_shrink():
    """A worker dies between commit and produce: the redelivered batch produces the stored
    events; after the ladder's next batch their markers are empty, and another redelivery is
    counted as duplicates and produces nothing."""
    store, producer = MemoryStore(), Producer()
    batch = [record("m1", "a", "b", offset=0), record("m2", "b", "c", offset=1)]
    await handler(store, Producer()).commit(batch)
    restarted = handler(store, producer)
    await restarted.handle(batch)
    assert [json.loads(v)["event_id"] for _, _, v, _ in producer.sent] == ["m1:a", "m1:b", "m2:b", "m2:c"]
    await restarted.handle([record("m3", "c", "d", offset=2)])
    assert (await store.read("default", [], [], ["m1", "m2"])).applied == {"m1": [], "m2": []}
    producer.sent.clear()
    duplicate = counted(metrics.MATCHES_DUPLICATE)
    await restarted.handle(batch)
    assert producer.sent == [] and counted(metrics.MATCHES_DUPLICATE) - duplicate == 2


async def test_a_store_that_lost_a_ladder_stops_it_until_rebuilt():
    """After the store loses what was committed (a Redis restart without persistence), the
    batch is neither applied nor produced; the ladder is reported stopped and counted; once the
    ladder is rebuilt the batch goes through and the ladder is applied again."""
    losses = counted(metrics.STORE_LOSSES)
    kept = MemoryStore()
    processor = Processor(LADDERS, kept)
    producer = Producer()
    work = BatchHandler(
        processor, producer.send, topics=Topics(updates="updates", dlq="dlq"), retrying=Retrying(0.01)
    )
    await work.handle([record("m1", "a", "b")])
    processor.store = MemoryStore()  # what a restarted Redis without persistence holds
    sent = len(producer.sent)
    task = asyncio.ensure_future(work.handle([record("m2", "a", "c", offset=1)]))

    async def stopped() -> bool:
        return "default" in work.health.stopped

    await wait_until_async(stopped, "the ladder stopped", 5, interval=0.001)
    assert "rebuild it from the matches topic" in work.health.stopped["default"]
    assert (counted(metrics.STORE_LOSSES) - losses, len(producer.sent), task.done()) == (1, sent, False)
    processor.store = kept  # rebuilt from the topic
    await asyncio.wait_for(task, 5)
    assert work.health.stopped == {} and len(producer.sent) == sent + 2


def unversioned(states: dict) -> dict:
    """States without their versions (which count commits, so depend on the batching)."""
    return {player: state._replace(version=0) for player, state in states.items()}


async def test_replay_and_verify_skip_the_matches_the_worker_dead_letters_and_equal_its_states(monkeypatch):
    """Matches that make the model throw: the worker dead-letters them, a replay of the same
    matches skips exactly them (a line each, a count in its summary) and ends with the worker's
    states, and verify's recomputation skips them too and finds no difference."""
    poison_model(monkeypatch, LADDERS, "default")
    events = [duel(f"m{i}", f"p{i % 5}", f"p{(i + 2) % 5}", at=1.7e9 + i) for i in range(40)]
    bad = {"m7", "m8", "m23"}
    events = [poisoned(e) if e["match_id"] in bad else e for e in events]
    store, producer = MemoryStore(), Producer()
    worker = handler(store, producer)
    for start in range(0, len(events), 6):
        await worker.handle(
            [Record(json.dumps(e).encode(), offset=i) for i, e in enumerate(events) if start <= i < start + 6]
        )
    assert {json.loads(v)["match_id"] for t, _, v, _ in producer.sent if t == "dlq"} == bad

    skipped: list[Skipped] = []
    replayer = Processor(LADDERS, MemoryStore())
    summary = await replay([parse_match(e, LADDERS) for e in events], replayer, on_skip=skipped.append)
    assert [s.match.match_id for s in skipped] == sorted(bad, key=lambda m: int(m[1:]))
    assert (
        skipped[0].line()
        == "skipped match 'm7' of ladder 'default': processing failed: ZeroDivisionError: poison"
    )
    assert (summary.skipped, summary.applied) == (3, 37) and "3 skipped" in summary.line()
    assert unversioned(await replayer.store.players("default")) == unversioned(await store.players("default"))

    history = LadderHistory("default", matches=[parse_match(e, LADDERS) for e in events])
    live = await store.players("default"), await store.players("default", effects=True)
    report = await compare(store, LADDERS, history, live)
    assert report.differences == [] and len(report.skipped) == 3
    assert "3 the model could not rate" in report.lines()[-1]


class RefusingStore(MemoryStore):
    """Refuses every commit with `error` while `refusing` is set (as a Redis at maxmemory)."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.refusing = asyncio.Event()
        self.refused = 0

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if self.refusing.is_set():
            self.refused += 1
            raise self.error
        return await super().commit_many(commits)


async def refused(store: RefusingStore, times: int) -> None:
    """Return once `store` has refused `times` commits."""

    async def enough() -> bool:
        return store.refused >= times

    await wait_until_async(enough, f"{times} refused commits", 5, interval=0.001)


def refusals(reason: str) -> float:
    return metrics.STORE_REFUSALS.labels(reason)._value.get()


@pytest.mark.parametrize(("error", "code"), REFUSALS)
async def test_a_refused_batch_is_held_until_the_store_accepts_it(error, code, caplog):
    """While Redis refuses the commit the batch is neither applied, produced nor dead-lettered;
    the refusal is counted by its code, reported (`refusal.reason`, the gauge) and logged at
    error level once; when Redis accepts again the batch lands once and readiness is back."""
    store, producer = RefusingStore(error), Producer()
    work = handler(store, producer)
    store.refusing.set()
    before = refusals(code.lower())
    task = asyncio.ensure_future(work.handle([record("m1", "a", "b"), record("m2", "c", "d", offset=1)]))
    await refused(store, 3)
    assert (task.done(), producer.sent, await store.players("default")) == (False, [], {})
    reason = work.health.refusal.reason()
    assert reason is not None and reason.startswith(f"the store refuses writes: {code}")
    assert metrics.STORE_REFUSING._value.get() == 1
    assert refusals(code.lower()) - before == store.refused
    assert (
        len([r for r in caplog.records if r.levelname == "ERROR" and "refuses writes" in r.getMessage()]) == 1
    )
    store.refusing.clear()
    result = await asyncio.wait_for(task, 5)
    assert [r.duplicate for r in result.results] == [False, False]
    assert {t for t, _, _, _ in producer.sent} == {"updates"}
    assert (work.health.refusal.reason(), metrics.STORE_REFUSING._value.get()) == (None, 0)


async def test_a_refusal_in_the_one_by_one_fallback_is_held_not_dead_lettered(monkeypatch):
    """A batch holding a match the model cannot process falls back to one match at a time; a
    refusal met there holds the match it met (not dead-lettered), and once Redis accepts again
    only the bad match is in the DLQ and every other one is applied."""
    model = LADDERS.get("default").rating_model
    real = model.rate_match
    store = RefusingStore(redis.exceptions.ReadOnlyError("You can't write against a read only replica."))

    calls = []

    def fail_on_bad(teams, outcome):
        if any(r.mu == 99.0 for team in teams for r in team):
            if not calls:
                store.refusing.set()  # Redis starts refusing as the fallback begins
            calls.append(teams)
            raise ZeroDivisionError("boom")
        return real(teams, outcome)

    await handler(store, Producer()).handle([record("seed", "z", "y")])
    players = await store.players("default")
    await store.commit(
        Commit("default", [StateWrite("z", players["z"]._replace(mu=99.0, version=2), 1)], {"poke": []})
    )
    monkeypatch.setattr(model, "rate_match", fail_on_bad)
    producer = Producer()
    work = handler(store, producer)
    task = asyncio.ensure_future(
        work.handle(
            [
                record("m1", "a", "b", offset=1),
                record("m2", "z", "c", offset=2),
                record("m3", "d", "e", offset=3),
            ]
        )
    )
    await refused(store, 3)
    assert not task.done() and work.health.refusal.reason() is not None
    store.refusing.clear()
    await asyncio.wait_for(task, 5)
    dead = [json.loads(v)["match_id"] for t, _, v, _ in producer.sent if t == "dlq"]
    assert dead == ["m2"]
    assert {json.loads(v)["match_id"] for t, _, v, _ in producer.sent if t == "updates"} == {"m1", "m3"}
    assert (await store.players("default"))["a"].games == 1


# A lost ladder holds only its partition (BatchPipeline parking): "east" lives on partition 0,
# "west" on partition 1, both consumed by one worker.
TWO = Ladders([Ladder("east", "trueskill"), Ladder("west", "trueskill")])
HOME = {"east": 0, "west": 1}


def on_home(match_id: str, ladder: str, offset: int, a: str, b: str, generation: int = 0) -> Record:
    """A consumed record of `ladder`'s match on the ladder's partition (`HOME`)."""
    value = json.dumps(duel(match_id, f"{ladder}-{a}", f"{ladder}-{b}", ladder=ladder, at=1.7e9 + offset))
    found = Record(value.encode(), key=ladder.encode(), partition=HOME[ladder], offset=offset)
    found.generation_id = generation  # type: ignore[attr-defined]  # faust's Message has one
    return found


def stream(offsets: range, generation: int = 0) -> list[list[Record]]:
    """Batches of one match of each ladder per offset (p0: east, p1: west)."""
    return [
        [on_home(f"{ladder[0]}{o}", ladder, o, str(o % 3), str((o + 1) % 3), generation) for ladder in HOME]
        for o in offsets
    ]


class FakeGuard:
    """`LossGuard`'s `ready`/`hold` for a ladder held while it is in `lost` (none rebuilding)."""

    def __init__(self) -> None:
        self.lost: dict[str, StoreLost] = {}
        self.rebuilding: dict[str, str] = {}

    async def ready(self, partitions: object) -> None:
        return None

    async def hold(self, ladders: Iterable[str]) -> None:
        for ladder in ladders:
            if ladder in self.lost:
                raise self.lost[ladder]


class Parking:
    """A two-ladder worker (`TWO`) with a pipeline whose acknowledgements, pauses, resumes and
    releases are recorded. `lose()` loses "east" the way `how` says ("store": a Redis that lost
    its keys, found by the processor; "guard": held by `LossGuard.hold`); `rebuild()` brings it back."""

    def __init__(
        self, how: str = "store", producer: Producer | None = None, max_backoff: float = 0.01
    ) -> None:
        self.how, self.store, self.guard = how, MemoryStore(), FakeGuard()
        self.producer = Producer() if producer is None else producer
        self.acked: list[tuple[int, int]] = []
        self.paused: list[set[int]] = []
        self.resumed: list[set[int]] = []
        self.released: list[tuple[int, int]] = []
        self.handler = BatchHandler(
            Processor(TWO, self.store),
            self.producer.send,
            topics=Topics(updates="updates", dlq="dlq"),
            retrying=Retrying(max_backoff),
            guard=self.guard,  # type: ignore[arg-type]  # the part of LossGuard the handler uses
        )
        self.pipeline = BatchPipeline(
            self.handler,
            ack=lambda ms: self.acked.extend((m.partition, m.offset) for m in ms),
            pause=self.paused.append,
            resume=self.resumed.append,
            release=lambda ms: self.released.extend((m.partition, m.offset) for m in ms),
        )
        self._kept: object = None

    def lose(self) -> None:
        if self.how == "store":
            self._kept = self.store._ladders.pop("east")  # as if its sr:{east}:* keys were deleted
        else:
            self.guard.lost["east"] = StoreLost("east", "the guard found it lost")

    def rebuild(self) -> None:
        if self.how == "store":
            self.store._ladders["east"] = self._kept  # type: ignore[assignment]
        else:
            self.guard.lost.clear()
            self.handler.health.recovered("east")  # what LossGuard calls once the ladder is back

    def applied(self, ladder: str) -> list[str]:
        """Match ids of `ladder` whose events were produced, in order (one entry per event pair)."""
        ids = [json.loads(v)["match_id"] for t, _, v, _ in self.producer.sent if t == "updates"]
        return [i for i in ids[::2] if i[0] == ladder[0]]

    async def feed(self, batches: list[list[Record]], drain: bool = True) -> None:
        """Submit `batches` (then drain the pipeline), failing after 5 s."""

        async def submit() -> None:
            for batch in batches:
                await self.pipeline.submit(batch)
            if drain:
                await self.pipeline.drain()

        await asyncio.wait_for(submit(), 5)

    async def parked_offsets(self, partition: int) -> list[int]:
        await settle()
        return [m.offset for m in self.pipeline.parked.get(partition, [])]


async def wait_for_async(condition: Callable[[], bool], what: str) -> None:
    async def check() -> bool:
        return condition()

    await wait_until_async(check, what, 5, interval=0.001)


@pytest.mark.parametrize("how", ["store", "guard"])
async def test_a_lost_ladder_holds_only_its_partition_until_rebuilt(how):
    """East (partition 0) is lost after its first match, west (partition 1) is healthy: west's
    matches are applied, produced and acknowledged while east's are neither and partition 0 is
    paused; once east is rebuilt its parked matches go through in order, exactly once, are
    acknowledged in offset order after the partition's earlier ones, and partition 0 resumes."""
    work = Parking(how)
    batches = stream(range(7))
    losses = counted(metrics.STORE_LOSSES, "east")
    await work.feed(batches[:1])
    work.lose()
    await work.feed(batches[1:4])
    assert "east" in work.handler.health.stopped and "west" not in work.handler.health.stopped
    assert work.applied("west") == ["w0", "w1", "w2", "w3"] and work.applied("east") == ["e0"]
    assert [a for a in work.acked if a[0] == 1] == [(1, o) for o in range(4)]
    assert [a for a in work.acked if a[0] == 0] == [(0, 0)]
    assert (work.paused, work.resumed, await work.parked_offsets(0)) == ([{0}], [], [1, 2, 3])

    await work.feed(batches[4:6])  # fetched before the pause took effect: east's join the parked ones
    assert work.applied("west")[-2:] == ["w4", "w5"] and await work.parked_offsets(0) == [1, 2, 3, 4, 5]
    assert work.handler.health.stopped.keys() == {"east"}

    work.rebuild()
    await work.feed(batches[6:])  # east is back, its parked records are not yet applied: e6 waits
    await wait_for_async(lambda: not work.pipeline.parked, "partition 0 unparked")
    assert work.applied("east") == [f"e{o}" for o in range(7)]
    assert [a for a in work.acked if a[0] == 0] == [(0, o) for o in range(7)]
    assert (work.resumed, work.handler.health.stopped, work.released) == ([{0}], {}, [])
    assert counted(metrics.STORE_LOSSES, "east") - losses == 1  # reported once, not again per batch
    replayed = Processor(TWO, MemoryStore())
    await replay([parse_match(json.loads(r.value), TWO) for b in batches for r in b], replayed)
    for ladder in HOME:
        assert unversioned(await replayed.store.players(ladder)) == unversioned(
            await work.store.players(ladder)
        )


class HoldingProducer(Producer):
    """Holds the sends that carry `match_id`'s events until `gate` is set."""

    def __init__(self, match_id: str) -> None:
        super().__init__()
        self.match_id, self.gate = match_id, asyncio.Event()

    async def send(self, records: list[tuple[str, bytes | None, bytes, list]]) -> None:
        if any(json.loads(v).get("match_id") == self.match_id for _, _, v, _ in records):
            await self.gate.wait()
        await super().send(records)


async def test_parked_records_are_acknowledged_only_after_their_partitions_earlier_ones():
    """e1 is committed but its events wait for the broker when east is lost; e2 is parked, and
    east is back at once. e2 is applied and acknowledged only after e1 was (faust commits a
    partition's acknowledged offsets up to the first gap it sees, not from the committed one)."""
    producer = HoldingProducer("e1")
    work = Parking("guard", producer, max_backoff=0.0)
    batches = stream(range(3))
    await work.feed(batches[:1])
    await work.feed(batches[1:2], drain=False)
    await settle()
    work.lose()
    await work.feed(batches[2:], drain=False)
    await settle()
    assert await work.parked_offsets(0) == [2]
    work.rebuild()
    await settle()
    assert [a for a in work.acked if a[0] == 0] == [(0, 0)]
    producer.gate.set()
    await work.feed([])
    await wait_for_async(lambda: not work.pipeline.parked, "partition 0 unparked")
    assert [a for a in work.acked if a[0] == 0] == [(0, 0), (0, 1), (0, 2)]
    assert work.applied("east") == ["e0", "e1", "e2"]


async def test_a_rebalance_drops_the_parked_records_unacknowledged():
    """A rebalance while partition 0 is parked: its parked records, and those a batch in hand
    still carries, are released, never applied nor acknowledged, even once the ladder is
    back; partition 1 goes on. The partition's records of the next generation are applied."""
    work = Parking()
    batches = stream(range(4))
    await work.feed(batches[:1])
    work.lose()
    await work.feed(batches[1:2])
    assert await work.parked_offsets(0) == [1]
    work.pipeline.abandon()
    work.rebuild()
    await work.feed(batches[2:3])  # taken before the rebalance (same generation)
    await settle()
    assert work.applied("east") == ["e0"] and [a for a in work.acked if a[0] == 0] == [(0, 0)]
    assert work.released == [(0, 1), (0, 2)] and work.applied("west") == ["w0", "w1", "w2"]
    assert work.pipeline.parked == {} and work.resumed == [{0}]

    await work.feed(stream(range(1, 4), generation=1))  # the new owner reads from the committed offset
    assert work.applied("east") == ["e0", "e1", "e2", "e3"]
    assert [a for a in work.acked if a[0] == 0] == [(0, o) for o in range(4)]


async def test_a_worker_stopping_leaves_the_parked_records_unacknowledged():
    """`stop` while partition 0 is parked returns without waiting for the ladder; its records
    are neither applied nor acknowledged."""
    work = Parking()
    batches = stream(range(3))
    await work.feed(batches[:1])
    work.lose()
    await work.feed(batches[1:], drain=False)
    await asyncio.wait_for(work.pipeline.stop(), 5)
    assert work.applied("east") == ["e0"] and [a for a in work.acked if a[0] == 0] == [(0, 0)]
    assert work.applied("west") == ["w0", "w1", "w2"]


async def test_a_store_refusing_every_ladder_holds_every_partition_in_place():
    """A refusal that hits every ladder (a Redis at maxmemory) parks nothing: the batch is held
    in place with backoff, nothing acknowledged, until the store accepts writes again."""
    store = RefusingStore(redis.exceptions.OutOfMemoryError("command not allowed when used memory"))
    producer, acked = Producer(), []
    work = BatchHandler(
        Processor(TWO, store),
        producer.send,
        topics=Topics(updates="updates", dlq="dlq"),
        retrying=Retrying(0.05),
    )
    pipeline = BatchPipeline(work, ack=acked.extend, pause=lambda ps: pytest.fail(f"paused {ps}"))
    store.refusing.set()
    await pipeline.submit(stream(range(1))[0])
    await refused(store, 3)
    assert (acked, producer.sent, pipeline.parked) == ([], [], {})
    store.refusing.clear()
    await asyncio.wait_for(pipeline.drain(), 5)
    assert [(m.partition, m.offset) for m in acked] == [(0, 0), (1, 0)]


async def test_a_parked_partitions_invalid_record_is_dead_lettered_once_after_the_rebuild():
    """An invalid record on the held partition is parked with the partition's matches: not
    dead-lettered (nor acknowledged) while the ladder is lost, dead-lettered once after."""
    work = Parking()
    await work.feed(stream(range(1)))
    work.lose()
    invalid = Record(b"not json", key=b"east", partition=0, offset=1)
    await work.feed([[invalid, on_home("e2", "east", 2, "1", "2"), on_home("w1", "west", 1, "1", "2")]])
    assert [t for t, _, _, _ in work.producer.sent].count("dlq") == 0
    assert await work.parked_offsets(0) == [1, 2]
    work.rebuild()
    await wait_for_async(lambda: not work.pipeline.parked, "partition 0 unparked")
    assert [t for t, _, _, _ in work.producer.sent].count("dlq") == 1
    assert work.applied("east") == ["e0", "e2"]
    assert [a for a in work.acked if a[0] == 0] == [(0, 0), (0, 1), (0, 2)]


async def unproduced(work: Parking, offsets: range) -> dict[str, list[str]]:
    """Per ladder, the matches of `stream(offsets)` whose events the store still holds."""
    return {
        ladder: sorted(await work.store.unproduced(ladder, 0, [f"{ladder[0]}{o}" for o in offsets]))
        for ladder in HOME
    }


async def test_a_clean_stop_leaves_no_produced_events_stored():
    """No next commit names the last batches' matches of a worker that stops: `stop` has the
    store drop their events once produced; the matches stay applied."""
    work = Parking()
    await work.feed(stream(range(3)), drain=False)
    await asyncio.wait_for(work.pipeline.stop(), 5)
    assert work.applied("east") == ["e0", "e1", "e2"]
    assert await unproduced(work, range(3)) == {"east": [], "west": []}
    assert (await work.store.read("east", [], [], ["e2"])).applied == {"e2": []}


async def test_a_rebalance_drops_the_produced_events_once_the_batches_in_hand_are_acknowledged():
    """After a rebalance the batches in hand still finish; once they are acknowledged their
    events, produced, are dropped from the store (not before: they are not with the broker)."""
    gated = GatedProducer()
    work = Parking(producer=gated)
    await work.feed(stream(range(1)), drain=False)
    await settle()
    work.pipeline.abandon()
    await settle()
    assert await unproduced(work, range(1)) == {"east": ["e0"], "west": ["w0"]} and work.acked == []
    gated.gate.set()

    async def dropped() -> bool:
        return await unproduced(work, range(1)) == {"east": [], "west": []}

    await wait_until_async(dropped, "the produced events dropped", 5, interval=0.001)
    assert sorted(work.acked) == [(0, 0), (1, 0)]
