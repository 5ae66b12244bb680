"""The state-store contract, checked on the in-memory store and on a real Redis alike."""

from __future__ import annotations

import dataclasses
import uuid

import msgpack
import pytest

from stream_rater.contracts import rating_changed
from stream_rater.store import (
    BoardAround,
    BoardBehind,
    BoardRanks,
    BoardRow,
    Commit,
    CommitConflict,
    PlayerState,
    ReadRequest,
    StateWrite,
    open_store,
)
from stream_rater.store.base import HeldStale, LadderFrozen, LockLost
from stream_rater.store.redis import RedisStore, ladder_key
from stream_rater.store.redis.boards import KnownBoards
from stream_rater.store.redis.keys import bucket, marker_slots
from stream_rater.waiting import wait_until_async


@pytest.fixture(params=["memory", "redis", "redis_cluster"])
async def store(request):
    """A fresh store of each kind; the Redis ones on the suite's real Redis server and Redis
    Cluster (`redis_url`, `redis_cluster_url`)."""
    if request.param == "memory":
        s = open_store("memory", history_limit=3)
    else:
        s = open_store(request.getfixturevalue(f"{request.param}_url"), history_limit=3)
    yield s
    await s.close()


@pytest.fixture
def ladder() -> str:
    """A ladder name no other test uses, so tests never share Redis state."""
    return f"t-{uuid.uuid4().hex[:10]}"


def write(pid: str, mu: float, version: int, expected: int, score: float | None = None, **kw) -> StateWrite:
    return StateWrite(
        pid, PlayerState(mu, 1.0, version, 100.0, version), expected, leaderboard_score=score, **kw
    )


async def test_read_of_unknown_players_is_empty(store, ladder):
    """Players and matches never written are absent from a snapshot."""
    snap = await store.read(ladder, ["a"], ["home"], ["m1"])
    assert (snap.players, snap.effects, snap.applied) == ({}, {}, {})


async def test_commit_writes_states_markers_leaderboard_history(store, ladder):
    """A commit stores states, effects, the applied marker, leaderboard scores and history."""
    events = [{"event_id": "m1:a"}, {"event_id": "m1:b"}]
    await store.commit(
        Commit(
            ladder,
            [
                write("a", 27.0, 1, 0, score=5.0),
                write("b", 23.0, 1, 0, score=1.0),
                write("home", 0.5, 1, 0, is_effect=True),
            ],
            {"m1": events},
            {"a": [events[0]], "b": [events[1]]},
        )
    )
    snap = await store.read(ladder, ["a", "b", "c"], ["home"], ["m1", "m2"])
    assert snap.players["a"] == PlayerState(27.0, 1.0, 1, 100.0, 1)
    assert set(snap.players) == {"a", "b"}
    assert snap.effects["home"].mu == 0.5
    assert snap.applied == {"m1": events}
    assert await store.leaderboard(ladder, 10) == [("a", 5.0), ("b", 1.0)]
    assert await store.history(ladder, "a", 10) == [events[0]]
    assert ladder in await store.ladders()
    assert set(await store.players(ladder, effects=True)) == {"home"}
    assert await store.players(ladder, only=["b", "c"]) == {"b": snap.players["b"]}
    assert await store.players(ladder, only=[]) == {}


async def test_stale_version_is_refused_and_writes_nothing(store, ladder):
    """A write expecting an outdated version fails the whole commit, markers included."""
    await store.commit(Commit(ladder, [write("a", 26.0, 1, 0)], {"m1": []}))
    with pytest.raises(CommitConflict):
        await store.commit(Commit(ladder, [write("b", 30.0, 1, 0), write("a", 20.0, 1, 0)], {"m2": []}))
    snap = await store.read(ladder, ["a", "b"], [], ["m2"])
    assert snap.players["a"].mu == 26.0
    assert "b" not in snap.players and snap.applied == {}


async def test_a_commit_from_an_older_read_is_checked_write_by_write(store, ladder):
    """A commit carrying the watermark of its read: while the store still shows it, the
    commit is applied; once another commit moved it, each write's version is checked again,
    so a player changed in between refuses the commit and one left alone does not."""
    await store.commit(Commit(ladder, [write("a", 26.0, 1, 0), write("b", 26.0, 1, 0)], {"m1": []}))
    read = await store.read(ladder, ["a", "b"], [], [])
    assert read.watermark == 1
    await store.commit(Commit(ladder, [write("a", 27.0, 2, 1)], {"m2": []}, read_at=(0, 1)))
    with pytest.raises(CommitConflict):
        await store.commit(Commit(ladder, [write("a", 28.0, 2, 1)], {"m3": []}, read_at=(0, 1)))
    await store.commit(Commit(ladder, [write("b", 28.0, 2, 1)], {"m4": []}, read_at=(0, 1)))
    snap = await store.read(ladder, ["a", "b"], [], ["m3", "m4"])
    assert (snap.players["a"].mu, snap.players["b"].mu, set(snap.applied)) == (27.0, 28.0, {"m4"})
    assert snap.watermark == 3


async def test_a_commit_read_from_a_generation_switched_away_is_checked_write_by_write(store, ladder):
    """A re-rate switched the live generation after the read, to one with the same watermark:
    the live commit goes to the new generation, where its versions are checked (not skipped
    because the watermarks happen to be equal), so a write expecting the old one is refused."""
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}))
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    await store.commit(Commit(ladder, [write("a", 5.0, 2, 0)], {"m1": []}, generation=generation))
    live = await store.generations(ladder)
    await store.freeze(ladder, "owner", 60)
    await store.switch(ladder, "owner", generation, live, [])
    await store.finish_rerate(ladder, "owner")
    with pytest.raises(CommitConflict):
        await store.commit(Commit(ladder, [write("a", 9.0, 2, 1)], {"m2": []}, read_at=(0, 1)))
    assert (await store.read(ladder, ["a"], [], [])).players["a"].mu == 5.0


async def test_after_a_switch_only_the_corrected_players_are_held_until_released(store, ladder):
    """The switch turns the freeze into a hold of the outbox's players: a live commit writing
    one is refused until `release`, a commit of the others (and of an effect of the same name)
    goes on; `finish_rerate` ends the hold of the rest."""
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0), write("b", 1.0, 1, 0)], {"m1": []}))
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    live = await store.generations(ladder)
    await store.freeze(ladder, "owner", 60)
    with pytest.raises(LadderFrozen):
        await store.commit(Commit(ladder, [write("c", 1.0, 1, 0)], {"m2": []}))
    outbox = [{"player_id": p, "event_id": f"rerate:{p}"} for p in ("a", "b")]
    await store.switch(ladder, "owner", generation, live, outbox)
    await store.commit(
        Commit(ladder, [write("c", 1.0, 1, 0), write("a", 0.1, 1, 0, is_effect=True)], {"m2": []})
    )
    for held in ("a", "b"):
        with pytest.raises(LadderFrozen):
            await store.commit(Commit(ladder, [write(held, 2.0, 1, 0)], {"m3": []}))
    await store.release(ladder, "owner", ["a"])
    await store.commit(Commit(ladder, [write("a", 2.0, 1, 0)], {"m3": []}))
    with pytest.raises(LadderFrozen):
        await store.commit(Commit(ladder, [write("b", 2.0, 1, 0)], {"m4": []}))
    assert await store.outbox(ladder) == outbox
    await store.finish_rerate(ladder, "owner")
    await store.commit(Commit(ladder, [write("b", 2.0, 1, 0)], {"m4": []}))


async def test_a_switch_sent_again_after_it_took_effect_keeps_the_hold(store, ladder):
    """A switch whose reply was lost (a connection reset after Redis ran it) is sent again by
    the client's retry: it answers as the first did, and the corrected players stay held with
    their events in the outbox (a refusal made the re-rate abort and drop the hold, and live
    events went out before the correction events: bench chaos seed 51)."""
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    live = await store.generations(ladder)
    await store.freeze(ladder, "owner", 60)
    outbox = [{"player_id": "a", "event_id": "rerate:a"}]
    await store.switch(ladder, "owner", generation, live, outbox)
    await store.switch(ladder, "owner", generation, live, outbox)
    assert await store.outbox(ladder) == outbox
    with pytest.raises(LadderFrozen):
        await store.commit(Commit(ladder, [write("a", 2.0, 1, 0)], {"m1": []}))


