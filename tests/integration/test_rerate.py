"""Re-rates on the in-memory store and on a real Redis against an independent oracle: a
fresh replay of the history without the voided matches (or with the new parameters), while a
live processor keeps applying matches between the re-rate's steps."""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Collection

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from stream_rater.checkpoints import Replica
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import RatingChanged, parse_match
from stream_rater.corrections.rerate import Correction, Entry, Rerate, RerateOptions, Tuning, UnknownMatches
from stream_rater.offline.verify import board_differences
from stream_rater.processor import Processor, StoreLost, process_skipping
from stream_rater.store import open_store
from stream_rater.store.base import RerateRunning
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel, parsed_duel, poison_model, poisoned

#: The tests' ladder: a fresh name, so they never share Redis state with other tests.
NAME = f"rr-{uuid.uuid4().hex[:8]}"
LADDERS = Ladders([Ladder(NAME, "trueskill")])


@pytest.fixture(params=["memory", "redis", "redis_cluster"])
async def store(request):
    """A fresh store of each kind; the Redis ones on the suite's real Redis server and local
    Redis Cluster, with the ladder's keys deleted first."""
    if request.param == "memory":
        s = open_store("memory")
    else:
        s = open_store(request.getfixturevalue(f"{request.param}_url"))
        keys = [k async for k in s.client.scan_iter(match=f"sr:{{{NAME}}}*")]
        if keys:
            await s.client.unlink(*keys)
    yield s
    await s.close()


def matches(n: int, seed: int = 7, players: int = 12, poison: Collection[int] = ()) -> list[Entry]:
    """`n` 1v1 matches among `players` players, each at offset i of partition 0; those at
    the indices `poison` are `poisoned`."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.sample(range(players), 2)
        event = duel(f"m{i}", f"p{a}", f"p{b}", ladder=NAME, at=1_700_000_000 + 3600 * i)
        out.append((parse_match(poisoned(event) if i in poison else event, LADDERS), (0, i)))
    return out


async def replayed(entries: list[Entry], ladders: Ladders = LADDERS) -> dict:
    """The oracle: states after applying `entries` in order to an empty in-memory store."""
    processor = Processor(ladders, MemoryStore())
    await process_skipping(processor, [m for m, _ in entries], [w for _, w in entries])
    return await processor.store.players(NAME)


class LiveLog:
    """A topic and a live worker on it: each `read` by the re-rate first lets the worker
    apply `step` more matches, as a worker running beside the re-rate would."""

    def __init__(self, entries: list[Entry], live: Processor, applied: int, step: int) -> None:
        self.entries, self.live, self.done, self.step = entries, live, applied, step
        self.produced = applied  # matches whose events the worker produced (and so acknowledged)
        self._read = self._began = 0

    async def advance(self, n: int, produce: bool = True) -> None:
        """The worker applies the next `n` matches (a match the model cannot rate is
        dead-lettered) and, if `produce`, produces their events."""
        chunk = self.entries[self.done : self.done + n]
        if chunk:
            result, _ = await process_skipping(self.live, [m for m, _ in chunk], [w for _, w in chunk])
            if produce:
                self.live.produced(result)
        self.done += len(chunk)
        if produce and self.produced == self.done - len(chunk):
            self.produced = self.done

    async def read(self) -> list[Entry]:
        if not self._read:
            self._began = self.produced
        await self.advance(self.step)
        new, self._read = self.entries[self._read :], len(self.entries)
        return new

    def reached(self) -> dict[int, int]:
        return {0: self._read}

    def committed(self) -> dict[int, int]:
        """The worker commits its offsets once it produced a batch's events: up to what it
        had produced when the re-rate began (its first read)."""
        return {0: self._began}

    def again(self) -> LiveLog:
        """The same log and worker, read again from the start (as each re-rate does)."""
        return LiveLog(self.entries, self.live, self.done, self.step)


def same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for player in a:
        assert a[player].mu == pytest.approx(b[player].mu, abs=1e-9)
        assert a[player].sigma == pytest.approx(b[player].sigma, abs=1e-9)
        assert a[player].games == b[player].games


async def started(store, entries: list[Entry], applied: int, step: int) -> tuple[LiveLog, list[dict]]:
    """A live worker on `store` that has applied the first `applied` entries."""
    live = LiveLog(entries, Processor(LADDERS, store), 0, step)
    await live.advance(applied)
    return live, []


async def send_to(sink: list[dict], events, everything: bool = False) -> None:
    """Keep the correction events sent (`everything`: every event, the live ones a re-rate
    sends before them too)."""
    sink.extend(e for e in events if everything or e.get("kind") == "correction")


async def rerate(
    store, live: LiveLog, sent: list[dict], kind: str, *match_ids: str, reason="", params=None, **tuning
):
    """A `Rerate` of the tests' ladder from `live` (the correction `kind` of `match_ids`, with
    `params`; `tuning` is `Tuning`'s), its correction events appended to `sent`."""
    correction = Correction(kind, NAME, match_ids, reason, params or {})
    return await Rerate(
        store, LADDERS, correction, live, lambda e: send_to(sent, e), RerateOptions(Tuning(**tuning))
    ).run()


