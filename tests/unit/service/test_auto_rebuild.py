"""``STREAM_RATER_ON_STORE_LOSS``: the setting, and the worker's automatic rebuild of a lost
ladder (`service.auto_rebuild`) with a fake rebuild on an in-memory store — when it starts (once
per loss, never while one runs, never again once the topic lacks the ladder's head, a busy or
failed one again after its delay), what readiness says, the ladder held while it runs, and the
held batch's matches after the rebuild's end applied after it in log order (states equal a
replay)."""

from __future__ import annotations

import asyncio
import json

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts import parse_match
from stream_rater.kafka import DeletedHead, HistoryTruncated
from stream_rater.offline.replay import replay
from stream_rater.processor import Processor, StoreLost
from stream_rater.service import metrics
from stream_rater.service.app import ladder_health, loss_guard
from stream_rater.service.auto_rebuild import AutoRebuild, RebuildRunning, rebuild_lock
from stream_rater.service.batch_handler import BatchHandler, Retrying
from stream_rater.service.ladder_health import LadderHealth
from stream_rater.service.store_loss import Loss, LossGuard
from stream_rater.store.base import RerateRunning
from stream_rater.store.memory import MemoryStore
from tests.fault_support import RecordingHealth
from tests.helpers import cli, duel

LADDERS = Ladders([Ladder("default", "trueskill")])
SETTINGS = Settings(consumer_group="raters")


async def no_commits(partitions: object) -> dict[int, int]:
    return {}


async def no_records(partition: int, start: int, end: int) -> list:
    return []


LOST = StoreLost("default", "the store shows 0 matches applied, 10 were")


def test_the_setting_defaults_to_halt_and_refuses_other_values_naming_the_variable():
    assert Settings().on_store_loss == "halt"
    assert Settings.from_env({"STREAM_RATER_ON_STORE_LOSS": "rebuild"}).on_store_loss == "rebuild"
    with pytest.raises(ValueError) as raised:
        Settings.from_env({"STREAM_RATER_ON_STORE_LOSS": "retry"})
    assert str(raised.value) == (
        "STREAM_RATER_ON_STORE_LOSS (--on-store-loss) = 'retry': expected halt or rebuild"
    )


def test_the_worker_refuses_an_unknown_on_store_loss_flag_in_one_line():
    result = cli(
        "worker", "--on-store-loss", "sometimes", "--broker", "kafka://x:1", "--redis-url", "redis://x"
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "stream-rater worker: STREAM_RATER_ON_STORE_LOSS (--on-store-loss) = 'sometimes': expected halt or rebuild"
    ]


def counted(ladder: str, outcome: str) -> float:
    return metrics.STORE_REBUILDS.labels(ladder, outcome)._value.get()


class FakeRebuild:
    """``rebuild(ladder)`` that waits until `release` (or raises `error`), counting its calls."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.calls = error, 0
        self.release = asyncio.Event()

    async def __call__(self, ladder: str) -> str:
        self.calls += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return "rebuilt"


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def auto(rebuild: FakeRebuild, clock: Clock | None = None) -> tuple[AutoRebuild, dict, list]:
    holds: dict[str, StoreLost] = {}
    reported: list[StoreLost] = []
    return (
        AutoRebuild(rebuild, SETTINGS, holds=holds, report=reported.append, clock=clock or Clock()),
        holds,
        reported,
    )


async def finished(rebuilder: AutoRebuild) -> None:
    await asyncio.gather(*rebuilder.tasks.values())


async def test_a_loss_starts_one_rebuild_which_holds_the_ladder_while_it_runs():
    rebuild = FakeRebuild()
    rebuilder, holds, reported = auto(rebuild)
    before = counted("default", "rebuilt")
    note = rebuilder.lost(LOST)
    assert note == "rebuilding ladder 'default' from topic 'matches' (STREAM_RATER_ON_STORE_LOSS=rebuild)"
    assert rebuilder.lost(LOST) == note and rebuilder.lost(RebuildRunning(LOST)) == note
    await asyncio.sleep(0)
    assert rebuild.calls == 1 and isinstance(holds["default"], RebuildRunning)
    assert str(holds["default"]) == str(LOST)
    rebuild.release.set()
    await finished(rebuilder)
    assert holds == {} and rebuilder.notes == {} and reported == []
    assert counted("default", "rebuilt") - before == 1
    assert rebuilder.lost(RebuildRunning(LOST)) is None, "a hold raised before the end is no new loss"
    assert rebuild.calls == 1


async def test_a_topic_without_the_ladders_head_is_refused_for_good_naming_the_offset_and_the_command():
    heads = [DeletedHead("matches", 0, 120)]
    rebuild = FakeRebuild(HistoryTruncated("default", heads))
    rebuild.release.set()
    clock = Clock()
    rebuilder, holds, reported = auto(rebuild, clock)
    before = counted("default", "refused")
    rebuilder.lost(LOST)
    await finished(rebuilder)
    note = (
        "not rebuilt automatically: partition 0 of topic 'matches' starts at offset 120; offsets "
        "0..119 were deleted, so the topic no longer holds the ladder's whole history; rebuild it "
        "with `stream-rater replay --from-topic --ladder default --store URL --consumer-group raters "
        "--history FILE` (FILE: its matches before those offsets)"
    )
    assert rebuilder.notes == {"default": note} and reported == [LOST] and holds == {}
    assert counted("default", "refused") - before == 1
    clock.now += 3600
    assert rebuilder.lost(LOST) == note and rebuild.calls == 1


@pytest.mark.parametrize(
    "error, outcome, says",
    [
        (RerateRunning("default", "host:1:ab", 9.0), "busy", "not rebuilt here: ladder 'default': a re-rate"),
        (ConnectionError("broker gone"), "failed", "its automatic rebuild failed (ConnectionError"),
    ],
)
async def test_a_busy_or_failed_rebuild_is_tried_again_after_its_delay(error, outcome, says):
    rebuild = FakeRebuild(error)
    rebuild.release.set()
    clock = Clock()
    rebuilder, holds, reported = auto(rebuild, clock)
    before = counted("default", outcome)
    rebuilder.lost(LOST)
    await finished(rebuilder)
    assert rebuilder.notes["default"].startswith(says) and holds == {}
    assert reported == ([] if outcome == "busy" else [LOST])
    assert counted("default", outcome) - before == 1
    assert rebuilder.lost(LOST).startswith(says) and rebuild.calls == 1, "not at once"
    clock.now += 10.0
    rebuilder.lost(LOST)
    await finished(rebuilder)
    assert rebuild.calls == 2


async def test_the_guard_holds_a_ladder_being_rebuilt_or_locked_even_once_its_missing_matches_are_back():
    """The loss's missing matches (none here) are all applied: only the rebuild running here,
    or another's lock, keeps the ladder held."""
    store = MemoryStore()
    health = RecordingHealth()
    guard = LossGuard(store, LADDERS, no_commits, no_records, health=health)
    guard.lost["default"] = Loss(LOST, ())
    guard.rebuilding["default"] = RebuildRunning(LOST)
    with pytest.raises(RebuildRunning):
        await guard.hold(["default"])
    assert not await guard._back("default")
    del guard.rebuilding["default"]
    async with rebuild_lock(store, "default", "elsewhere", 10.0):
        with pytest.raises(StoreLost):
            await guard.hold(["default"])
    await guard.hold(["default"])
    assert (guard.lost, health.back) == ({}, ["default"])