async def test_events_staged_before_the_freeze_become_the_outbox_and_hold_at_the_switch(store, ladder):
    """`stage` puts correction events aside (nothing is held or in the outbox yet); the switch
    adds its own changes (b's event made again in the freeze, c's withdrawn) and makes them the
    outbox and their players the hold: a, b held, c not. Thousands of x players, staged and
    withdrawn, take the stores' batches past one."""
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    live = await store.generations(ladder)
    staged = [{"player_id": p, "event_id": f"rerate:{p}", "n": 1} for p in ["c", "b", "a"]]
    many = [{"player_id": f"x{i:04}", "event_id": f"rerate:x{i:04}"} for i in range(2500)]
    await store.stage(ladder, "owner", generation, staged + many)
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}))
    assert await store.outbox(ladder) == []
    await store.freeze(ladder, "owner", 60)
    again = {"player_id": "b", "event_id": "rerate:b", "n": 2}
    await store.switch(
        ladder, "owner", generation, live, [again], ["c"] + [e["player_id"] for e in many[:1200]]
    )
    assert await store.outbox(ladder) == [staged[2], again, *many[1200:]]
    await store.commit(Commit(ladder, [write("c", 1.0, 1, 0)], {"m2": []}))
    for held in ("a", "b"):
        with pytest.raises(LadderFrozen):
            await store.commit(Commit(ladder, [write(held, 2.0, 1, 0)], {"m3": []}))


async def test_events_staged_by_an_abandoned_rerate_go_with_its_generation(store, ladder):
    """A re-rate that staged events and died before its switch leaves nothing held and no
    outbox: the next one switches to its own events only, and the staged ones' keys are gone."""
    abandoned, _ = await store.begin_rerate(ladder, "one", 60, None)
    await store.stage(ladder, "one", abandoned, [{"player_id": "a", "event_id": "rerate:a"}])
    generation, dropped = await store.begin_rerate(ladder, "one", 60, None)  # its lock, taken again
    assert dropped == abandoned
    await store.drop_generation(ladder, abandoned)
    with pytest.raises(LockLost):
        await store.stage(ladder, "one", abandoned, [{"player_id": "a", "event_id": "rerate:a"}])
    live = await store.generations(ladder)
    await store.freeze(ladder, "one", 60)
    await store.switch(ladder, "one", generation, live, [])
    assert await store.outbox(ladder) == []
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}))
    if isinstance(store, RedisStore):
        assert [k async for k in store.client.scan_iter(match=f"*{{{ladder}}}*staged*")] == []


async def test_redis_an_outbox_an_earlier_release_stored_as_one_list_is_read_and_replaced(redis_url, ladder):
    """Releases before 2026-11-29 kept the outbox as one msgpack list: a store upgraded with one
    pending reads it, and the next switch replaces it with its own events."""
    store = RedisStore.from_url(redis_url)
    pending = [{"player_id": "a", "event_id": "rerate:a"}]
    await store.client.set(ladder_key(ladder, "outbox"), msgpack.packb(pending, use_bin_type=True))
    assert await store.outbox(ladder) == pending
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    live = await store.generations(ladder)
    await store.freeze(ladder, "owner", 60)
    await store.switch(ladder, "owner", generation, live, [{"player_id": "b", "event_id": "rerate:b"}])
    assert await store.outbox(ladder) == [{"player_id": "b", "event_id": "rerate:b"}]
    await store.close()


def test_a_commit_that_writes_must_apply_a_match():
    """Every state change moves the watermark, which the check by watermark relies on."""
    with pytest.raises(ValueError, match="must apply a match"):
        Commit("l", [write("a", 1.0, 1, 0)], {})


async def test_applied_match_is_refused(store, ladder):
    """A commit containing an already-applied match is refused, even with fresh versions."""
    await store.commit(Commit(ladder, [write("a", 26.0, 1, 0)], {"m1": []}))
    with pytest.raises(CommitConflict, match="already applied"):
        await store.commit(Commit(ladder, [write("a", 27.0, 2, 1)], {"m1": []}))
    assert (await store.read(ladder, ["a"], [], [])).players["a"].mu == 26.0


async def test_an_unread_commit_is_refused_where_a_read_would_have_told_otherwise(store, ladder):
    """A commit computed without a read (`Commit.unread`) from states held since its own last
    commit is applied while nothing changed since; it is refused as stale, writing nothing,
    when the watermark moved, a record is below its partition's position, or one of its
    matches is marked or voided."""
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}, positions={0: 10}))

    def unread(match_id: str, lowest: int, read_at: tuple[int, int] = (0, 1)) -> Commit:
        return Commit(
            ladder,
            [write("a", 2.0, 2, 1)],
            {match_id: []},
            positions={0: lowest + 1},
            read_at=read_at,
            unread={0: lowest},
        )

    await store.set_voids(ladder, {"m4": {"reason": "", "at": 0.0}}, [], 0)
    refused = await store.commit_many(
        [unread("m2", 10, read_at=(0, 0)), unread("m2", 9), unread("m1", 10), unread("m4", 10)]
    )
    assert [type(r) for r in refused] == [HeldStale] * 4
    assert (await store.read(ladder, ["a"], [], [])).players["a"].version == 1
    assert await store.commit_many([unread("m2", 10)]) == [None]
    snap = await store.read(ladder, ["a"], [], ["m2"])
    assert (snap.players["a"].version, snap.watermark, set(snap.applied)) == (2, 2, {"m2"})


async def test_many_ladders_are_read_and_committed_in_one_round_trip_each(store, ladder):
    """`read_many`/`commit_many` answer per ladder in request order, each commit atomic on its
    own: a refused one writes nothing and the others are applied, in one round trip each."""
    names = [f"{ladder}-{i}" for i in range(5)]
    await store.commit(Commit(names[2], [write("a", 26.0, 1, 0)], {"m0": []}))
    before = store.round_trips
    refusals = await store.commit_many(
        [Commit(name, [write("a", float(i), 1, 0)], {f"m{i}": []}) for i, name in enumerate(names)]
    )
    assert [type(r) for r in refusals] == [type(None), type(None), CommitConflict, type(None), type(None)]
    snaps = await store.read_many([ReadRequest(name, ["a"], [], ["m0", "m2"]) for name in names])
    assert store.round_trips - before == 2
    assert [s.players["a"].mu for s in snaps] == [0.0, 1.0, 26.0, 3.0, 4.0]
    assert [set(s.applied) for s in snaps] == [{"m0"}, set(), {"m0"}, set(), set()]
    assert [s.watermark for s in snaps] == [1] * 5


async def test_history_is_capped_newest_first(store, ladder):
    """A player's history keeps only the newest `history_limit` entries, newest first."""
    for v in range(1, 6):
        await store.commit(Commit(ladder, [write("a", float(v), v, v - 1)], {f"m{v}": []}, {"a": [{"n": v}]}))
    assert await store.history(ladder, "a", 10) == [{"n": 5}, {"n": 4}, {"n": 3}]


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_a_store_that_keeps_no_history_writes_none(kind, request, ladder):
    """History 0 (a deployment with an archive): commits write no history, reads find none, and
    on Redis the player's bucket holds the state alone."""
    url = "memory" if kind == "memory" else request.getfixturevalue("redis_url")
    store = open_store(url, history_limit=0)
    try:
        await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}, {"a": [{"n": 1}]}))
        assert await store.history(ladder, "a", 10) == []
        assert (await store.read(ladder, ["a"], [], [])).players["a"].mu == 1.0
        if isinstance(store, RedisStore):
            assert await store.client.hkeys(ladder_key(ladder, f"players:{bucket('a')}")) == [b"a"]
    finally:
        await store.close()


async def test_states_without_sigma_round_trip(store, ladder):
    """Elo-family states (sigma None, never played) survive the store unchanged."""
    state = PlayerState(512.5, None, 3, None, 1)
    await store.commit(Commit(ladder, [StateWrite("a", state, 0)], {"m": []}))
    assert (await store.read(ladder, ["a"], [], [])).players["a"] == state


def _format_2_keys(ladder: str, prefix: str = "sr") -> list[str]:
    """The keys of a commit of player "a" (scored, with history) applying match "m1"."""
    suffixes = (f"players:{bucket('a')}", "lb", "mk:all", "meta")  # its history in its bucket; no TTL: all
    return sorted(ladder_key(ladder, s, prefix) for s in suffixes)