async def test_a_rerate_skips_the_matches_the_live_worker_dead_lettered_and_equals_a_replay(
    store, monkeypatch
):
    """Matches that make the model throw: the live worker skips (dead-letters) them, the
    re-rate skips them too, reports each, and ends equal to a replay that skips them."""
    poison_model(monkeypatch, LADDERS, NAME)
    entries = matches(300, poison={30, 120})
    live, sent = await started(store, entries, 200, step=30)
    report = await rerate(store, live, sent, "void", "m40", catch_up=50)
    await live.advance(len(entries))
    same(await store.players(NAME), await replayed([e for e in entries if e[0].match_id != "m40"]))
    assert report.skipped == [
        f"skipped match 'm{i}' (matches[0]@{i}) of ladder {NAME!r}: processing failed: ZeroDivisionError: poison"
        for i in (30, 120)
    ]
    assert "2 matches skipped" in report.line()


async def test_void_while_the_live_worker_goes_on_equals_a_replay_without_the_match(store):
    entries = matches(400)
    live, sent = await started(store, entries, 250, step=30)
    report = await rerate(store, live, sent, "void", "m40", reason="cheater", catch_up=50)
    await live.advance(len(entries))
    expected = await replayed([e for e in entries if e[0].match_id != "m40"])
    same(await store.players(NAME), expected)
    assert report.voided == ["m40"] and report.generation == 1
    assert len(sent) == report.corrections > 0
    assert len({e["player_id"] for e in sent}) == len(sent)
    # Each correction's `after` is the replay without the match, as of the switch position.
    at_switch = await replayed([e for e in entries[: report.positions[0]] if e[0].match_id != "m40"])
    for event in sent:
        checked = RatingChanged.from_dict(event)
        assert checked.kind == "correction" and checked.correction["voided"] == ["m40"]
        assert checked.correction["reason"] == "cheater"
        assert event["after"]["mu"] == pytest.approx(at_switch[event["player_id"]].mu, abs=1e-9)


async def test_players_the_live_worker_moves_after_the_comparison_are_compared_again(store):
    """Many players, few per round: the comparison of all players is taken while the live
    worker moves on, so the players of every match applied after it must be compared again.
    The correction events are exactly the players whose state differs at the switch."""
    entries = matches(900, seed=3, players=400)
    live, sent = await started(store, entries, 300, step=15)
    report = await rerate(store, live, sent, "void", "m5", catch_up=40, close=10)
    switch = report.positions[0]
    with_it = await replayed(entries[:switch])
    without = await replayed([e for e in entries[:switch] if e[0].match_id != "m5"])
    changed = {p for p in with_it if with_it[p] != without.get(p)}
    assert sorted(e["player_id"] for e in sent) == sorted(changed)
    for event in sent:
        assert event["after"]["mu"] == pytest.approx(without[event["player_id"]].mu, abs=1e-9)
        assert event["before"]["mu"] == pytest.approx(with_it[event["player_id"]].mu, abs=1e-9)


