"""The processor on the in-memory store: order, idempotency, unrated players, effects,
conflict retries and O(1) store round trips per batch."""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib.resources import files
from unittest.mock import ANY

import jsonschema
import pytest
import redis.exceptions

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import RatingChanged, parse_match
from stream_rater.processor import NonFiniteRating, Processor, StoreLost, Target, Unratable, is_late
from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.trueskill import TrueSkill
from stream_rater.store import Commit, CommitConflict
from stream_rater.store.memory import MemoryStore
from tests.helpers import match as wire_match
from tests.store_faults import LateLanding
from tests.unit.processing import LADDERS, fixed_clock, match


@pytest.fixture
def processor() -> Processor:
    return Processor(LADDERS, MemoryStore(), clock=fixed_clock)


async def test_batch_equals_one_match_at_a_time(processor):
    """A later match in a batch sees the earlier ones' results, exactly as if sent singly."""
    matches = [match("m1", ["a"], ["b"]), match("m2", ["b"], ["c"]), match("m3", ["c"], ["a"])]
    batched = (await processor.process(matches)).events
    single = Processor(LADDERS, MemoryStore(), clock=fixed_clock)
    one_by_one = [e for m in matches for e in (await single.process([m])).events]
    assert batched == one_by_one
    assert [e["games"] for e in batched if e["player_id"] == "b"] == [1, 2]


async def test_events_carry_the_contract_fields(processor):
    """Each rated player gets one rating-changed event with before/after, rating and delta."""
    [event_a, event_b] = (await processor.process([match("m1", ["a"], ["b"])])).events
    assert event_a["event_id"] == "m1:a" and event_a["model"] == "trueskill"
    assert event_a["before"] == {"mu": 25.0, "sigma": pytest.approx(25 / 3), "rating": pytest.approx(0.0)}
    assert event_a["after"]["mu"] > 25.0 > event_b["after"]["mu"]
    assert event_a["rating"] == pytest.approx(event_a["after"]["mu"] - 3 * event_a["after"]["sigma"])
    assert event_a["delta"] == pytest.approx(event_a["after"]["mu"] - 25.0)
    assert event_a["processed_at"] == "2023-11-14T22:13:20Z"


async def test_events_carry_the_rating_players_saw_before_and_its_change(processor):
    """``before.rating`` is the closed-form display rating of the state before (μ − 3σ for
    TrueSkill, μ for an Elo model), so it equals the player's previous event's ``rating``,
    and ``rating_delta`` is exactly ``rating`` − ``before.rating`` — also where μ did not move
    (a draw between equals) but the display rating did (σ shrank)."""
    first = (await processor.process([match("m1", ["a"], ["b"])])).events
    drawn = (
        await processor.process(
            [match("m2", ["a"], ["b"]), parse_match(wire_match("m3", ["c"], ["d"], ranks=[0, 0]), LADDERS)]
        )
    ).events
    for event in first + drawn:
        before = event["before"]
        assert before["rating"] == before["mu"] - 3 * before["sigma"]
        assert event["rating_delta"] == event["rating"] - before["rating"]
        assert (
            event["rating"] == event["after"]["rating"] == event["after"]["mu"] - 3 * event["after"]["sigma"]
        )
    assert (
        drawn[0]["before"]["rating"] == first[0]["rating"]
        and drawn[0]["before"]["mu"] == first[0]["after"]["mu"]
    )
    [c] = [e for e in drawn if e["player_id"] == "c"]
    assert c["rating_delta"] > 0.5 and c["delta"] == 0.0
    sph = {"ladder": "sph", "finished_at": 0}
    teams = [
        {"score": s, "players": [{"id": p, "score": s, "seconds_played": 900}]}
        for p, s in (("a", 3), ("b", 1))
    ]
    for event in (
        await processor.process([parse_match({**sph, "match_id": "s1", "teams": teams}, LADDERS)])
    ).events:
        assert event["before"] == {"mu": 500.0, "sigma": None, "rating": 500.0}
        assert event["rating_delta"] == event["rating"] - 500.0 == event["delta"]