async def test_redis_keys_share_the_ladder_hash_tag(redis_url, ladder):
    """Every key a commit writes carries the ladder's cluster hash tag; players, histories and
    markers are in their buckets."""
    store = RedisStore.from_url(redis_url)
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0, score=1.0)], {"m1": []}, {"a": [{}]}))
    keys = sorted([k.decode() async for k in store.client.scan_iter(match=f"*{ladder}*")])
    assert keys == _format_2_keys(ladder)
    assert all(f"{{{ladder}}}" in k for k in keys)
    await store.close()


async def test_redis_buckets_stay_listpacks_and_a_full_scan_finds_every_player(redis_url, ladder):
    """The players, history and markers buckets are listpacks (no per-player overhead); the
    effects hash is a hash table from its first entry and its field '' is no effect; a full
    scan of the players (every bucket) finds exactly the players written."""
    store = RedisStore.from_url(redis_url)
    ids = [f"p{i}" for i in range(300)]
    writes = [write(p, 1.0, 1, 0) for p in ids] + [write("home", 0.5, 1, 0, is_effect=True)]
    event = rating_changed("m1", ladder, "p0", "elo", (25.0, None), (26.5, None), 1.5, 1, "t0", "t1")
    await store.commit(Commit(ladder, writes, {"m1": []}, {"p0": [event]}, placings={"m1": [["p0", 1]]}))
    for suffix in (f"players:{bucket('p0')}", "mk:all"):
        assert await store.client.object("encoding", ladder_key(ladder, suffix)) in (b"listpack", b"ziplist")
    assert await store.client.object("encoding", ladder_key(ladder, "effects")) == b"hashtable"
    assert set(await store.players(ladder)) == set(ids)
    assert await store.players(ladder, only=["p1", "p299", "nobody"]) == {
        p: PlayerState(1.0, 1.0, 1, 100.0, 1) for p in ("p1", "p299")
    }
    assert set(await store.players(ladder, effects=True)) == {"home"}
    await store.close()


async def test_redis_busy_markers_slot_and_quality_sums_are_hash_tables(redis_url, ladder):
    """A markers slot that reaches 128 markers and a quality sums hash are hash tables (their
    field '' is no match — match ids are never empty — and no sum: the reads leave it out); a
    batch whose records are all at or above the positions is applied by its markers only."""
    store = RedisStore.from_url(redis_url)
    store.stored_format = 3  # as recorded for a new store (`store.deployment`); not the shared Redis's record
    slot = ladder_key(ladder, "mk:all")
    quality = {"live": ({"matches": 127}, [])}
    many = {f"m{i}": [] for i in range(127)}
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], many, positions={0: 127}, quality=quality))
    assert await store.client.object("encoding", slot) in (b"listpack", b"ziplist")
    assert await store.client.object("encoding", ladder_key(ladder, "q:live")) == b"hashtable"
    await store.commit(Commit(ladder, [write("a", 2.0, 2, 1)], {"m127": []}, positions={0: 128}))
    assert await store.client.object("encoding", slot) == b"hashtable"
    request = ReadRequest(ladder, [], [], ["m0", "m127", "new"], None, [(0, 128), (0, 129), (0, 130)])
    [snap] = await store.read_many([request])
    assert snap.applied == {"m0": [], "m127": []}
    assert await store.placings(ladder, "") is None  # the field '' is no match's
    assert await store.quality(ladder, "live", 1) == ({"matches": 127.0}, [])
    await store.close()


async def test_redis_scripts_flushed_are_loaded_again(redis_url, ladder):
    """A Redis that lost its scripts (restarted, or SCRIPT FLUSH) gets them again from the
    next read or commit, which then goes through."""
    store = RedisStore.from_url(redis_url)
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}))
    await store.client.script_flush()
    await store.commit(Commit(ladder, [write("a", 2.0, 2, 1)], {"m2": []}))
    await store.client.script_flush()
    snap = await store.read(ladder, ["a"], [], ["m1", "m2"])
    assert snap.players["a"].mu == 2.0 and set(snap.applied) == {"m1", "m2"}
    await store.close()


async def test_redis_markers_expire_after_their_ttl(redis_url, ladder):
    """With a marker TTL, a match stays applied for the whole window and is new again once it
    is over (its placings with it); its slot key expires by itself in Redis, but the events
    still unproduced stay (a redelivery re-emits them by position)."""
    now = [1_000_000.0]
    store = RedisStore.from_url(redis_url, marker_ttl=3600, clock=lambda: now[0])
    await store.commit(
        Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": [{"event_id": "m1:a"}]}, placings={"m1": []})
    )
    [slot] = [k async for k in store.client.scan_iter(match=ladder_key(ladder, "mk:*"))]
    assert 3600 < await store.client.ttl(slot) <= 3600 + 901
    now[0] += 3599
    await store.commit(Commit(ladder, [write("a", 2.0, 2, 1)], {"m2": []}))
    assert set((await store.read(ladder, [], [], ["m1", "m2"])).applied) == {"m1", "m2"}
    assert await store.placings(ladder, "m1") == []
    now[0] += 901  # past the window and the slot's slack
    assert set((await store.read(ladder, [], [], ["m1", "m2"])).applied) == {"m2"}
    assert await store.placings(ladder, "m1") is None
    assert await store.client.hlen(ladder_key(ladder, "unproduced")) == 2  # m2's, and the field ''
    await store.commit(Commit(ladder, [write("a", 3.0, 3, 2)], {"m1": []}))  # new again
    await store.close()


@pytest.mark.parametrize("now", [0.0, 899.0, 900.0, 1_764_000_123.5])
def test_marker_slots_keep_a_marker_between_one_ttl_and_a_slot_more(now):
    """A marker written at `now` is in the slots read until `now + ttl` and no longer after a
    slot more; its slot key lives exactly that long; without a TTL, it is in ``all``."""
    ttl = 3600
    _, slot, seconds = marker_slots(now, ttl)
    assert all(slot in marker_slots(now + dt, ttl)[0] for dt in (0, 1, ttl - 1, ttl))
    assert slot not in marker_slots(now + ttl + 901, ttl)[0]
    assert seconds is not None and ttl <= seconds <= ttl + 901
    assert marker_slots(now, 0) == (["all"], "all", None) and "all" in marker_slots(now, ttl)[0]


async def test_produced_markers_shrink_and_keep_the_match_applied(store, ladder):
    """A commit's `produced` empties those markers (nothing left to re-emit) while the matches
    stay applied; markers not named keep their events, and unknown ids create nothing."""
    m1, m2 = [{"event_id": "m1:a"}], [{"event_id": "m2:a"}]
    await store.commit(Commit(ladder, [write("a", 26.0, 1, 0)], {"m1": m1}))
    await store.commit(Commit(ladder, [write("a", 27.0, 2, 1)], {"m2": m2}, produced=["m1", "gone"]))
    snap = await store.read(ladder, [], [], ["m1", "m2", "gone"])
    assert snap.applied == {"m1": [], "m2": m2}
    assert snap.watermark == 2
    with pytest.raises(CommitConflict, match="already applied"):
        await store.commit(Commit(ladder, [write("a", 28.0, 3, 2)], {"m1": []}))


async def test_a_refused_commit_shrinks_nothing(store, ladder):
    """The shrink is part of the commit: a refused commit leaves the markers whole."""
    m1 = [{"event_id": "m1:a"}]
    await store.commit(Commit(ladder, [write("a", 26.0, 1, 0)], {"m1": m1}))
    with pytest.raises(CommitConflict):
        await store.commit(Commit(ladder, [write("a", 27.0, 2, 0)], {"m2": []}, produced=["m1"]))
    assert (await store.read(ladder, [], [], ["m1"])).applied == {"m1": m1}


async def test_forget_produced_drops_only_the_named_events_from_both_hashes(store, ladder):
    """A stopping worker's `forget_produced` drops the named matches' events wherever they are
    held (on a single Redis m1's moved aside to the older hash), keeps their markers, the
    other matches' events and the other ladders'; naming them again is harmless."""
    other = f"{ladder}-other"
    m1, m2, m3 = ([{"event_id": f"m{i}:a"}] for i in (1, 2, 3))
    await store.commit(Commit(other, [write("a", 26.0, 1, 0)], {"m1": m1}))
    for i, events in enumerate((m1, m2, m3)):
        await store.commit(Commit(ladder, [write("a", 26.0 + i, i + 1, i)], {f"m{i + 1}": events}))
    for _ in range(2):
        await store.forget_produced({ladder: (0, ["m1", "m2", "gone"]), other: (0, [])})
        assert await store.unproduced(ladder, 0, ["m1", "m2", "m3"]) == {"m3": m3}
    snap = await store.read(ladder, [], [], ["m1", "m2", "m3", "gone"])
    assert (snap.applied, snap.watermark) == ({"m1": [], "m2": [], "m3": m3}, 3)
    assert await store.unproduced(other, 0, ["m1"]) == {"m1": m1}


