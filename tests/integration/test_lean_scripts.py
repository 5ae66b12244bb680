"""The read and board scripts' lean calls (`store.redis.lean`) on a real Redis: a connection
Redis dropped, a partition mid-call (the socket timeout) and a flushed script cache cost one
failed call at most, never a wedged connection or a wrong answer."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis
from redis.exceptions import TimeoutError as RedisTimeout

from stream_rater.local.nemesis import TcpProxy
from stream_rater.store import BoardRow, Commit, PlayerState, StateWrite
from stream_rater.store.redis import RedisStore
from stream_rater.store.redis.lean import LeanScript
from stream_rater.store.values import RedisTimeouts


async def _seeded(store: RedisStore, ladder: str) -> None:
    """Two players on `ladder`'s leaderboard: ann (30) above bob (20)."""
    writes = [
        StateWrite(p, PlayerState(mu, 1.0, 1, 100.0, 1), 0, leaderboard_score=mu)
        for p, mu in (("ann", 30.0), ("bob", 20.0))
    ]
    await store.commit(Commit(ladder, writes, {"m1": []}))


async def _answers(store: RedisStore, ladder: str) -> tuple[set[str], list[BoardRow] | None]:
    """A state read (the read script) and the rows around bob (the board script)."""
    snapshot = await store.read(ladder, ["ann", "bob"], [], [])
    around = await store.board_around(ladder, "bob", 1, None)
    return set(snapshot.players), None if around is None else around.rows


async def test_a_connection_redis_dropped_between_calls_is_reopened(redis_url):
    """Connections the lean calls keep, killed by Redis (``CLIENT KILL``) between two calls, are
    found dropped and reopened: the next calls answer as before, without an error."""
    ladder = f"t-{uuid.uuid4().hex[:10]}"
    store = RedisStore.from_url(redis_url)
    admin = aioredis.Redis.from_url(redis_url)
    try:
        await _seeded(store, ladder)
        assert isinstance(store._read, LeanScript) and isinstance(store._board_script, LeanScript)
        before = await _answers(store, ladder)
        assert before == ({"ann", "bob"}, [BoardRow("ann", 30.0, 1), BoardRow("bob", 20.0, 2)])
        kept = [c for script in (store._read, store._board_script) for c in script._idle]
        assert kept
        for conn in kept:
            host, port = conn._writer.get_extra_info("sockname")[:2]
            assert await admin.execute_command("CLIENT KILL", "ADDR", f"{host}:{port}") in (b"OK", True, 1)
        await admin.script_flush()  # and the scripts are loaded again
        assert await _answers(store, ladder) == before
    finally:
        await admin.aclose()
        await store.close()


async def test_a_partition_mid_call_times_out_and_the_next_call_answers(redis_url):
    """A lean call whose reply does not come (the link cut by a proxy) ends at the socket
    timeout with redis-py's `TimeoutError`; once the link is back the next calls answer."""
    ladder = f"t-{uuid.uuid4().hex[:10]}"
    proxy = TcpProxy(urlsplit(redis_url).port or 6379)
    store = RedisStore.from_url(proxy.url, timeouts=RedisTimeouts(socket=0.3, connect=2.0, health_check=0))
    try:
        await _seeded(store, ladder)
        before = await _answers(store, ladder)
        proxy.cut()
        with pytest.raises(RedisTimeout):
            await store.board_around(ladder, "bob", 1, None)
        with pytest.raises(RedisTimeout):
            await store.read(ladder, ["ann"], [], [])
        proxy.heal()
        assert await _answers(store, ladder) == before
    finally:
        await store.close()
        proxy.close()
