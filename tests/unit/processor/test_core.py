"""`Processor` with shadow models (issue #38), on the in-memory store: a shadow equals a replay
with its parameters, the live ladder stays bit for bit what it is without shadows, and exactly
once holds for the shadow through redelivery, refused commits and failed calls."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import redis.exceptions

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished
from stream_rater.processor import Processor, Target
from stream_rater.store import Commit, CommitConflict
from stream_rater.store.memory import MemoryStore
from tests.unit.processing import fixed_clock
from tests.unit.shadowing import SHADOWED, alone, duels, live


async def run(
    ladders: Ladders, matches: Sequence[MatchFinished], store: MemoryStore | None = None, size: int = 7
):
    """Process `matches` in batches of `size`; the processor and every event, in order."""
    processor = Processor(ladders, store or MemoryStore(), clock=fixed_clock)
    events = []
    for lo in range(0, len(matches), size):
        events += (await processor.process(matches[lo : lo + size])).events
    return processor, events


async def states(store: MemoryStore, ladder: str) -> dict:
    """`ladder`'s stored players, bit for bit, but their versions (a count of the commits, which
    depends on how the matches were batched)."""
    return {p: state._replace(version=0) for p, state in (await store.players(ladder)).items()}


async def replayed(ladder: Ladder, matches: Sequence[MatchFinished]) -> MemoryStore:
    """The oracle: the matches replayed on a live ladder configured with `ladder`'s model and
    parameters, in one batch."""
    processor = Processor(alone(ladder, "duel"), MemoryStore(), clock=fixed_clock)
    await processor.process(matches)
    return processor.store


async def test_each_shadow_equals_a_replay_with_its_parameters_and_the_live_ladder_is_unchanged():
    matches = duels(60)
    shadowed, events = await run(SHADOWED, matches)
    plain, plain_events = await run(Ladders([live()]), matches)
    assert events == plain_events and all(e["ladder"] == "duel" for e in events)
    assert await shadowed.store.players("duel") == await plain.store.players("duel")
    for shadow in SHADOWED["duel"].shadows:
        oracle = await states(await replayed(shadow, matches), "duel")
        assert await states(shadowed.store, shadow.name) == oracle
    wide, mine = await shadowed.store.players("duel~wide"), await shadowed.store.players("duel")
    assert wide["a"].mu != mine["a"].mu and wide.keys() == mine.keys()


async def test_a_shadows_markers_hold_no_events_and_its_priors_are_observed_under_its_name():
    seen: list[str] = []
    processor = Processor(
        SHADOWED, MemoryStore(), clock=fixed_clock, observe=lambda m, t, o: seen.append(m.ladder)
    )
    await processor.process(duels(3))
    assert seen == ["duel"] * 3 + ["duel~wide"] * 3 + ["duel~elo"] * 3
    assert await processor.store.unproduced("duel~wide", 0, ["m0", "m1"]) == {}
    assert set(await processor.store.unproduced("duel", 0, ["m0", "m1"])) == {"m0", "m1"}


async def test_a_redelivered_batch_does_not_apply_twice_to_the_shadow():
    matches = duels(20)
    processor, _ = await run(SHADOWED, matches)
    before = await processor.store.players("duel~wide")
    again = await processor.process(matches[5:15])
    assert all(r.duplicate for r in again.results)
    assert await processor.store.players("duel~wide") == before


class ShadowRefusingStore(MemoryStore):
    """Applies every commit but the shadow `refused`'s, then fails the call with an OOM refusal
    (as Redis refusing one ladder's script would), `failures` times; after that, refuses the
    shadow's commit `conflicts` times as a version conflict."""

    def __init__(self, refused: str, failures: int, conflicts: int) -> None:
        super().__init__()
        self.refused, self.failures, self.conflicts = refused, failures, conflicts

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if not any(c.ladder == self.refused for c in commits):
            return await super().commit_many(commits)
        if self.failures:
            self.failures -= 1
            await super().commit_many([c for c in commits if c.ladder != self.refused])
            raise redis.exceptions.ResponseError("OOM command not allowed when used memory > 'maxmemory'")
        if self.conflicts:
            self.conflicts -= 1
            rest = iter(await super().commit_many([c for c in commits if c.ladder != self.refused]))
            return [CommitConflict("refused") if c.ladder == self.refused else next(rest) for c in commits]
        return await super().commit_many(commits)


async def test_a_refused_shadow_commit_holds_the_batch_and_the_retry_applies_it_once():
    """The shadow's commit refused (OOM) after the live one went through: the call fails (the
    worker holds the batch); the retry reports the live matches applied with the events of the
    first commit, applies the shadow once, and both equal their oracles."""
    matches = duels(30)
    store = ShadowRefusingStore("duel~wide", failures=2, conflicts=2)
    processor = Processor(SHADOWED, store, clock=fixed_clock)
    first = matches[:10]
    for _ in range(2):
        with pytest.raises(redis.exceptions.ResponseError):
            await processor.process(first)
    result = await processor.process(first)
    assert not any(r.duplicate for r in result.results)
    rest = await processor.process(matches[10:])
    assert result.conflicts == 2 and rest.conflicts == 0
    _, plain_events = await run(Ladders([live()]), matches, size=10)
    assert result.events + rest.events == plain_events
    wide = SHADOWED["duel"].shadows[0]
    assert await states(store, "duel~wide") == await states(await replayed(wide, matches), "duel")


async def test_a_match_the_shadow_model_fails_on_is_unrated_in_the_shadow_only(monkeypatch):
    matches = duels(12)
    elo = SHADOWED["duel"].shadows[1].rating_model
    original = elo.rate_match

    def failing(teams, outcome):
        if failing.calls == 4:
            failing.calls += 1
            raise ZeroDivisionError("the shadow's model fails on this one")
        failing.calls += 1
        return original(teams, outcome)

    failing.calls = 0
    monkeypatch.setattr(elo, "rate_match", failing)
    shadowed, events = await run(SHADOWED, matches, size=12)
    _, plain_events = await run(Ladders([live()]), matches, size=12)
    assert events == plain_events
    games = sum(s.games for s in (await shadowed.store.players("duel~elo")).values())
    assert games == 2 * (len(matches) - 1)


async def test_no_shadow_is_rated_when_switched_off():
    processor = Processor(SHADOWED, MemoryStore(), clock=fixed_clock, target=Target(shadows=False))
    await processor.process(duels(3))
    assert await processor.store.ladders() == ["duel"]