async def test_redelivered_match_changes_nothing_and_reemits(processor):
    """A match applied before is reported duplicate with its stored events, states untouched."""
    first = await processor.process([match("m1", ["a"], ["b"])])
    states = await processor.store.players("default")
    again = await processor.process([match("m1", ["a"], ["b"]), match("m1", ["a"], ["b"])])
    assert [r.duplicate for r in again.results] == [True, True]
    assert again.results[0].events == first.events
    assert await processor.store.players("default") == states


async def test_markers_keep_their_events_until_produced_then_shrink_at_the_next_commit():
    """A batch committed but never produced (the worker died) re-emits its events when it is
    redelivered; once produced, the ladder's next commit — no extra round trip — empties those
    markers, and a later redelivery is still a duplicate, with nothing to re-emit."""
    store = MemoryStore()
    batch = [match("m1", ["a"], ["b"]), match("m2", ["b"], ["c"])]
    first = await Processor(LADDERS, store, clock=fixed_clock).process(batch)
    restarted = Processor(LADDERS, store, clock=fixed_clock)
    again = await restarted.process(batch)
    assert [r.duplicate for r in again.results] == [True, True] and again.events == first.events
    restarted.produced(again)
    assert (await store.read("default", [], [], ["m1"])).applied == {"m1": first.results[0].events}
    trips = store.round_trips
    third = await restarted.process([match("m3", ["c"], ["d"])])
    assert store.round_trips - trips == 2
    applied = (await store.read("default", [], [], ["m1", "m2", "m3"])).applied
    assert applied == {"m1": [], "m2": [], "m3": third.events}
    late = await restarted.process(batch)
    assert [(r.duplicate, r.events) for r in late.results] == [(True, []), (True, [])]


async def test_a_staging_generation_stores_markers_without_events():
    """A re-rate's events are never produced, so its markers are written shrunk."""
    store = MemoryStore()
    generation, _ = await store.begin_rerate("default", "me", 60.0, None)
    result = await Processor(LADDERS, store, target=Target(generation)).process([match("m1", ["a"], ["b"])])
    assert len(result.events) == 2
    assert (await store.read("default", [], [], ["m1"], generation)).applied == {"m1": []}


async def test_duplicate_inside_one_batch_is_applied_once(processor):
    """The same match twice in one batch is applied once and re-emitted the second time."""
    result = await processor.process([match("m1", ["a"], ["b"]), match("m1", ["a"], ["b"])])
    assert [r.duplicate for r in result.results] == [False, True]
    assert (await processor.store.players("default"))["a"].games == 1


async def test_unrated_player_takes_no_part(processor):
    """An unrated player gets no event, keeps no state, and does not affect the others' ratings
    (only what the read API expected of the team, which is asked with the team as it played)."""
    event = {
        "match_id": "m1",
        "finished_at": 1_000_000.0,
        "teams": [
            {"rank": 0, "players": [{"id": "a"}, {"id": "x", "rated": False}]},
            {"rank": 1, "players": [{"id": "b"}]},
        ],
    }
    events = (await processor.process([parse_match(event, LADDERS)])).events
    plain = (
        await Processor(LADDERS, MemoryStore(), clock=fixed_clock).process([match("m1", ["a"], ["b"])])
    ).events
    assert [e["player_id"] for e in events] == ["a", "b"]
    assert [{**e, "expected": None} for e in events] == [{**e, "expected": None} for e in plain]
    assert "x" not in await processor.store.players("default")


