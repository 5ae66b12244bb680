"""A ladder with modes (issue 48) on the memory store: stream = replay whatever the batches,
a player's first match in a mode starts from `first_in_mode` of their other modes, each mode
rates with its own parameters, and live quality is kept per mode."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished, RatingChanged
from stream_rater.contracts.modes import stored_id
from stream_rater.offline.modes import CrossReplay, mode_models
from stream_rater.processor import Processor
from stream_rater.processor.modes import mode_scorer
from stream_rater.processor.quality import LIVE
from stream_rater.rating.base import Rating
from stream_rater.rating.modes import first_in_mode
from stream_rater.store.memory import MemoryStore
from tests.unit.moding import arena, arena_ladders, chained, mixed, moded
from tests.unit.processing import fixed_clock

ARENA = arena()
LADDERS = arena_ladders()


async def run(matches: Sequence[MatchFinished], sizes: Sequence[int]) -> tuple[MemoryStore, list]:
    """Process `matches` in batches of the given sizes, in turn; the store and the events."""
    store, events, lo, i = MemoryStore(), [], 0, 0
    processor = Processor(LADDERS, store, clock=fixed_clock)
    while lo < len(matches):
        size = sizes[i % len(sizes)]
        events += (await processor.process(matches[lo : lo + size])).events
        lo, i = lo + size, i + 1
    return store, events


async def test_stream_equals_replay_whatever_the_batches():
    matches = mixed(90)
    one, one_events = await run(matches, [len(matches)])
    many, many_events = await run(matches, [1, 5, 2, 11])
    assert one_events == many_events
    unversioned = [
        {p: s._replace(version=0) for p, s in (await st.players("arena")).items()} for st in (one, many)
    ]
    assert unversioned[0] == unversioned[1]
    assert {p.partition("@")[0] for p in unversioned[0]} == {"duel", "ffa", "team"}
    assert {e["mode"] for e in one_events} == {"duel", "ffa", "team"}
    own = [e for e in one_events if e.get("kind", "match") == "match"]
    assert all(
        "@" not in e["player_id"] and e["event_id"] == f"{e['match_id']}:{e['player_id']}" for e in own
    )
    cross = [e for e in one_events if e.get("kind") == "cross"]
    assert cross and all(e["event_id"] == f"{e['match_id']}:{e['mode']}@{e['player_id']}" for e in cross)


async def test_a_first_match_in_a_mode_starts_from_the_players_other_modes():
    duels = [moded(f"d{i}", "duel", ["vet"], [f"x{i}"]) for i in range(6)]
    store, _ = await run(duels, [6])
    vet_duel = (await store.players("arena", only=["duel@vet"]))["duel@vet"]
    processor = Processor(LADDERS, store, clock=fixed_clock)
    result = await processor.process([moded("f1", "ffa", ["vet"], ["new"], ["x0"])])
    before = {e["player_id"]: e["before"] for e in result.events if e.get("kind", "match") == "match"}
    ffa_model = ARENA.mode_ladder("ffa").rating_model
    prior = first_in_mode(ffa_model, [Rating(vet_duel.mu, vet_duel.sigma)], 0.6)
    assert (before["vet"]["mu"], before["vet"]["sigma"]) == (prior.mu, prior.sigma)
    assert prior.mu > ffa_model.initial().mu
    # x0 played one duel, lost: their ffa prior is below the plain one; "new" starts plain
    assert before["new"]["mu"] == ffa_model.initial().mu
    assert before["x0"]["mu"] < ffa_model.initial().mu


async def test_each_mode_rates_with_its_own_parameters():
    tie = [moded("d", "duel", ["a"], ["b"]), moded("t", "team", ["c"], ["e"])]
    store, _ = await run(tie, [2])
    duel, team = ARENA.mode_ladder("duel").rating_model, ARENA.mode_ladder("team").rating_model
    assert duel.draw_probability == 0.02 and team.draw_probability == 0.1
    a, c = (await store.players("arena", only=["duel@a", "team@c"])).values()
    assert a.mu != c.mu  # the same result, another draw margin


async def test_live_quality_is_kept_per_mode_and_for_the_ladder():
    matches = mixed(30)
    store, _ = await run(matches, [4])
    counts = {m: sum(1 for x in matches if x.mode == m) for m in ("duel", "ffa", "team")}
    ladder_total, _ = await store.quality("arena", LIVE, 100)
    assert ladder_total
    for mode, n in counts.items():
        _, window = await store.quality("arena", mode_scorer(mode), 100)
        assert len(window) == n


async def test_a_shadow_tries_another_coupling_and_leaves_the_live_ladder_as_it_is():
    wide = Ladder("arena~wide", "trueskill", {"mode_coupling": 1.0}, shadow_of="arena", modes=ARENA.modes)
    shadowed = Ladders([replace(ARENA, shadows=(wide,))])
    matches = mixed(60)
    store, events = MemoryStore(), []
    processor = Processor(shadowed, store, clock=fixed_clock)
    for lo in range(0, len(matches), 8):
        events += (await processor.process(matches[lo : lo + 8])).events
    plain, plain_events = await run(matches, [8])
    assert events == plain_events and await store.players("arena") == await plain.players("arena")
    shadow = await store.players("arena~wide")
    assert shadow.keys() == (await plain.players("arena")).keys()
    assert shadow != await plain.players("arena")  # ρ = 1 against 0.6: other first-in-mode priors


async def test_the_worker_rates_as_the_offline_replay_with_idle_times():
    """What `evaluate`/`tune --modes --form cross` measure (`offline.modes.CrossReplay`) is
    what a worker computes: first-in-mode priors from the other modes as read (aged by idle
    time), cross-updates of the other modes, one ``home`` effect for all modes."""
    params = {"mode_coupling": 0.6, "draw_probability": 0.1, "time_tau": 0.5, "time_unit": "days"}
    aging = Ladder("arena", "trueskill", params, modes=ARENA.modes)
    matches = [replace(m, finished_at=1_000_000.0 + 43_200.0 * i) for i, m in enumerate(mixed(60))]
    matches = [
        replace(m, teams=(replace(m.teams[0], effects=("home",)), *m.teams[1:])) if i % 3 == 0 else m
        for i, m in enumerate(matches)
    ]
    store = MemoryStore()
    await Processor(Ladders([aging]), store, clock=fixed_clock).process(matches)
    replay = CrossReplay(mode_models(aging, dict(aging.modes)), 0.6)
    for m in matches:
        replay.apply(m.mode, m)
    states = await store.players("arena")
    assert states.keys() == {stored_id(mode, p) for p, modes in replay.players.items() for mode in modes}
    for player, modes in replay.players.items():
        for mode, state in modes.items():
            assert (
                states[stored_id(mode, player)].mu,
                states[stored_id(mode, player)].sigma,
            ) == pytest.approx((state.rating.mu, state.rating.sigma), rel=1e-12)
            assert states[stored_id(mode, player)].games == state.games


async def test_cross_moves_are_events_that_keep_each_modes_chain_and_are_re_emitted():
    matches = mixed(60)
    store, events = await run(matches, [1, 5, 2, 11])
    chained(events, await store.players("arena"))
    crossed = [e for e in events if e.get("kind") == "cross"]
    assert crossed and all(e["cross"]["mode"] != e["mode"] for e in crossed)
    assert all(RatingChanged.from_dict(e).to_dict() == e for e in crossed)
    again = await Processor(LADDERS, store, clock=fixed_clock).process(matches[:7])
    assert again.events == events[: len(again.events)]  # a redelivery re-emits the cross events too