async def test_unvoid_brings_the_match_back_and_voiding_twice_changes_nothing(store):
    entries = matches(120)
    live, sent = await started(store, entries, 120, step=0)
    await rerate(store, live, sent, "void", "m3")
    again = await rerate(store, live.again(), sent, "void", "m3")
    assert again.nothing_to_do
    await rerate(store, live.again(), sent, "unvoid", "m3")
    same(await store.players(NAME), await replayed(entries))
    assert await store.voids(NAME) == {}


async def test_voiding_an_unknown_match_is_an_error_and_changes_nothing(store):
    entries = matches(50)
    live, sent = await started(store, entries, 50, step=0)
    before = await store.players(NAME)
    with pytest.raises(UnknownMatches, match="'nope'"):
        await rerate(store, live, sent, "void", "nope")
    assert await store.players(NAME) == before
    assert (await store.generations(NAME)).lock_owner is None
    assert sent == []


async def test_new_parameters_apply_to_history_and_to_the_live_worker_after_the_switch(store):
    entries = matches(300)
    live, sent = await started(store, entries, 100, step=40)
    await rerate(store, live, sent, "rerate", params={"beta": 2.0}, catch_up=50)
    await live.advance(len(entries))
    wide = Ladders([Ladder(NAME, "trueskill", {"beta": 2.0})])
    same(await store.players(NAME), await replayed(entries, wide))


async def test_a_second_rerate_is_refused_while_one_holds_the_lock(store):
    entries = matches(20)
    live, sent = await started(store, entries, 20, step=0)
    await store.begin_rerate(NAME, "someone-else", 60.0, None)
    with pytest.raises(RerateRunning, match="someone-else"):
        await rerate(store, live, sent, "void", "m1")


async def test_the_old_generation_is_dropped_and_reads_follow_the_switch(store):
    entries = matches(60)
    live, sent = await started(store, entries, 60, step=0)
    await rerate(store, live, sent, "void", "m0")
    expected = await replayed(entries[1:])
    best = max(expected, key=lambda p: expected[p].mu - 3 * expected[p].sigma)
    assert (await store.leaderboard(NAME, 1))[0][0] == best
    assert (await store.lookup(NAME, [best])).places == {best: 0}
    assert all(event["match_id"] != "m0" for event in await store.history(NAME, best, 100))
    if not isinstance(store, MemoryStore):
        keys = {k.decode() async for k in store.client.scan_iter(match=f"sr:{{{NAME}}}*")}
        generation_zero = {k for k in keys if not k.startswith(f"sr:{{{NAME}}}:g1:")}
        assert generation_zero == {f"sr:{{{NAME}}}:{k}" for k in ("control", "voids")}


@pytest.mark.parametrize("died", ["before the re-rate", "just before the freeze"])
async def test_a_batch_committed_but_never_produced_is_sent_before_the_corrections(store, died):
    """The live worker committed its last batch and died before producing its events (before
    the re-rate began, or while it followed the worker); the re-rate switches before the
    redelivery. The re-rate sends those live events itself, before the correction events, so
    that on the topic every player's events chain from the first to the stored state; the
    redelivery then re-emits nothing."""
    entries = matches(200)
    worker = Processor(LADDERS, store)
    first = await worker.process([m for m, _ in entries[:190]], [w for _, w in entries[:190]])
    worker.produced(first)
    live = LiveLog(entries, worker, 190, step=0)
    if died == "before the re-rate":
        await live.advance(10, produce=False)
    else:
        freeze = store.freeze

        async def commit_then_freeze(*args):
            await live.advance(10, produce=False)
            await freeze(*args)

        store.freeze = commit_then_freeze
    sent: list[dict] = []
    correction = Correction("void", NAME, ["m3"], "", {})
    await Rerate(store, LADDERS, correction, live, lambda e: send_to(sent, e, everything=True)).run()

    assert [e["match_id"] for e in sent[:20]] == [f"m{i}" for i in range(190, 200) for _ in range(2)]
    taking_over = Processor(LADDERS, store)
    redelivered = await taking_over.process([m for m, _ in entries[185:]], [w for _, w in entries[185:]])
    assert all(r.duplicate and r.events == [] for r in redelivered.results)
    topic = [e for r in first.results for e in r.events] + sent
    stored = await store.players(NAME)
    for player, state in stored.items():
        chain = [e for e in topic if e["player_id"] == player]
        for before, after in itertools.pairwise(chain):
            assert after["before"] == before["after"], (player, after["event_id"])
        assert chain[-1]["after"]["mu"] == pytest.approx(state.mu, abs=1e-9)