async def test_redis_staged_events_become_the_outbox_only_with_their_commit(redis_url, ladder):
    """A single Redis gets a commit's events staged in the commit's transaction: they join
    events still unproduced (none lost: those move aside to the older hash, or, if that holds
    some too, the staged ones are copied in), a refused commit leaves none of its own (nor its
    staged key), produced events leave whichever hash holds them, and what a failed transaction
    left staged never reaches the outbox."""
    store = RedisStore.from_url(redis_url)
    store.stored_format = 3  # as recorded for a new store (`store.deployment`); not the shared Redis's record
    staged, outbox, older = (ladder_key(ladder, f"unproduced{s}") for s in (":staged", "", ":older"))

    async def held() -> tuple[list[bytes], list[bytes]]:
        return sorted(await store.client.hkeys(outbox)), sorted(await store.client.hkeys(older))

    m1, m2, m3, m4 = ([{"event_id": f"m{i}:a"}] for i in (1, 2, 3, 4))
    await store.commit(Commit(ladder, [write("a", 26.0, 1, 0)], {"m1": m1}))
    await store.commit(Commit(ladder, [write("a", 27.0, 2, 1)], {"m2": m2}))  # m1 not produced
    assert await held() == ([b"", b"m2"], [b"", b"m1"])  # moved aside, hash tables both
    assert (await store.read(ladder, [], [], ["m1", "m2"])).applied == {"m1": m1, "m2": m2}
    with pytest.raises(CommitConflict):
        await store.commit(Commit(ladder, [write("a", 28.0, 3, 1)], {"m3": m3}, produced=["m1"]))
    assert not await store.client.exists(staged)
    assert await held() == ([b"", b"m2"], [b"", b"m1"])
    await store.commit(Commit(ladder, [write("a", 28.0, 3, 2)], {"m3": m3}))  # both hold some: copied
    assert await held() == ([b"", b"m2", b"m3"], [b"", b"m1"])
    await store.client.hset(staged, "m9", b"left by a failed transaction")
    await store.commit(Commit(ladder, [write("a", 29.0, 4, 3)], {"m4": m4}, produced=["m1", "m2"]))
    assert await held() == ([b"", b"m4"], [b"", b"m3"]) and not await store.client.exists(staged)
    snap = await store.read(ladder, [], [], ["m1", "m2", "m3", "m4"])
    assert snap.applied == {"m1": [], "m2": [], "m3": m3, "m4": m4}
    assert await store.unproduced(ladder, 0, ["m1", "m3", "m4"]) == {"m3": m3, "m4": m4}
    await store.commit(Commit(ladder, [write("a", 30.0, 5, 4)], {"m5": []}, produced=["m3", "m4"]))
    assert await held() == ([b""], [b""])
    assert await store.client.ttl(outbox) == -1  # the staged key's whole hash, kept for ever
    await store.close()


async def test_redis_produced_events_are_dropped_and_the_marker_keeps_its_expiry(redis_url, ladder):
    """Once produced, a match's events leave the store while its marker stays, expiring when
    it would have: the match stays a duplicate for the whole idempotency window."""
    now = [1_000_800.0]  # the start of a markers slot
    store = RedisStore.from_url(redis_url, marker_ttl=3600, clock=lambda: now[0])
    await store.commit(
        Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": [{"event_id": "m1:a", "pad": "x" * 200}]})
    )
    now[0] += 1800  # time passed: the drop must not renew the marker
    await store.commit(Commit(ladder, [write("a", 2.0, 2, 1)], {"m2": []}, produced=["m1"]))
    assert await store.client.hkeys(ladder_key(ladder, "unproduced")) == [b""]  # it keeps the hash a table
    assert (await store.read(ladder, [], [], ["m1"])).applied == {"m1": []}
    now[0] += 1800 + 900
    await store.commit(Commit(ladder, [write("a", 3.0, 3, 2)], {"m3": []}))
    assert (await store.read(ladder, [], [], ["m1", "m2"])).applied == {"m2": []}
    await store.close()


async def test_redis_a_commit_at_its_reads_watermark_looks_up_no_states(redis_url, ladder):
    """The check by watermark is what spares Redis a lookup of every written state and of the
    markers: the commit then has no HMGET; without it, one per markers slot and players bucket."""
    store = RedisStore.from_url(redis_url)
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}))

    async def hmgets(commit: Commit) -> int:
        await store.client.config_resetstat()
        await store.commit(commit)
        return (await store.client.info("commandstats")).get("cmdstat_hmget", {"calls": 0})["calls"]

    assert await hmgets(Commit(ladder, [write("a", 2.0, 2, 1)], {"m2": []}, read_at=(0, 1))) == 0
    assert await hmgets(Commit(ladder, [write("a", 3.0, 3, 2)], {"m3": []}, read_at=(0, 1))) == 2
    await store.close()


async def test_large_batch_round_trips(store, ladder):
    """Batches beyond the scripts' per-command chunk (1000) are read and written whole."""
    n = 2500
    events = [{"event_id": f"m{i}:a", "n": i} for i in range(n)]
    writes = [write(f"p{i}", float(i), 1, 0, score=float(i)) for i in range(n)]
    await store.commit(Commit(ladder, writes, {f"m{i}": [events[i]] for i in range(n)}, {"a": events}))
    snap = await store.read(ladder, [f"p{i}" for i in range(n + 10)], [], [f"m{i}" for i in range(n + 10)])
    assert snap.players == {w.player_id: w.state for w in writes}
    assert snap.applied == {f"m{i}": [events[i]] for i in range(n)}
    assert await store.history(ladder, "a", 10) == events[::-1][:3]
    assert (await store.leaderboard(ladder, 1)) == [(f"p{n - 1}", float(n - 1))]


async def test_effect_conflict_and_mixed_history(store, ladder):
    """Effects are versioned apart from players; history may hold entries of no marker."""
    shared, extra = {"event_id": "m1:Zoë 🎮"}, {"note": "not in a marker"}
    await store.commit(
        Commit(
            ladder,
            [write("Zoë 🎮", 1.0, 1, 0, score=0.1 + 0.2), write("home", 0.5, 1, 0, is_effect=True)],
            {"m1": [shared]},
            {"Zoë 🎮": [shared, extra]},
        )
    )
    assert await store.history(ladder, "Zoë 🎮", 10) == [extra, shared]
    assert await store.leaderboard(ladder, 1) == [("Zoë 🎮", 0.1 + 0.2)]
    with pytest.raises(CommitConflict, match="home"):
        await store.commit(Commit(ladder, [write("home", 0.6, 1, 0, is_effect=True)], {"m2": []}))
    snap = await store.read(ladder, ["Zoë 🎮", "home"], ["home", "Zoë 🎮"], ["m1", "m2"])
    assert set(snap.players) == {"Zoë 🎮"} and set(snap.effects) == {"home"}
    assert snap.effects["home"].mu == 0.5 and snap.applied == {"m1": [shared]}