async def test_effects_are_learned_stored_apart_and_never_ranked(processor):
    """A team's 'home' effect is rated like an extra member starting at 0, stored as an
    effect, never ranked."""
    event = {
        "match_id": "m1",
        "finished_at": 1_000_000.0,
        "teams": [
            {"rank": 0, "players": [{"id": "a"}], "effects": ["home"]},
            {"rank": 1, "players": [{"id": "b"}]},
        ],
    }
    events = (await processor.process([parse_match(event, LADDERS)])).events
    effects = await processor.store.players("default", effects=True)
    assert effects["home"].mu > 0.0 and effects["home"].games == 1
    assert [e["player_id"] for e in events] == ["a", "b"]
    assert [p for p, _ in await processor.store.leaderboard("default", 10)] == ["a", "b"]
    ts = TrueSkill()
    expected = ts.rate([[ts.initial(), ts.initial_effect()], [ts.initial()]], ranks=[0, 1])
    assert events[0]["after"]["mu"] == pytest.approx(expected[0][0].mu)


async def test_states_changed_twice_are_written_once_one_version_up(processor):
    """A player in two matches of a batch, and an effect on both teams of one match, are each
    written once, one version past the stored one."""
    both = {
        "match_id": "m2",
        "finished_at": 2_000_000.0,
        "teams": [
            {"rank": 0, "players": [{"id": "a"}], "effects": ["map"]},
            {"rank": 1, "players": [{"id": "c"}], "effects": ["map"]},
        ],
    }
    await processor.process([match("m0", ["a"], ["b"])])
    await processor.process([match("m1", ["a"], ["b"]), parse_match(both, LADDERS)])
    players = await processor.store.players("default")
    effects = await processor.store.players("default", effects=True)
    assert (players["a"].version, players["a"].games, players["b"].version, players["c"].version) == (
        2,
        3,
        2,
        1,
    )
    assert effects["map"].version == 1


async def test_time_since_last_match_feeds_time_scaled_dynamics(processor):
    """With time-scaled dynamics, a longer gap since the last match means a larger sigma before."""
    day = 86400.0
    await processor.process([match("m1", ["a"], ["b"], ladder="timed", at=0.0)])
    events = (
        await processor.process(
            [
                match("m2", ["a"], ["c"], ladder="timed", at=1 * day),
                match("m3", ["b"], ["d"], ladder="timed", at=30 * day),
            ]
        )
    ).events
    after_m1 = await processor.store.players("timed")
    assert after_m1["a"].last_played == day and after_m1["b"].last_played == 30 * day
    sigma_change = {e["player_id"]: e["after"]["sigma"] for e in events}
    assert sigma_change["b"] > sigma_change["a"]


async def test_a_late_match_is_applied_in_log_order_and_marked_for_the_late_player(processor):
    """A match older than a player's last applied one is applied where it comes, adds no
    inactivity time, keeps `last_played`, and marks only that player's event ``late``."""
    day = 86400.0
    await processor.process([match("m1", ["a"], ["b"], ladder="timed", at=10 * day)])
    before = (await processor.store.players("timed"))["a"]
    result = (await processor.process([match("m0", ["a"], ["c"], ladder="timed", at=2 * day)])).results[0]
    assert is_late(result)
    late = {e["player_id"]: e.get("late") for e in result.events}
    assert late == {"a": True, "c": None}
    after = (await processor.store.players("timed"))["a"]
    assert (after.games, after.last_played) == (2, 10 * day)
    no_gap = TrueSkill(time_tau=1.0, time_unit="days").rate_match(
        [[Rating(before.mu, before.sigma)], [Rating(25.0, 25 / 3)]],
        Outcome(ranks=[0, 1], elapsed=[[0.0], [None]]),
    )
    assert result.events[0]["after"] == {"mu": no_gap[0][0].mu, "sigma": no_gap[0][0].sigma, "rating": ANY}
    in_order = (await processor.process([match("m2", ["a"], ["b"], ladder="timed", at=11 * day)])).results[0]
    assert not is_late(in_order)


async def test_one_read_and_one_commit_per_batch(processor):
    """Round trips per batch are O(1): one read, one commit, whatever the batch size."""
    matches = [match(f"m{i}", [f"p{i % 7}"], [f"p{(i + 3) % 7}"]) for i in range(200)]
    await processor.process(matches)
    assert processor.store.round_trips == 2