async def test_a_store_that_lost_committed_matches_is_refused_and_left_as_it_was(store):
    """The workers committed offsets past 100 matches, but the store shows 80 (a failover to
    a replica that missed writes): a re-rate built to the store's positions would hide the
    loss and never rate the 20, so it is refused, naming the first missing match."""
    entries = matches(120)
    live, sent = await started(store, entries, 80, step=0)
    live.committed = lambda: {0: 100}
    before = await store.players(NAME)
    with pytest.raises(
        StoreLost, match=r"matches\[0\]@80 \(match 'm80'\).*store lost data.*replay --from-topic"
    ):
        await rerate(store, live, sent, "void", "m3")
    assert await store.players(NAME) == before and sent == []
    assert (await store.generations(NAME)).lock_owner is None


def record(match_id: str, winner: str, loser: str, i: int) -> Entry:
    return parsed_duel(LADDERS, match_id, winner, loser, ladder=NAME, at=1_700_000_000 + 3600 * i), (0, i)


async def test_a_peak_rating_falls_after_the_void_of_the_match_that_made_it(store):
    """p0 peaks with three wins, then loses; voiding the third win lowers p0's stored peak to
    what a replay without it gives, on the store and in the leaderboard rows."""
    entries = [record(f"w{i}", "p0", f"p{i + 1}", i) for i in range(3)]
    entries += [record(f"l{i}", f"p{i + 4}", "p0", i + 3) for i in range(6)]
    live, sent = await started(store, entries, len(entries), step=0)
    before = (await store.players(NAME))["p0"]
    await rerate(store, live, sent, "void", "w2")
    after = (await store.players(NAME))["p0"]
    oracle = (await replayed([e for e in entries if e[0].match_id != "w2"]))["p0"]
    assert after.peak == pytest.approx(oracle.peak, abs=1e-12) and after.peak_at == oracle.peak_at
    assert after.peak < before.peak and before.peak_at == 1_700_000_000 + 3600 * 2


async def test_a_rerate_applies_a_season_start_at_its_place_in_the_history(store):
    """A season record in the history: voiding a match before it re-rates both seasons as a
    replay without the match does, season reset included; the ending season's leaderboard is
    rebuilt too."""
    seasoned = Ladders([Ladder(NAME, "trueskill", {"season_shrink": 0.5, "season_sigma": 1.0})])
    entries = matches(80, seed=11)
    start = parse_match(
        {"kind": "season", "match_id": "s2", "ladder": NAME, "finished_at": 1_700_100_000}, seasoned
    )
    entries = entries[:40] + [(start, (0, 40))] + [(m, (0, i + 1)) for m, (_, i) in entries[40:]]
    live = LiveLog(entries, Processor(seasoned, store), 0, 0)
    await live.advance(len(entries))
    correction = Correction("void", NAME, ("m7",), "", {})
    await Rerate(store, seasoned, correction, live, lambda e: send_to([], e)).run()
    same(await store.players(NAME), await replayed([e for e in entries if e[0].match_id != "m7"], seasoned))
    assert await store.seasons(NAME) == ["s2"]
    first_season = await replayed([e for e in entries[:40] if e[0].match_id != "m7"], seasoned)
    best = max(first_season, key=lambda p: first_season[p].mu - 3 * first_season[p].sigma)
    assert (await store.leaderboard(NAME, 1, season=1))[0][0] == best