async def test_the_rebuild_lock_is_one_rebuilders_at_a_time_and_released_at_the_end():
    store = MemoryStore()
    async with rebuild_lock(store, "default", "first", 10.0):
        with pytest.raises(RerateRunning):
            async with rebuild_lock(store, "default", "second", 10.0):
                pass
        assert (await store.generations("default")).lock_owner == "first"
    found = await store.generations("default")
    assert (found.lock_owner, found.staging) == (None, None)


def _duels(n: int) -> list:
    return [parse_match(duel(f"m{i}", f"p{i % 5}", f"p{(i + 2) % 5}", at=i), LADDERS) for i in range(n)]


class Message:
    """A consumed record of match `i` at offset `i`."""

    def __init__(self, i: int) -> None:
        self.value = json.dumps(duel(f"m{i}", f"p{i % 5}", f"p{(i + 2) % 5}", at=i)).encode()
        self.key, self.topic, self.partition, self.offset = b"default", "matches", 0, i


async def test_the_held_batch_waits_for_the_rebuild_then_applies_its_matches_after_the_rebuilds_end_in_order():
    """Ten matches applied, the store lost, the held batch m10..m19; the rebuild reads the
    topic up to m14 and pauses half-way, past the worker's watermark: the batch stays held and
    readiness says so; afterwards m15..m19 are applied after the rebuild's, and every state
    equals a replay of m0..m19."""
    matches = _duels(20)
    sent: list = []

    async def send(records: list) -> None:
        sent.extend(records)

    processor = Processor(LADDERS, MemoryStore())
    lost = MemoryStore()

    halfway, go_on = asyncio.Event(), asyncio.Event()

    async def rebuild(ladder: str) -> str:
        rebuilder_processor = Processor(LADDERS, lost)
        await rebuilder_processor.process(matches[:12], [(0, i) for i in range(12)])
        halfway.set()
        await go_on.wait()
        await rebuilder_processor.process(matches[12:15], [(0, i) for i in range(12, 15)])
        return "rebuilt"

    health = LadderHealth(SETTINGS, rebuild)
    guard = LossGuard(lost, LADDERS, no_commits, no_records, health=health)
    handler = BatchHandler(processor, send, retrying=Retrying(0.01), health=health, guard=guard)
    guard.assigned([0])  # no committed offset: nothing found lost at assignment
    await handler.handle([Message(i) for i in range(10)])
    processor.store = lost  # Redis restarted empty
    held = asyncio.ensure_future(handler.handle([Message(i) for i in range(10, 20)]))
    await asyncio.wait_for(halfway.wait(), 5)
    for _ in range(20):
        await asyncio.sleep(0.005)  # the handler retries every 10 ms meanwhile
    assert not held.done() and "rebuilding ladder 'default'" in health.stopped["default"]
    assert (await lost.read("default", [], [], [])).watermark == 12, "the worker applied nothing"
    go_on.set()
    await asyncio.wait_for(held, 5)
    assert health.stopped == {}

    replayed = MemoryStore()
    await replay(matches, Processor(LADDERS, replayed))
    players = [f"p{i}" for i in range(5)]
    assert await lost.players("default", players) == await replayed.players("default", players)
    worker_events = {json.loads(value)["match_id"] for _, _, value, _ in sent}
    assert {f"m{i}" for i in range(15, 20)} <= worker_events


@pytest.mark.parametrize("mode", ["halt", "rebuild"])
async def test_only_rebuild_tells_an_auto_rebuild_of_each_loss(mode):
    health = ladder_health(Settings(on_store_loss=mode), LADDERS)
    guard = loss_guard(Settings(on_store_loss=mode), LADDERS, MemoryStore(), health)
    assert guard.rebuilding is health.rebuilding
    if mode == "halt":
        assert health.rebuilder is None
        health.report_loss(LOST)
        assert health.stopped == {"default": str(LOST)}
    else:
        assert health.rebuilder is not None and health.rebuilder.holds is health.rebuilding
        assert health.rebuilder.report == health.report_loss