async def test_redis_stored_values_keep_their_layout(redis_url, ladder):
    """Other readers see the documented encodings (`keys`): msgpack states in their buckets,
    markers as their placings (in ``mk:all`` without a marker TTL), unproduced events as a
    msgpack list in the stored form of `stored_events`, histories as a ring of chunks per state
    version, each framed compact entries (newest first), exact scores."""
    store = RedisStore.from_url(redis_url)
    plain = rating_changed("m1", ladder, "a", "elo", (25.0, None), (26.5, None), 1.5, 1, "t0", "t1")
    events = [plain, {"event_id": "m1:b"}]
    state = PlayerState(27.25, None, 1, 100.0, 1)
    await store.commit(
        Commit(
            ladder,
            [StateWrite("a", state, 0, leaderboard_score=1 / 3), StateWrite("home", state, 0, True)],
            {"m1": events},
            {"a": [events[0]], "b": [events[1], events[0]]},
            placings={"m1": [["a", 1]]},
        )
    )
    packb = lambda obj: msgpack.packb(obj, use_bin_type=True)  # noqa: E731
    client = store.client
    assert await client.hget(ladder_key(ladder, f"players:{bucket('a')}"), "a") == packb(
        [27.25, None, 1, 100, 1]
    )
    assert await client.hget(ladder_key(ladder, "effects"), "home") == state.pack()
    compact = ["m1", "a", "elo", 25.0, None, 26.5, None, 1.5, 1, "t0", "t1", False]
    assert await client.hget(ladder_key(ladder, "mk:all"), "m1") == packb([["a", 1]])
    assert await client.hget(ladder_key(ladder, "unproduced"), "m1") == packb([compact, events[1]])
    entry = packb(["m1", 25.0, None, 26.5, None, 1.5, 1, "t0", "t1", False])
    ring_a = await client.hget(ladder_key(ladder, f"players:{bucket('a')}"), b"\xffa:1")  # state version 1
    assert ring_a == (1).to_bytes(4, "big") + len(entry).to_bytes(2, "big") + entry
    other = packb(events[1])  # not a plain event of "b": its map, after "a"'s event as a map
    ring_b = await client.hget(ladder_key(ladder, f"players:{bucket('b')}"), b"\xffb:0")  # no state: 0
    framed = len(packb(plain)).to_bytes(2, "big") + packb(plain) + len(other).to_bytes(2, "big") + other
    assert ring_b == bytes(4) + framed
    assert await client.hget(ladder_key(ladder, "meta"), "model") == b"elo"
    assert (await store.read(ladder, [], [], ["m1"])).applied == {"m1": events}
    assert await store.history(ladder, "b", 10) == [events[0], events[1]]
    assert await client.zscore(ladder_key(ladder, "lb"), "a") == 1 / 3
    await store.close()


async def test_the_watermark_counts_applied_matches_and_survives_only_with_the_data(store, ladder):
    """Each commit adds its markers to the ladder's watermark; a read returns it (0 when new)."""
    assert (await store.read(ladder, [], [], [])).watermark == 0
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": [], "m2": []}))
    await store.commit(Commit(ladder, [write("a", 2.0, 2, 1)], {"m3": []}))
    assert (await store.read(ladder, ["a"], [], ["m1"])).watermark == 3


async def test_lookup_returns_states_and_leaderboard_places_in_one_round_trip(store, ladder):
    """Known players come back with their state and 0-based place; unknown ones are absent."""
    await store.commit(
        Commit(
            ladder,
            [
                write("a", 1.0, 1, 0, score=1.0),
                write("b", 3.0, 1, 0, score=3.0),
                write("c", 2.0, 1, 0, score=2.0),
            ],
            {"m1": []},
        )
    )
    before = store.round_trips
    found = await store.lookup(ladder, ["c", "nobody", "b"])
    assert store.round_trips - before == 1
    assert {p: s.mu for p, s in found.players.items()} == {"c": 2.0, "b": 3.0}
    assert (found.places, found.ranked) == ({"b": 0, "c": 1}, 3)


async def test_lookup_places_are_shared_by_tied_players_and_leave_out_idle_ones(store, ladder):
    """A lookup's places are ranks less one (tied players share one) of the players active
    since the cut-off given; an idle player keeps their state."""
    players = [("a", 2.0, 100.0), ("b", 2.0, 300.0), ("c", 1.0, 300.0)]
    await store.commit(
        Commit(ladder, [write(p, 20.0, 1, 0, score=s, active=last) for p, s, last in players], {"m1": []})
    )
    tied = await store.lookup(ladder, ["c", "b", "a"])
    assert (tied.places, tied.ranked) == ({"a": 0, "b": 0, "c": 2}, 3)
    before = store.round_trips
    active = await store.lookup(ladder, ["c", "b", "a"], 200.0)
    assert store.round_trips - before == 1
    assert (active.places, active.ranked, set(active.players)) == ({"b": 0, "c": 1}, 2, {"a", "b", "c"})


async def test_a_write_without_a_score_takes_the_player_off_the_leaderboard(store, ladder):
    """A player's write with no leaderboard score (the ladder's rules do not rank them)
    removes them from the leaderboard and from the activity set, keeping their state."""
    await store.commit(
        Commit(
            ladder,
            [write("a", 27.0, 1, 0, score=5.0, active=100.0), write("b", 23.0, 1, 0, score=1.0)],
            {"m1": []},
        )
    )
    assert await store.board_ranks(ladder, ["a", "b"], 200.0) == BoardRanks({"b": 1}, 1)  # a: idle
    assert await store.board_ranks(ladder, ["a", "b"], 0.0) == BoardRanks({"a": 1, "b": 2}, 2)
    await store.commit(Commit(ladder, [write("a", 28.0, 2, 1)], {"m2": []}))
    assert await store.leaderboard(ladder, 10) == [("b", 1.0)]
    assert await store.board_ranks(ladder, ["a"], 0.0) == BoardRanks({}, 1)
    assert (await store.players(ladder, only=["a"]))["a"].mu == 28.0
    assert (await store.lookup(ladder, ["a", "b"])).places == {"b": 0}


def competition(scores: dict[str, float]) -> list[BoardRow]:
    """The oracle: `scores` best first, ties by id descending, ranked 1 + those strictly higher."""
    order = sorted(scores, key=lambda p: (scores[p], p), reverse=True)
    return [BoardRow(p, scores[p], 1 + sum(s > scores[p] for s in scores.values())) for p in order]