async def test_a_void_starts_from_a_checkpoint_past_a_season_start_and_keeps_the_ended_season(store):
    """A checkpoint made after a season start is a void's start (it replays only the matches
    after it): the result equals a replay without the match, and the ended season's
    leaderboard and archived states, which the checkpoint does not hold, are as live."""
    seasoned = Ladders([Ladder(NAME, "trueskill", {"season_shrink": 0.5, "season_sigma": 1.0})])
    start = parse_match(
        {"kind": "season", "match_id": "s2", "ladder": NAME, "finished_at": 1_700_100_000}, seasoned
    )
    entries = matches(80, seed=11)
    entries = entries[:40] + [(start, (0, 40))] + [(m, (0, i + 1)) for m, (_, i) in entries[40:]]
    live = LiveLog(entries, Processor(seasoned, store), 0, 0)
    await live.advance(len(entries))
    replica = await Replica(seasoned, NAME).open()
    await replica.apply(entries[:60])
    checkpoint = await replica.checkpoint()
    board, archived = (
        await store.leaderboard(NAME, 20, season=1),
        await store.season_states(NAME, 1, ["p1", "p2"]),
    )
    correction = Correction("void", NAME, ("m70",), "", {})
    report = await Rerate(
        store, seasoned, correction, live.again(), lambda e: send_to([], e), start=checkpoint
    ).run()
    assert report.checkpoint == checkpoint.id and report.applied == len(entries) - 60 - 1
    same(await store.players(NAME), await replayed([e for e in entries if e[0].match_id != "m70"], seasoned))
    assert await store.seasons(NAME) == ["s2"]
    assert await store.leaderboard(NAME, 20, season=1) == board
    assert await store.season_states(NAME, 1, ["p1", "p2"]) == archived


async def test_first_rerates_of_two_ladders_give_a_shared_player_two_event_ids():
    """Regression (found by ``bench chaos``): a correction's id was ``rerate:<generation>``, so
    the first re-rates of two ladders both sent ``rerate:1:<player>`` for a player id on both,
    with two payloads — a subscriber deduplicating by event_id dropped one ladder's change."""
    names = (f"{NAME}-a", f"{NAME}-b")
    ladders = Ladders([Ladder(name, "trueskill") for name in names])
    store, sent = MemoryStore(), []
    for name in names:
        entries = [
            (parse_match({**duel(f"{name}-m{i}", "p1", f"p{2 + i % 3}"), "ladder": name}, ladders), (0, i))
            for i in range(12)
        ]
        live = LiveLog(entries, Processor(ladders, store), 0, step=0)
        await live.advance(len(entries))
        correction = Correction("rerate", name, (), "", {"beta": 2.5})
        await Rerate(store, ladders, correction, live, lambda e: send_to(sent, e)).run()
    shared = [e for e in sent if e["player_id"] == "p1"]
    assert [e["ladder"] for e in shared] == list(names)
    assert len({e["event_id"] for e in shared}) == 2, [e["event_id"] for e in shared]


async def test_a_rerate_with_a_rating_floor_equals_a_replay_with_it(store):
    """A ladder with ``rating_floor``: a void re-rated while the live worker goes on gives the
    states a replay with the floor gives (the floor binds: without it the replay differs),
    and no stored state is below the floor."""
    floored = Ladders([Ladder(NAME, "elo", {"rating_floor": 1480.0})])
    rng = random.Random(3)
    entries = []
    for i in range(300):
        loser = f"p{rng.randrange(4)}"  # four habitual losers sink to the floor
        winner = f"p{rng.randrange(4, 12)}"
        entries.append(
            (
                parse_match(duel(f"m{i}", winner, loser, ladder=NAME, at=1_700_000_000 + 60 * i), floored),
                (0, i),
            )
        )
    live = LiveLog(entries, Processor(floored, store), 0, 25)
    await live.advance(200)
    correction = Correction("void", NAME, ("m5",), "", {})
    await Rerate(
        store, floored, correction, live, lambda e: send_to([], e), RerateOptions(Tuning(catch_up=50))
    ).run()
    await live.advance(len(entries))
    kept = [e for e in entries if e[0].match_id != "m5"]
    stored = await store.players(NAME)
    same(stored, await replayed(kept, floored))
    assert min(s.mu for s in stored.values()) == pytest.approx(1480.0)
    unfloored = await replayed(kept, Ladders([Ladder(NAME, "elo")]))
    assert min(s.mu for s in unfloored.values()) < 1470.0


