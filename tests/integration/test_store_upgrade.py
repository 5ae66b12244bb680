"""`stream-rater migrate --to 2` on a real Redis: a store of stored format 1 (written here by a
tiny format-1 writer from what the memory store computed) reads back the same after the upgrade,
and matches applied before it are never applied twice. A format-2 store is written as format 2
(workers of the release before share it) until raised to 3."""

from __future__ import annotations

import random
import uuid

import msgpack
import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.offline.verify import board_differences
from stream_rater.processor import Processor
from stream_rater.store import deployment
from stream_rater.store.deployment import StoreRefused, bind
from stream_rater.store.memory import MemoryStore
from stream_rater.store.redis import RedisStore, raise_format, upgrade_to_2
from stream_rater.store.redis.keys import bucket
from stream_rater.store.stored_events import pack_event, pack_events
from stream_rater.store.values import Commit, PlayerState, StateWrite
from tests.helpers import parsed_duel

pytestmark = pytest.mark.integration

HASH_TABLE = b"-" * 128
NOW = 1_700_000_000.0


def clock() -> float:
    return NOW


def _pack_1(state: PlayerState) -> bytes:
    """A state as format 1 packed it: floats as floats, trailing unset fields left out."""
    fields = state if state.peak is not None else state[:5] if state.extra is None else state[:6]
    return msgpack.packb(list(fields), use_bin_type=True)


async def _write_format_1(client, prefix: str, ladder: str, mem: MemoryStore) -> None:
    """The format-1 keys of `ladder` as `mem` holds it, with a season ``s0`` archived (a copy
    of the players hash and leaderboard, as format 1's season start made)."""
    gen = mem._ladders[ladder].generations[0]
    key = f"{prefix}:{{{ladder}}}:".__add__
    players = {"": HASH_TABLE, **{p: _pack_1(s) for p, s in gen.players.items()}}
    await client.hset(key("players"), mapping=players)
    await client.hset(key("players:season:s0"), mapping=players)
    await client.zadd(key("lb"), gen.scores)
    await client.zadd(key("lb:season:s0"), gen.scores)
    await client.rpush(key("seasons"), "s0")
    for player, entries in gen.history.items():
        await client.rpush(key(f"h:{player}"), *(pack_event(e, ladder) for e in entries))
    placings = {m: msgpack.packb(rows, use_bin_type=True) for m, rows in gen.placings.items()}
    await client.hset(key("mk"), mapping={"": HASH_TABLE, **{m: placings.get(m, b"") for m in gen.applied}})
    ids = list(gen.applied)
    await client.zadd(
        key("mk:expiry"), {msgpack.packb(ids[:10]): NOW + 3600, msgpack.packb(ids[10:]): NOW + 7200}
    )
    held = {m: pack_events(events, ladder) for m, events in gen.applied.items() if events}
    if held:
        await client.hset(key("unproduced"), mapping=held)
    await client.hset(
        key("meta"), mapping={"applied": gen.watermark, **{f"p:{p}": o for p, o in gen.positions.items()}}
    )


def _bits(states: dict[str, PlayerState]) -> dict[str, tuple[object, ...]]:
    """States with every float by its bits (so -0.0, nan and ints-as-floats compare exactly)."""
    return {p: tuple((type(v), v.hex()) if isinstance(v, float) else v for v in s) for p, s in states.items()}