@pytest.mark.parametrize("since", [None, 1100.0])
async def test_board_reads_rank_ties_alike_and_skip_idle_players(store, ladder, since):
    """Top rows, ranks, around-me and totals of the eligible board: players idle since `since`
    left out (still on the board: no commit trimmed them), ties ranked "1224" (1 + the players
    strictly higher) and ordered by id descending, in every read."""
    players = [(f"p{i:03d}", float(i % 17), 1000.0 + (i * 37) % 200) for i in range(120)]
    await store.commit(
        Commit(
            ladder, [write(p, 20.0, 1, 0, score=score, active=last) for p, score, last in players], {"m1": []}
        )
    )
    oracle = competition({p: score for p, score, last in players if since is None or last >= since})
    assert await store.board_top(ladder, 9, since) == oracle[:9]
    asked = [oracle[0].player_id, oracle[5].player_id, oracle[-1].player_id, "p001", "nobody"]
    expected = {row.player_id: row.rank for row in oracle if row.player_id in asked}
    assert await store.board_ranks(ladder, asked, since) == BoardRanks(expected, len(oracle))
    for at in (0, 1, len(oracle) // 2, len(oracle) - 1):
        around = await store.board_around(ladder, oracle[at].player_id, 3, since)
        assert around == BoardAround(oracle[max(0, at - 3) : at + 4], oracle[at].rank, len(oracle))
    assert await store.board_around(ladder, "nobody", 3, since) is None
    several = [oracle[0].player_id, "nobody", oracle[len(oracle) // 2].player_id]
    assert await store.board_arounds(ladder, several, 3, since) == {
        p: await store.board_around(ladder, p, 3, since) for p in several
    }
    totals = await store.rating_totals(ladder, since)
    assert (totals.ranked, totals.active) == (len(oracle), len(oracle))
    assert totals.ranked_sum == pytest.approx(sum(row.score for row in oracle), abs=1e-9)
    assert await store.recount_totals(ladder, since) == totals


async def test_a_board_read_past_too_many_idle_players_is_refused(store, ladder, monkeypatch):
    """A read that would skip more idle players than the limit is refused (`BoardBehind`, one
    line naming the ladder) rather than made slow; once trimmed, it answers."""
    monkeypatch.setattr("stream_rater.store.redis.leaderboard.IDLE_READ_LIMIT", 5)
    players = [(f"p{i}", float(i), 1000.0 + i) for i in range(20)]
    await store.commit(
        Commit(ladder, [write(p, 20.0, 1, 0, score=s, active=last) for p, s, last in players], {"m1": []})
    )
    if isinstance(store, RedisStore):
        with pytest.raises(BoardBehind, match=rf"^ladder {ladder!r}: more than 5 players went idle"):
            await store.board_top(ladder, 3, 1010.0)
    assert await store.trim_board(ladder, 1010.0) == 10
    assert [row.player_id for row in await store.board_top(ladder, 3, 1010.0)] == ["p19", "p18", "p17"]
    assert (await store.board_ranks(ladder, ["p10", "p9"], 1010.0)).ranks == {"p10": 10}


async def test_commits_trim_idle_players_and_keep_the_running_sum(store, ladder, monkeypatch):
    """A commit with an activity rule (`active_within`) takes players idle since its newest
    match off the board (a few per commit: the rest on later commits), re-scores and removes
    keep the running sum equal to a recount, and an ended season's board is the eligible one."""
    monkeypatch.setattr("stream_rater.store.redis.leaderboard.TOTALS_STEP", 7)
    day = 86_400.0
    writes = [
        write(f"p{i:03d}", 20.0, 1, 0, score=1000.0 + i * 0.37, active=i * day / 10) for i in range(300)
    ]
    await store.commit(Commit(ladder, writes, {"m1": []}, active_within=10 * day))  # trims < 19.9 days
    more = [write("p299", 20.0, 2, 1, score=5.0, active=30 * day), write("p298", 20.0, 2, 1, active=30 * day)]
    await store.commit(Commit(ladder, more, {"m2": []}, active_within=10 * day))  # trims < 20 days
    since = 20 * day
    kept = {w.player_id: w.leaderboard_score for w in writes[200:298]} | {"p299": 5.0}
    entries, running = await store.board_entries(ladder, since)
    assert entries == kept and running == pytest.approx(sum(kept.values()), abs=1e-6)
    assert (await store.recount_totals(ladder, since)).ranked_sum == pytest.approx(running, abs=1e-6)
    if isinstance(store, RedisStore):  # trimmed: only the players of the last 10 days are left
        assert await store.client.zcard(ladder_key(ladder, "lb")) == len(kept)
        assert await store.client.zcard(ladder_key(ladder, "act")) == len(kept)
    season = Commit(ladder, [write("p297", 20.0, 2, 1, score=1.0, active=31 * day)], {"m3": []},
                    season="s1", active_within=10 * day)  # fmt: skip
    await store.commit(season)
    ended = await store.board_top(ladder, 1000, None, season=1)
    assert {row.player_id for row in ended} == {p for p in kept if p >= "p210"} | {"p299"}


async def test_a_season_commit_keeps_the_ending_seasons_leaderboard(store, ladder):
    """A commit that starts a season copies the leaderboard as it was before its writes; the
    seasons are listed in order and an unended season is a KeyError."""
    await store.commit(
        Commit(ladder, [write("a", 30.0, 1, 0, score=30.0), write("b", 20.0, 1, 0, score=20.0)], {"m1": []})
    )
    await store.commit(
        Commit(
            ladder,
            [write("a", 25.0, 2, 1, score=15.0), write("b", 22.0, 2, 1, score=21.0)],
            {"s1": []},
            season="s1",
        )
    )
    assert await store.seasons(ladder) == ["s1"]
    assert await store.leaderboard(ladder, 10, season=1) == [("a", 30.0), ("b", 20.0)]
    assert await store.leaderboard(ladder, 10) == [("b", 21.0), ("a", 15.0)]
    with pytest.raises(KeyError):
        await store.leaderboard(ladder, 10, season=2)


async def test_a_season_commit_keeps_every_players_state_as_the_season_left_it(store, ladder):
    """A commit that starts a season keeps every player's whole state as it was before its
    writes (μ, σ, games, last match), the same on every store; later commits do not touch it,
    and an unended season is a KeyError."""
    await store.commit(
        Commit(ladder, [write("a", 30.0, 1, 0, score=30.0), write("b", 20.0, 1, 0, score=20.0)], {"m1": []})
    )
    before = await store.players(ladder)
    await store.commit(
        Commit(
            ladder,
            [write("a", 25.0, 2, 1, score=15.0), write("b", 22.0, 2, 1, score=21.0)],
            {"s1": []},
            season="s1",
        )
    )
    await store.commit(Commit(ladder, [write("a", 26.0, 3, 2, score=16.0)], {"m2": []}))
    assert await store.season_states(ladder, 1, ["a", "b", "nobody"]) == {"a": before["a"], "b": before["b"]}
    assert await store.season_states(ladder, 1, []) == {}
    with pytest.raises(KeyError):
        await store.season_states(ladder, 2, ["a"])


async def test_a_state_with_a_peak_reads_back_whole(store, ladder):
    """The peak and its time are stored with the state."""
    state = PlayerState(27.0, 1.0, 3, 100.0, 1, None, 31.5, 90.0)
    await store.commit(Commit(ladder, [StateWrite("a", state, 0, leaderboard_score=27.0)], {"m1": []}))
    assert (await store.read(ladder, ["a"], [], [])).players["a"] == state


async def test_a_refused_season_commit_keeps_no_season(store, ladder):
    """A season commit refused by the version check writes nothing: no ended season, no
    archived leaderboard, the live one unchanged."""
    await store.commit(Commit(ladder, [write("a", 30.0, 1, 0, score=30.0)], {"m1": []}))
    with pytest.raises(CommitConflict):
        await store.commit(Commit(ladder, [write("a", 20.0, 1, 0, score=20.0)], {"s1": []}, season="s1"))
    assert await store.seasons(ladder) == []
    assert await store.leaderboard(ladder, 10) == [("a", 30.0)]
    with pytest.raises(KeyError):
        await store.leaderboard(ladder, 10, season=1)


@pytest.fixture(params=["memory", "redis", "redis_cluster"])
async def two_deployments(request):
    """Two stores of each kind on one server, each with a key prefix no other test uses (for
    memory, two stores)."""
    url = "memory" if request.param == "memory" else request.getfixturevalue(f"{request.param}_url")
    tag = uuid.uuid4().hex[:8]
    stores = [open_store(url, history_limit=3, prefix=f"{name}-{tag}") for name in ("staging", "prod")]
    yield stores
    for s in stores:
        await s.close()


async def test_prefixes_keep_two_deployments_apart(two_deployments, ladder):
    """Two prefixes on one Redis (or Redis Cluster) with the same ladder name: each store reads
    back only its own states, markers, positions and ladders, and dropping or re-rating one's
    generation leaves the other's alone."""
    staging, prod = two_deployments
    await staging.commit(Commit(ladder, [write("a", 1.0, 1, 0, score=1.0)], {"m1": []}, positions={0: 5}))
    await prod.commit(Commit(ladder, [write("a", 7.0, 1, 0, score=7.0)], {"m2": []}, positions={0: 9}))
    assert (await staging.read(ladder, ["a"], [], ["m1", "m2"])).players["a"].mu == 1.0
    assert set((await staging.read(ladder, ["a"], [], ["m1", "m2"])).applied) == {"m1"}
    assert (await prod.players(ladder))["a"].mu == 7.0
    assert await staging.leaderboard(ladder, 10) == [("a", 1.0)]
    assert await staging.ladders() == await prod.ladders() == [ladder]
    assert (await staging.generations(ladder)).positions == {0: 5}
    assert (await prod.generations(ladder)).positions == {0: 9}
    staging_gen, _ = await staging.begin_rerate(ladder, "me", 30.0, None)
    assert (await prod.generations(ladder)).staging is None
    await staging.abort_rerate(ladder, "me")
    await staging.drop_generation(ladder, staging_gen)
    assert (await prod.players(ladder))["a"].mu == 7.0


async def test_a_ladder_is_bound_to_one_matches_topic(two_deployments, ladder):
    """`bind` with a topic records it for each ladder the store holds (a ladder not applied
    yet stays unbound), passes again with it, and refuses another topic in one line naming the
    ladder and both topics; a check without a topic passes and writes nothing. A store without
    a record is recorded in format 2 (new, or emptied while the release before may run on it),
    unless the caller knows it new; a record once written stays."""
    from stream_rater.store.deployment import EARLIEST_FORMAT, STORE_FORMAT, StoreRefused, bind

    store, other = two_deployments
    await bind(store, None)
    assert await store.deployment_record() == {}  # a check alone writes nothing
    await bind(store, "matches-a", [ladder])
    assert await store.ladder_topics([ladder], None) == {}  # not applied yet: nothing to name
    assert await store.deployment_record() == {"format": str(EARLIEST_FORMAT)}
    assert await bind(store, "matches-a", [ladder], new=STORE_FORMAT) == EARLIEST_FORMAT
    assert await bind(other, "matches-b", [], new=STORE_FORMAT) == STORE_FORMAT
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}, positions={0: 1}))
    await bind(store, "matches-a", [ladder])
    assert await store.ladder_topics([ladder], None) == {ladder: "matches-a"}
    await bind(store, "matches-a", [ladder])
    with pytest.raises(StoreRefused) as refused:
        await bind(store, "matches-b", [ladder, "unused"])
    message = str(refused.value)
    assert f"ladder {ladder!r}" in message and "'matches-a'" in message and "'matches-b'" in message
    assert "STREAM_RATER_REDIS_PREFIX" in message and "\n" not in message
    assert await store.ladder_topics([ladder, "unused"], None) == {ladder: "matches-a"}
    await other.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}))
    await bind(other, "matches-b", [ladder])  # the same ladder name under another prefix