async def test_a_batch_of_many_ladders_costs_one_read_and_one_commit():
    """Round trips per batch do not grow with the ladders it spans, and each ladder's states
    equal its matches applied alone, in order."""
    names = [f"l{i}" for i in range(16)]
    ladders = Ladders([Ladder(name, "trueskill") for name in names])
    matches = [
        parse_match(
            {
                "match_id": f"m{i}",
                "ladder": names[i % 16],
                "finished_at": i,
                "teams": [
                    {"rank": 0, "players": [{"id": f"p{i % 5}"}]},
                    {"rank": 1, "players": [{"id": "q"}]},
                ],
            },
            ladders,
        )
        for i in range(160)
    ]
    store = MemoryStore()
    await Processor(ladders, store, clock=fixed_clock).process(matches)
    assert store.round_trips == 2
    for name in names:
        alone = MemoryStore()
        await Processor(ladders, alone, clock=fixed_clock).process([m for m in matches if m.ladder == name])
        assert await store.players(name) == await alone.players(name)


class OneLadderDownStore(MemoryStore):
    """Applies the commits of every ladder but `down`, then fails the call with a connection
    error while `failures` last (as a Redis Cluster with one master unreachable would)."""

    def __init__(self, down: str, failures: int) -> None:
        super().__init__()
        self.down, self.failures = down, failures

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if self.failures and any(c.ladder == self.down for c in commits):
            self.failures -= 1
            await super().commit_many([c for c in commits if c.ladder != self.down])
            raise redis.exceptions.ConnectionError("the ladder's master is unreachable")
        return await super().commit_many(commits)


async def test_ladders_committed_before_a_failed_call_still_count_as_applied_on_every_retry():
    """A batch over two ladders: one ladder commits, the call fails for the other twice; the
    third call reports both matches as applied (not one as a duplicate), with the events of
    the first commit."""
    store = OneLadderDownStore("timed", failures=2)
    processor = Processor(LADDERS, store, clock=fixed_clock)
    batch = [match("a1", ["a"], ["b"]), match("t1", ["c"], ["d"], ladder="timed")]
    for _ in range(2):
        with pytest.raises(redis.exceptions.ConnectionError):
            await processor.process(batch)
    first = (await store.players("default"))["a"]
    result = await processor.process(batch)
    assert [(r.match.match_id, r.duplicate) for r in result.results] == [("a1", False), ("t1", False)]
    assert (await store.players("default"))["a"] == first
    again = await processor.process(batch)
    assert [r.duplicate for r in again.results] == [True, True]


async def test_a_commit_landing_late_counts_as_applied_though_the_retrys_commit_was_refused():
    """The retry's commit is refused (the late commit moved the ladder); that refusal says
    nothing of the late commit, so the re-read finds its matches applied by this processor:
    applied, not duplicates."""
    store = LateLanding(MemoryStore())
    processor = Processor(LADDERS, store, clock=fixed_clock)
    batch = [match("m1", ["a"], ["b"]), match("m2", ["b"], ["c"])]
    with pytest.raises(redis.exceptions.TimeoutError):
        await processor.process(batch)
    result = await processor.process(batch)
    assert (result.conflicts, [r.duplicate for r in result.results]) == (1, [False, False])
    assert (await store.players("default"))["b"].games == 2
    again = await processor.process(batch)
    assert [r.duplicate for r in again.results] == [True, True]


class InterferingStore(MemoryStore):
    """Lets a rival processor commit between this store's read and commit, `times` times."""

    def __init__(self, rival_matches: list, times: int) -> None:
        super().__init__()
        self.rival = Processor(LADDERS, self, clock=fixed_clock)
        self.rival_matches = rival_matches
        self.times = times
        self.rival_running = False

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if self.times and not self.rival_running:
            self.times -= 1
            self.rival_running = True
            await self.rival.process([self.rival_matches.pop(0)])
            self.rival_running = False
        return await super().commit_many(commits)