async def test_a_format_1_store_upgrades_in_place_and_applies_nothing_twice(redis_url):
    name = f"t-{uuid.uuid4().hex[:10]}"
    ladders = Ladders([Ladder(name, "glicko2", {})])
    rng = random.Random(3)
    players = ["a", "b", "5", "c", "ünï"]  # "5": its format-1 history key is also a bucket's name
    matches = [parsed_duel(ladders, f"m{i}", *rng.sample(players, 2), ladder=name, at=i) for i in range(30)]
    where = [(0, 100 + i) for i in range(30)]
    mem = MemoryStore(history_limit=100)
    worker = Processor(ladders, mem, clock=clock)
    worker.produced(await worker.process(matches[:15], where[:15]))
    unproduced = await worker.process(matches[15:20], where[15:20])  # died before producing these
    prefix = f"up-{uuid.uuid4().hex[:8]}"
    store = RedisStore.from_url(redis_url, prefix=prefix, marker_ttl=3600, clock=clock)
    await _write_format_1(store.client, prefix, name, mem)
    with pytest.raises(StoreRefused, match=r"stored format 1: .*`stream-rater migrate --to 2`"):
        await bind(store, "matches", [name])
    before = await mem.players(name)

    moved = await upgrade_to_2(store)
    assert moved == {
        "legacy markers": 0, "states": 2 * len(before), "histories": len(before), "markers": 20,
        "leaderboard sums": 1,  # the live one (an ended season's board has none)
    }  # fmt: skip
    assert await store.deployment_record() == {"format": "2"}
    await bind(store, "matches", [name])
    assert _bits(await store.players(name)) == _bits(before)
    assert await store.leaderboard(name, 10) == await mem.leaderboard(name, 10)
    assert await store.leaderboard(name, 10, season=1) == await mem.leaderboard(name, 10)
    assert _bits(await store.season_states(name, 1, players)) == _bits(before)
    for player in players:
        assert await store.history(name, player, 10) == await mem.history(name, player, store.history_limit)
    for match in matches[:20]:
        assert await store.placings(name, match.match_id) == await mem.placings(name, match.match_id)
    assert not [k async for k in store.client.scan_iter(match=f"{prefix}:*:h:*")]  # no history lists left
    assert not await store.client.exists(f"{prefix}:{{{name}}}:players", f"{prefix}:{{{name}}}:mk")
    assert await store.client.object("encoding", f"{prefix}:{{{name}}}:players:season:s0:{bucket('a')}") in (
        b"listpack",
        b"ziplist",
    )

    again = await Processor(ladders, store, clock=clock).process(matches, where)
    assert all(r.duplicate for r in again.results[:20]) and not any(r.duplicate for r in again.results[20:])
    assert [e for r in again.results[15:20] for e in r.events] == unproduced.events
    rest = await worker.process(matches[20:], where[20:])
    assert [e for r in again.results[20:] for e in r.events] == rest.events
    assert _bits(await store.players(name)) == _bits(await mem.players(name))
    # the leaderboard's running sum, recounted by the upgrade, kept by the commits since
    assert await board_differences(store, ladders.get(name), await store.players(name), NOW, 1e-9) == []
    totals, oracle = await store.rating_totals(name, None), await mem.rating_totals(name, None)
    assert totals.ranked == oracle.ranked and totals.ranked_sum == pytest.approx(oracle.ranked_sum, rel=1e-12)
    assert await upgrade_to_2(store) == {
        "legacy markers": 0, "states": 0, "histories": 0, "markers": 0, "leaderboard sums": 1
    }  # fmt: skip
    await store.close()


async def test_a_format_2_store_is_written_as_format_2_until_raised_to_3(redis_url, monkeypatch):
    """On a store of format 2 a commit while the batch before is still unproduced copies its
    events in: no ``unproduced:older``, the ``unproduced`` hash holds every unproduced event, as
    the release before reads them; a new quality sums hash has no field ''. Raised to 3, a store
    opened since moves them aside (one opened before keeps copying), reads them from both, and a
    worker of the release before (format 2) refuses the store at start."""
    name, prefix = f"t-{uuid.uuid4().hex[:10]}", f"f2-{uuid.uuid4().hex[:8]}"
    key = f"{prefix}:{{{name}}}:".__add__
    events = {f"m{i}": [{"event_id": f"m{i}:a"}] for i in range(1, 5)}
    quality = {"live": ({"matches": 1}, [[1, 0.0, 0.5, 0.1, []]])}

    def commit(i: int) -> Commit:
        state = PlayerState(25.0 + i, 1.0, i, 100.0, i)
        return Commit(name, [StateWrite("a", state, i - 1)], {f"m{i}": events[f"m{i}"]}, quality=quality)

    async def held() -> list[list[bytes]]:
        return [sorted(await store.client.hkeys(key(k))) for k in ("unproduced", "unproduced:older")]

    store = RedisStore.from_url(redis_url, prefix=prefix)
    await store.deployment_record({"format": "2"})  # as the release before records it
    assert await bind(store, "matches", [name]) == 2
    await store.commit(commit(1))
    await store.commit(commit(2))  # m1 not produced yet
    assert await held() == [[b"", b"m1", b"m2"], []]
    assert await store.client.hkeys(key("q:live")) == [b"matches"]

    assert [await raise_format(store, to) for to in (3, 3, 2)] == [2, 3, 3]  # never lowered
    assert await store.deployment_record() == {"format": "3"}
    await store.commit(commit(3))  # opened in format 2: it copies until restarted
    assert await held() == [[b"", b"m1", b"m2", b"m3"], []]
    restarted = RedisStore.from_url(redis_url, prefix=prefix)
    assert await bind(restarted, "matches", [name]) == 3
    await restarted.commit(commit(4))
    assert await held() == [[b"", b"m4"], [b"", b"m1", b"m2", b"m3"]]
    assert (await restarted.read(name, [], [], list(events))).applied == {
        m: events[m] for m in ("m1", "m2", "m3", "m4")
    }

    monkeypatch.setattr(deployment, "STORE_FORMAT", 2)  # a worker of the release before
    for opened in (store, restarted):
        with pytest.raises(StoreRefused, match="stored format 3, newer than format 2 "):
            await bind(opened, "matches", [name])
        await opened.close()


def test_bits_tell_apart_what_equality_does_not() -> None:
    """The helper above compares floats by their bits."""
    assert _bits({"a": PlayerState(-0.0, None)}) != _bits({"a": PlayerState(0.0, None)})