async def test_a_store_of_a_newer_format_is_refused(two_deployments):
    """A store whose record says a newer stored format is refused, with or without a topic, in
    one line naming both formats; a store of this format is not."""
    from stream_rater.store.deployment import STORE_FORMAT, StoreRefused, bind

    newer, current = two_deployments
    await newer.deployment_record({"format": str(STORE_FORMAT + 1)})
    for topic in (None, "matches"):
        with pytest.raises(
            StoreRefused, match=rf"format {STORE_FORMAT + 1}, newer than format {STORE_FORMAT} "
        ):
            await bind(newer, topic, ["x"])
    await current.deployment_record({"format": str(STORE_FORMAT)})
    await bind(current, "matches", ["x"])


async def test_redis_default_prefix_is_the_layout_of_before_and_a_prefix_keeps_the_hash_tag(
    redis_url, ladder
):
    """Without a prefix the keys are byte for byte ``sr:{ladder}:…`` (stores written before the
    setting need no migration); with one, every key starts with it and keeps ``{ladder}``, and
    the deployment record is ``<prefix>:deployment``."""
    from stream_rater.store.deployment import bind

    tag = f"p-{uuid.uuid4().hex[:8]}"
    for store, start in (
        (RedisStore.from_url(redis_url), "sr"),
        (RedisStore.from_url(redis_url, prefix=tag), tag),
    ):
        await store.commit(Commit(ladder, [write("a", 1.0, 1, 0, score=1.0)], {"m1": []}, {"a": [{}]}))
        keys = sorted([k.decode() async for k in store.client.scan_iter(match=f"{start}:*{ladder}*")])
        assert keys == _format_2_keys(ladder, start)
        await store.close()
    store = RedisStore.from_url(redis_url, prefix=tag)
    await bind(store, "matches", [ladder])
    assert await store.client.hgetall(f"{tag}:deployment") == {
        b"format": b"2"
    }  # new or emptied: `store.deployment`
    assert await store.client.hget(f"{tag}:{{{ladder}}}:control", "topic") == b"matches"
    await store.close()


@pytest.mark.parametrize("prefix", ["", "a:b", "{x}", "a*", "a b", "x" * 65])
def test_a_bad_prefix_is_one_line_naming_the_variable(prefix):
    """A prefix that could break the key layout, the hash tag or a scan pattern is refused."""
    with pytest.raises(ValueError, match=r"^STREAM_RATER_REDIS_PREFIX=.*letters, digits"):
        open_store("redis://127.0.0.1:1/0", prefix=prefix)


async def test_a_markers_placings_are_the_index_by_match(store, ladder):
    """A commit's placings are kept in its markers and read back by match id: None for a
    match never applied, empty for a marker without them."""
    await store.commit(
        Commit(
            ladder,
            [write("a", 27.0, 1, 0), write("b", 23.0, 1, 0)],
            {"m1": [{"event_id": "m1:a"}], "m2": []},
            placings={"m1": [["a", 0], ["b", 1]]},
        )
    )
    assert await store.placings(ladder, "m1") == [("a", 0), ("b", 1)]
    assert await store.placings(ladder, "m2") == []
    assert await store.placings(ladder, "m3") is None


async def test_quality_sums_and_window_are_kept_with_the_commit(store, ladder):
    """Each commit adds its scorer's increments to the sums and pushes its match scores onto
    the window, newest first; a refused commit adds nothing."""
    first = Commit(
        ladder,
        [write("a", 1.0, 1, 0)],
        {"m1": []},
        quality={"live": ({"matches": 1, "log_loss": 0.5}, [[1, 0.0, 0.5, 0.1, []]])},
    )
    await store.commit(first)
    with pytest.raises(CommitConflict):
        await store.commit(first)
    second = Commit(
        ladder, [write("a", 1.0, 2, 1)], {"m2": [], "m3": []},
        quality={"live": ({"matches": 2, "log_loss": 0.25}, [[1, 1.0, None, None, [[3, 0.3, True]]], [0, 0.0, None, None, []]])},
    )  # fmt: skip
    await store.commit(second)
    sums, window = await store.quality(ladder, "live", 2)
    assert sums == {"matches": 3.0, "log_loss": 0.75}
    assert window == [[0, 0.0, None, None, []], [1, 1.0, None, None, [[3, 0.3, True]]]]
    assert await store.quality(ladder, "shadow", 5) == ({}, [])


async def test_a_record_below_the_ladders_position_reads_as_applied(store, ladder):
    """A match whose record (partition, offset) is below the ladder's stored position in that
    partition reads as applied (with its unproduced events, none here), marker or not; at or
    above the position, in another partition, or without a record, only a marker counts."""
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}, positions={0: 5}))
    request = ReadRequest(
        ladder, [], [], ["x4", "x5", "y0", "z", "m1"], None, [(0, 4), (0, 5), (1, 0), None, None]
    )
    [snap] = await store.read_many([request])
    assert snap.applied == {"x4": [], "m1": []}


# The re-rate control steps sent twice in a row: the second run is a client's retry of a reply
# lost after the store ran the step (control.lua's header), and answers as the first did.


async def test_a_begin_sent_again_answers_the_same_generation_and_abandoned_one(store, ladder):
    """A begin sent again with its request opens no second generation and hands back the same
    abandoned one (a second generation abandoned the first, and the truly abandoned one was
    never dropped); a begin with another request opens a new one."""
    abandoned, _ = await store.begin_rerate(ladder, "one", 60, None)
    first = await store.begin_rerate(ladder, "one", 60, None, request="r1")
    assert await store.begin_rerate(ladder, "one", 60, None, request="r1") == first
    assert first[1] == abandoned and (await store.generations(ladder)).staging == first[0]
    assert await store.begin_rerate(ladder, "one", 60, None, request="r2") == (first[0] + 1, first[0])


async def test_a_finish_sent_again_after_it_took_effect_answers_ok(store, ladder):
    """A finish sent again finds the lock, outbox and hold gone: ok (it answered 'lost', and
    the re-rate reported a failure for a correction that took effect). A lock that expired
    with an outbox left is still lost."""
    outbox = [{"player_id": "a", "event_id": "rerate:a"}]
    for finished in (True, False):
        generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
        live = await store.generations(ladder)
        await store.freeze(ladder, "owner", 60)
        await store.switch(ladder, "owner", generation, live, outbox)
        if finished:
            await store.finish_rerate(ladder, "owner")
            await store.finish_rerate(ladder, "owner")
            await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}))
        else:
            await store.renew(ladder, "owner", 0.05)
            await wait_until_async(lambda: _lock_free(store, ladder), "the lock's expiry", 5.0, interval=0.01)
            with pytest.raises(LockLost):
                await store.finish_rerate(ladder, "owner")
    assert await store.outbox(ladder) == outbox


async def _lock_free(store, ladder: str) -> bool:
    return (await store.generations(ladder)).lock_owner is None


async def test_an_abort_sent_again_answers_the_generation_it_forgot(store, ladder):
    """An abort sent again answers the staging generation the first forgot, for the caller to
    drop (it answered None, and the generation's keys were never dropped); an abort of an owner
    whose re-rate switched and finished stays a no-op."""
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    assert await store.abort_rerate(ladder, "owner") == generation
    assert await store.abort_rerate(ladder, "owner") == generation
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    live = await store.generations(ladder)
    await store.freeze(ladder, "owner", 60)
    await store.switch(ladder, "owner", generation, live, [])
    await store.finish_rerate(ladder, "owner")
    assert await store.abort_rerate(ladder, "owner") is None