async def test_conflict_is_retried_without_losing_updates():
    """A commit refused because a rival changed a player is recomputed on fresh states."""
    store = InterferingStore([match("r1", ["a"], ["z"]), match("r2", ["z"], ["a"])], times=2)
    processor = Processor(LADDERS, store, clock=fixed_clock)
    result = await processor.process([match("m1", ["a"], ["b"])])
    assert result.conflicts == 2
    players = await store.players("default")
    assert players["a"].games == 3 and players["z"].games == 2 and players["b"].games == 1
    [event_a, _] = result.events
    assert event_a["before"]["mu"] != 25.0


async def test_sph_ladder_uses_scores_and_time(processor):
    """An SPH Elo ladder rates by score per hour, starting players at 500 with no sigma."""
    event = {
        "match_id": "s1",
        "ladder": "sph",
        "finished_at": 0,
        "teams": [
            {"score": 12, "players": [{"id": "a", "score": 12, "seconds_played": 900}]},
            {"score": 9, "players": [{"id": "b", "score": 9, "seconds_played": 1200}]},
        ],
    }
    [ea, eb] = (await processor.process([parse_match(event, LADDERS)])).events
    assert ea["before"] == {"mu": 500.0, "sigma": None, "rating": 500.0} and ea["model"] == "sph-elo"
    assert ea["delta"] == pytest.approx(-eb["delta"]) and ea["delta"] > 0


async def test_emitted_events_satisfy_the_published_contract(processor):
    """Every emitted event passes the rating-changed JSON Schema and `RatingChanged.from_dict`."""
    schema = json.loads(
        files("stream_rater").joinpath("contracts/schemas/rating_changed.schema.json").read_text()
    )
    validator = jsonschema.Draft202012Validator(schema)
    event = {
        "match_id": "m1",
        "finished_at": "2004-08-06T18:13:50Z",
        "teams": [
            {"rank": 0, "players": [{"id": "a"}, {"id": "b", "weight": 0.5}]},
            {"rank": 1, "players": [{"id": "c"}]},
            {"rank": 1, "players": [{"id": "d"}]},
        ],
    }
    events = (await processor.process([parse_match(event, LADDERS)])).events
    assert len(events) == 4
    for e in events:
        validator.validate(e)
        assert RatingChanged.from_dict(e).to_dict() == e


async def test_non_finite_posterior_is_refused_and_nothing_is_stored(processor, monkeypatch):
    """A model returning NaN makes the match fail loudly instead of storing a NaN rating."""
    model = LADDERS.get("default").rating_model
    monkeypatch.setattr(
        model, "rate_match", lambda teams, outcome: [[Rating(float("nan"), 1.0)], [Rating(1.0, 1.0)]]
    )
    with pytest.raises(Unratable) as raised:
        await processor.process([match("m1", ["a"], ["b"])])
    assert isinstance(raised.value.cause, NonFiniteRating)
    assert await processor.store.players("default") == {}


async def test_a_store_showing_less_than_was_committed_is_lost_and_nothing_is_written():
    """The watermark only grows: a read that shows fewer applied matches than this processor
    committed raises StoreLost and commits nothing."""
    processor = Processor(LADDERS, MemoryStore(), clock=fixed_clock)
    await processor.process([match("m1", ["a"], ["b"])])
    processor.store = MemoryStore()
    with pytest.raises(StoreLost, match="shows 0 matches applied, 1 were"):
        await processor.process([match("m2", ["a"], ["c"])])
    assert await processor.store.players("default") == {}


async def test_an_empty_store_under_suspicion_refuses_ladders_until_they_are_rebuilt():
    """With `suspect_empty` (start-up found the store empty although offsets were committed), a
    ladder with no watermark is lost; one rebuilt from the topic is applied."""
    rebuilt = MemoryStore()
    await Processor(LADDERS, rebuilt).process([match("m1", ["a"], ["b"])])
    suspicious = Processor(LADDERS, MemoryStore(), suspect_empty=True)
    with pytest.raises(StoreLost, match="store is empty"):
        await suspicious.process([match("m2", ["a"], ["c"])])
    suspicious.store = rebuilt
    assert not (await suspicious.process([match("m2", ["a"], ["c"])])).results[0].duplicate