async def test_the_eligible_board_is_rebuilt_by_a_rerate(store):
    """A ladder ranking only active, non-provisional players, a season start in its history, a
    void re-rated while the live worker goes on: after the switch the eligible leaderboard (and
    on Redis its running sum) equals the one the new states give, and its ranks are the ones a
    replay without the voided match gives."""
    ruled = Ladders([Ladder(NAME, "trueskill", {"provisional_games": 3, "leaderboard_active_days": 1.0})])
    entries = matches(80, seed=5)  # an hour apart: a day is the last 24 matches
    start = parse_match(
        {"kind": "season", "match_id": "s2", "ladder": NAME, "finished_at": 1_700_100_000}, ruled
    )
    entries = entries[:30] + [(start, (0, 30))] + [(m, (0, i + 1)) for m, (_, i) in entries[30:]]
    live = LiveLog(entries, Processor(ruled, store), 0, 5)
    await live.advance(60)
    correction = Correction("void", NAME, ("m70",), "", {})
    await Rerate(store, ruled, correction, live, lambda e: send_to([], e)).run()
    await live.advance(len(entries))
    now = 1_700_000_000 + 3600 * 98  # active: the players of the last 6 matches
    ladder = ruled.get(NAME)
    states = await store.players(NAME, only=[f"p{i}" for i in range(12)])  # not a full scan: lean
    assert len(states) == 12 and await board_differences(store, ladder, states, now, 1e-9) == []
    oracle = MemoryStore()
    await process_skipping(Processor(ruled, oracle), *zip(*[e for e in entries if e[0].match_id != "m70"]))
    since = ladder.rules.active_since(now)
    expected = await oracle.board_top(NAME, 100, since)
    assert 3 < len(expected) < 12
    assert [(r.player_id, r.rank) for r in await store.board_top(NAME, 100, since)] == [
        (r.player_id, r.rank) for r in expected
    ]


class LostReplies:
    """A Redis store's control script whose every step loses its first reply after Redis ran
    it (a connection cut after the request), as `ConnectionError`: the store sends it again."""

    def __init__(self, script) -> None:
        self.script, self.seen = script, set()

    async def __call__(self, keys, args):
        reply = await self.script(keys=keys, args=args)
        if args[0] not in self.seen:
            self.seen.add(args[0])
            raise RedisConnectionError("reply lost")
        return reply


@pytest.mark.parametrize("store", ["redis"], indirect=True)
async def test_a_rerate_whose_every_control_step_runs_twice_is_as_with_one_run(store):
    """Every control step (begin, stage, freeze, switch, release, finish) runs twice, its first
    reply lost: the re-rate reports what one run reports (the void, generation 1, one event per
    changed player), equals a replay without the match, and leaves no lock, outbox or other
    generation behind (before: the lost begin reply raised, and one sent again took generation 2
    and left the first; a finish sent again failed the re-rate)."""
    store._control_script = lost = LostReplies(store._control_script)
    entries = matches(200)
    live, sent = await started(store, entries, 150, step=30)
    report = await rerate(store, live, sent, "void", "m40", catch_up=50)
    await live.advance(len(entries))
    same(await store.players(NAME), await replayed([e for e in entries if e[0].match_id != "m40"]))
    assert report.voided == ["m40"] and report.generation == 1
    assert len(sent) == report.corrections == len({e["player_id"] for e in sent}) > 0
    assert (await store.generations(NAME)).lock_owner is None and await store.outbox(NAME) == []
    keys = [k.decode() async for k in store.client.scan_iter(match=f"sr:{{{NAME}}}:g*")]
    assert keys and all(k.startswith(f"sr:{{{NAME}}}:g1:") for k in keys)
    assert len(lost.seen) >= 6