async def test_stage_freeze_renew_and_release_sent_again_change_nothing(store, ladder):
    """The steps idempotent by nature: staged twice, one event each; frozen and renewed twice,
    still frozen; released twice, the player free and the other still held."""
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    live = await store.generations(ladder)
    outbox = [{"player_id": p, "event_id": f"rerate:{p}"} for p in ("a", "b")]
    for _ in range(2):
        await store.stage(ladder, "owner", generation, outbox)
    for _ in range(2):
        await store.freeze(ladder, "owner", 60)
        await store.renew(ladder, "owner", 60)
    with pytest.raises(LadderFrozen):
        await store.commit(Commit(ladder, [write("c", 1.0, 1, 0)], {"m1": []}))
    await store.switch(ladder, "owner", generation, live, [])
    for _ in range(2):
        await store.release(ladder, "owner", ["a"])
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0)], {"m1": []}))
    with pytest.raises(LadderFrozen):
        await store.commit(Commit(ladder, [write("b", 1.0, 1, 0)], {"m2": []}))
    assert await store.outbox(ladder) == outbox


async def test_an_abort_after_a_switch_whose_replies_were_lost_keeps_the_hold(store, ladder):
    """A switch that took effect while its client heard only errors (every reply lost) makes
    the re-rate abort: the lock goes, but the corrected players stay held with their events in
    the outbox (the abort dropped the hold, and their live events went out first)."""
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    live = await store.generations(ladder)
    await store.freeze(ladder, "owner", 60)
    outbox = [{"player_id": "a", "event_id": "rerate:a"}]
    await store.switch(ladder, "owner", generation, live, outbox)
    assert await store.abort_rerate(ladder, "owner") is None
    assert (await store.generations(ladder)).lock_owner is None and await store.outbox(ladder) == outbox
    with pytest.raises(LadderFrozen):
        await store.commit(Commit(ladder, [write("a", 2.0, 1, 0)], {"m1": []}))
    await store.commit(Commit(ladder, [write("b", 2.0, 1, 0)], {"m1": []}))


async def test_seasons_copied_twice_are_listed_once(store, ladder):
    """A copy of the ended seasons sent again (a Redis Cluster client's retry of a lost reply)
    lists each season once in the new generation (the list was appended to again)."""
    await store.commit(Commit(ladder, [write("a", 30.0, 1, 0, score=30.0)], {"m1": []}))
    await store.commit(Commit(ladder, [write("a", 25.0, 2, 1, score=15.0)], {"s1": []}, season="s1"))
    generation, _ = await store.begin_rerate(ladder, "owner", 60, None)
    for _ in range(2):
        await store.copy_seasons(ladder, 0, generation, ["s1"])
    live = await store.generations(ladder)
    await store.freeze(ladder, "owner", 60)
    await store.switch(ladder, "owner", generation, live, [])
    assert await store.seasons(ladder) == ["s1"]


# ---- The running sum from the old scores a Redis store's own commits left (store.redis.boards) ----


@pytest.fixture(params=["redis", "redis_cluster"])
async def redis_stores(request):
    """Two fresh Redis stores (single and Cluster): one knows what its commits left on the
    boards, the other is made to ask Redis (`ZMSCORE`) every time."""
    url = request.getfixturevalue(f"{request.param}_url")
    known, asking = open_store(url, history_limit=3), open_store(url, history_limit=3)
    asking.known_boards.fields = lambda *_: {}
    yield known, asking
    await known.close()
    await asking.close()


async def _sums(store: RedisStore, ladder: str) -> tuple[list[bytes], list[bool]]:
    """`lb:sum` after each commit of a sequence that re-scores, takes a player off, trims
    between commits (a board read's trim) and in a commit, each commit at its read watermark;
    and per commit whether it sent old scores (`previous`)."""
    day, sums, sent = 86_400.0, [], []
    fields = store.known_boards.fields

    def recorded(*args):
        out = fields(*args)
        sent.append(any(isinstance(p, float) for p in out.get("previous", ())))
        return out

    store.known_boards.fields = recorded
    batches = [
        [write(p, 1.0, 1, 0, score=s, active=day * t) for p, s, t in (("a", 10.1, 1), ("b", 20.2, 5), ("c", 30.3, 5), ("d", 40.4, 5))],
        [write("a", 1.0, 2, 1, score=11.1, active=2 * day), write("b", 1.0, 2, 1, active=6 * day)],
        [write("a", 1.0, 3, 2, score=12.3, active=20 * day), write("c", 1.0, 2, 1, score=31.0, active=20 * day)],
        [write("d", 1.0, 2, 1, score=41.0, active=21 * day), write("a", 1.0, 4, 3, score=13.0, active=21 * day)],
    ]  # fmt: skip
    for n, writes in enumerate(batches):
        if n == 2:
            await store.trim_board(ladder, 3 * day)  # takes "a" off, with no commit
        await store.commit(Commit(ladder, writes, {f"m{n}": []}, read_at=(0, n), active_within=10 * day))
        sums.append(await store.client.hget(ladder_key(ladder, "meta"), "lb:sum"))
    return sums, sent


async def test_redis_the_running_sum_from_known_old_scores_is_the_asked_ones(redis_stores, ladder):
    """The commits that send their players' old scores leave `lb:sum` the same bytes as asking
    Redis: the second (all known), the third (whose scores Redis does not use: a trim since
    changed the board) and the fourth ("a", not "d", which its predecessor's trim took off)."""
    known, asking = redis_stores
    sums, sent = await _sums(known, ladder)
    assert sent == [False, True, True, True]
    assert (sums, [False] * 4) == await _sums(asking, ladder + "-asked")
    entries, running = await known.board_entries(ladder, None)
    assert entries == {"a": 13.0, "c": 31.0, "d": 41.0} and running == pytest.approx(85.0)


def test_known_boards_keep_at_most_their_limit_and_forget_what_went_unanswered():
    """Past its limit `KnownBoards` forgets the ladder committed to least recently; a call with
    no reply (a failed round trip) or a refusal forgets its ladder; a commit of another read
    (watermark) sends nothing."""
    known = KnownBoards(limit=3)

    def commit(ladder: str, at: int, *players: str) -> tuple[Commit, dict]:
        c = Commit(ladder, [write(p, 1.0, 1, 0, score=1.5) for p in players], {"m": []}, read_at=(0, at))
        return c, known.fields(c, 0, None, {})

    for ladder in ("l1", "l2"):
        c, _ = commit(ladder, 0, "a", "b")
        known.answered(c, ["ok", 2])
    assert commit("l1", 1, "a")[1] == {}  # l1 forgotten: 4 players known, at most 3
    c, sent = commit("l2", 1, "a", "x")
    assert sent == {"previous": [1.5, None], "cards": [2]}
    assert commit("l2", 5, "a")[1] == {}  # not at the read its last commit left
    known.forget([c])  # c's call unanswered
    c, sent = commit("l2", 1, "a")
    assert sent == {}
    known.answered(c, ["ok", 1])
    c, _ = commit("l2", 2, "a")
    known.answered(c, ["conflict", "a"])
    assert commit("l2", 3, "a")[1] == {}


async def test_redis_a_store_that_may_know_no_players_asks_redis_every_time(redis_url, ladder):
    """`known_boards=0` (a worker with ``STREAM_RATER_KNOWN_STATES=0``): no old score is kept,
    so the next commit sends none and the script asks Redis (`ZMSCORE`)."""
    store = open_store(redis_url, history_limit=0, known_boards=0)
    await store.commit(Commit(ladder, [write("a", 1.0, 1, 0, score=2.5)], {"m1": []}, read_at=(0, 0)))
    second = Commit(ladder, [write("a", 1.0, 2, 1, score=3.5)], {"m2": []}, read_at=(0, 1))
    assert store.known_boards.fields(second, 0, None, {}) == {}
    store.known_boards.forget([second])
    await store.close()


async def test_redis_a_store_without_history_knows_its_boards_too(redis_url, ladder):
    """A store that keeps no history (it writes a copy of each commit without it) still sends
    the old scores its last commit left, and keeps no call once answered."""
    store = open_store(redis_url, history_limit=0)
    first = Commit(ladder, [write("a", 1.0, 1, 0, score=2.5)], {"m1": []}, read_at=(0, 0))
    await store.commit(first)
    second = Commit(ladder, [write("a", 1.0, 2, 1, score=3.5)], {"m2": []}, read_at=(0, 1))
    assert store.known_boards.fields(second, 0, None, {})["previous"] == [2.5]
    store.known_boards.forget([second])
    await store.commit(dataclasses.replace(second))
    assert (
        store.known_boards._sent == {}
        and await store.client.hget(ladder_key(ladder, "meta"), "lb:sum") == b"3.5"
    )
    await store.close()
