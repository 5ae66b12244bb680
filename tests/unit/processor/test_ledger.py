"""The prediction-quality sums a processor reports (`BatchResult.quality`, the worker's
Prometheus counters) equal what the store added, whatever the store's calls lost: a commit is
counted once, by the call that settles its matches (`CommitLedger.settle`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import pytest
import redis.exceptions

from stream_rater.contracts import parse_match
from stream_rater.processor import BatchResult, Processor, Retries, TooManyConflicts
from stream_rater.processor.quality import LIVE
from stream_rater.store import Commit, CommitConflict
from stream_rater.store.memory import MemoryStore
from tests.store_faults import LateLanding
from tests.unit.processing import LADDERS, fixed_clock, match


class LostReplyStore(MemoryStore):
    """Fails its first `lost` commit calls as a lost connection: after applying them (the
    reply was lost) or, `applied=False`, before (the request was)."""

    def __init__(self, lost: int = 1, *, applied: bool = True) -> None:
        super().__init__()
        self.lost, self.applied = lost, applied

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if self.lost and not self.applied:
            self.lost -= 1
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        refusals = await super().commit_many(commits)
        if self.lost:
            self.lost -= 1
            raise redis.exceptions.TimeoutError("Timeout reading from socket")
        return refusals


def counted_quality(results: Sequence[BatchResult], ladder: str = "default") -> dict[str, float]:
    """The live quality sums of `ladder` the processor's returned `results` report (what the
    worker adds to its Prometheus counters)."""
    totals: dict[str, float] = {}
    for result in results:
        for name, scorer, add in result.quality:
            if (name, scorer) == (ladder, LIVE):
                for field, value in add.items():
                    totals[field] = totals.get(field, 0) + value
    return totals


async def returned(processor: Processor, *batches: list) -> list[BatchResult]:
    """What `processor` returns for each of `batches`, each retried as the worker's handler
    does when its store call fails."""
    results = []
    for batch in batches:
        for _ in range(4):
            with contextlib.suppress(redis.exceptions.RedisError, TooManyConflicts):
                results.append(await processor.process(batch))
                break
    return results


@pytest.mark.parametrize(
    "store",
    [
        lambda: LostReplyStore(),
        lambda: LostReplyStore(applied=False),
        lambda: LateLanding(MemoryStore()),
        lambda: LostReplyStore(lost=2),
    ],
    ids=["reply-lost", "request-lost", "landing-late", "two-replies-lost"],
)
async def test_the_quality_a_retried_batch_reports_equals_what_the_store_added(store):
    """A commit whose reply was lost, or that landed late, is counted in the quality the
    retry returns, exactly once; one that never landed is not: the returned batches' sums
    equal the store's."""
    store = store()
    processor = Processor(LADDERS, store, clock=fixed_clock)
    batch = [match("m1", ["a"], ["b"]), match("m2", ["b"], ["c"]), match("m3", ["a", "c"], ["d", "e"])]
    results = await returned(processor, batch, [*batch, match("m4", ["a"], ["e"])])
    stored, _ = await store.quality("default", LIVE, 0)
    assert stored["matches"] == 4
    assert counted_quality(results) == pytest.approx(stored)


class Unwrapped:
    """A faulty memory store seen without its faults (a rival processor's view of it)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        return await MemoryStore.commit_many(self.store, commits)


class RivalBetweenLosses(MemoryStore):
    """Its first commit call is lost unapplied, and a rival processor then rates a match of
    one of its players; its second is applied and its reply lost."""

    def __init__(self) -> None:
        super().__init__()
        self.calls, self.rival_results = 0, []

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        self.calls += 1
        if self.calls == 1:
            rival = Processor(LADDERS, Unwrapped(self), clock=fixed_clock)
            self.rival_results.append(await rival.process([match("r1", ["a"], ["z"])]))
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        refusals = await super().commit_many(commits)
        if self.calls == 2:
            raise redis.exceptions.TimeoutError("Timeout reading from socket")
        return refusals


async def test_the_quality_counted_is_the_landed_commits_when_a_rival_moved_a_player_between_the_losses():
    """Two lost commits of the same matches, computed from different states (a rival moved a
    player between them): the one that landed, the last, is the one counted."""
    store = RivalBetweenLosses()
    processor = Processor(LADDERS, store, clock=fixed_clock)
    results = await returned(processor, [match("m1", ["a"], ["b"])])
    stored, _ = await store.quality("default", LIVE, 0)
    assert stored["matches"] == 2
    assert counted_quality(results + store.rival_results) == pytest.approx(stored)


class RefusesOnce(MemoryStore):
    """Refuses its first commit of `ladder` as a conflict; applies everything else."""

    def __init__(self, ladder: str) -> None:
        super().__init__()
        self.ladder, self.refused = ladder, False

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if self.refused:
            return await super().commit_many(commits)
        self.refused = True
        kept = [c for c in commits if c.ladder != self.ladder]
        outcomes = iter(await super().commit_many(kept))
        return [CommitConflict("conflict") if c.ladder == self.ladder else next(outcomes) for c in commits]


async def test_the_quality_of_a_ladder_applied_beside_one_refused_too_often_is_reported_by_the_retry():
    """One ladder's commit is refused past the processor's attempts while another ladder's,
    in the same call, is applied: the retry reports both ladders' quality."""
    store = RefusesOnce("default")
    processor = Processor(LADDERS, store, clock=fixed_clock, retries=Retries(max_attempts=1))
    batch = [match("a1", ["a"], ["b"]), match("t1", ["c"], ["d"], ladder="timed")]
    results = await returned(processor, batch)
    assert len(results) == 1 and [r.duplicate for r in results[0].results] == [False, False]
    for ladder in ("default", "timed"):
        stored, _ = await store.quality(ladder, LIVE, 0)
        assert stored["matches"] == 1
        assert counted_quality(results, ladder) == pytest.approx(stored)


class SecondCallFails(MemoryStore):
    """Fails its second commit call, unapplied, as a connection lost before it was sent."""

    calls = 0

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        self.calls += 1
        if self.calls == 2:
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        return await super().commit_many(commits)


async def test_the_quality_of_a_segment_committed_before_its_call_failed_is_reported_by_the_retry():
    """A batch cut by a season start commits its first part, then its call fails: the retry
    finds the first part applied and reports its quality, which the failed call never returned."""
    store = SecondCallFails()
    processor = Processor(LADDERS, store, clock=fixed_clock)
    season = parse_match(
        {"kind": "season", "match_id": "s1", "ladder": "default", "finished_at": 1_000_001.0}, LADDERS
    )
    batch = [match("m1", ["a"], ["b"]), season, match("m2", ["b"], ["c"], at=1_000_002.0)]
    with pytest.raises(redis.exceptions.ConnectionError):
        await processor.process(batch)
    result = await processor.process(batch)
    assert [r.duplicate for r in result.results] == [False, False, False]
    stored, _ = await store.quality("default", LIVE, 0)
    assert stored["matches"] == 2
    assert counted_quality([result]) == pytest.approx(stored)
