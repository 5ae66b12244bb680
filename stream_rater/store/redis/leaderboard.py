"""The leaderboard reads of `RedisStore`: ranks (with the players' states: `lookup`), top,
around, totals, trims and the board's entries, each by the board script (``board.lua``) on a
ladder's live generation in one round trip (paged where a whole board would block Redis)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgpack
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from stream_rater.contracts.modes import split_board
from stream_rater.store.base import RatingTotals
from stream_rater.store.redis.keys import BOARD_KEYS, KeyLayout, bucket, grouped
from stream_rater.store.redis.lean import ScriptCall
from stream_rater.store.redis.mode_boards import BOARD_PARTS, board_suffixes
from stream_rater.store.redis.scripts import IDLE_READ_LIMIT, TOTALS_STEP, TRIM_STEP, script_args
from stream_rater.store.status import check_reply, text
from stream_rater.store.values import BoardAround, BoardBehind, BoardRanks, BoardRow, Lookup, PlayerState


class LeaderboardReads(KeyLayout):
    """The leaderboard methods of `RedisStore` (which sets these attributes)."""

    client: aioredis.Redis | RedisCluster
    _board_script: ScriptCall
    #: Ladder → its live generation as last seen.
    _live: dict[str, int]
    round_trips: int
    #: The ladder's live generation (read from Redis), and its ended seasons' ids.
    _live_generation: Callable[[str], Awaitable[int]]
    seasons: Callable[[str], Awaitable[list[str]]]

    async def board_ranks(self, ladder: str, player_ids: Sequence[str], since: float | None) -> BoardRanks:
        ids = list(player_ids)
        reply = await self._board(ladder, "lb", op="ranks", since=since, ids=ids)
        ranks = {p: int(r) for p, r in zip(ids, reply[2:]) if int(r) > 0}
        return BoardRanks(ranks, int(reply[1]))

    async def lookup(self, ladder: str, player_ids: Sequence[str], since: float | None = None) -> Lookup:
        ids = list(player_ids)
        reply = await self._board(ladder, "lb", op="lookup", since=since, ids=ids, players=ids)
        make = PlayerState.of
        states = {p: make(s) for p, s in zip(ids, msgpack.unpackb(reply[2], raw=False)) if s is not None}
        return Lookup(states, {p: int(r) - 1 for p, r in zip(ids, reply[3:]) if int(r) > 0}, int(reply[1]))

    async def board_top(
        self, ladder: str, top: int, since: float | None, season: int | None = None
    ) -> list[BoardRow]:
        board = "lb" if season is None else f"lb:season:{await self._season_id(ladder, season)}"
        reply = await self._board(ladder, board, op="top", since=None if season else since, top=top)
        return _rows(reply[2:])

    async def board_around(
        self, ladder: str, player_id: str, n: int, since: float | None
    ) -> BoardAround | None:
        return (await self.board_arounds(ladder, [player_id], n, since))[player_id]

    async def board_arounds(
        self, ladder: str, player_ids: Sequence[str], n: int, since: float | None
    ) -> dict[str, BoardAround | None]:
        ids = list(player_ids)
        reply = await self._board(ladder, "lb", op="around", since=since, ids=ids, n=n)
        total = int(reply[1])
        return {
            p: None if int(part[0]) < 0 else BoardAround(_rows(part[1:]), int(part[0]), total)
            for p, part in zip(ids, reply[2:])
        }

    async def rating_totals(self, ladder: str, since: float | None) -> RatingTotals:
        reply = await self._board(ladder, "lb", op="totals", since=since)
        if reply[2] == b"":  # a leaderboard written before the running sum was kept
            return await self.recount_totals(ladder, since)
        count, total = int(reply[1]), float(reply[2])
        return RatingTotals(count, total, count, total)

    async def recount_totals(self, ladder: str, since: float | None) -> RatingTotals:
        count, total, cursor = 0, 0.0, 0
        while cursor >= 0:
            step = await self._board(
                ladder, "lb", op="recount", since=since, cursor=cursor, budget=TOTALS_STEP
            )
            cursor, count, total = int(step[1]), count + int(step[2]), total + float(step[3])
        return RatingTotals(count, total, count, total)

    async def trim_board(self, ladder: str, since: float) -> int:
        trimmed, step = 0, TRIM_STEP
        while step == TRIM_STEP:
            step = int((await self._board(ladder, "lb", op="trim", since=since, budget=TRIM_STEP))[1])
            trimmed += step
        return trimmed

    async def board_entries(self, ladder: str, since: float | None) -> tuple[dict[str, float], float | None]:
        ladder, mode = split_board(ladder)
        gen = await self._live_generation(ladder)
        board, activity, meta = self.named_keys(ladder, gen, BOARD_PARTS, **board_suffixes(mode))
        rows: dict[str, float] = {}
        while True:  # in pages: a whole large leaderboard in one reply would block Redis
            page: list[Any] = await self.client.zrange(
                board, len(rows), len(rows) + TOTALS_STEP - 1, withscores=True
            )
            rows.update((text(member), float(score)) for member, score in page)
            if len(page) < TOTALS_STEP:
                break
        running = await self.client.hget(meta, "lb:sum")
        idle = 0.0
        if since is not None:
            active: set[str] = set()
            while True:
                ids: list[Any] = await self.client.zrangebyscore(
                    activity, since, "+inf", start=len(active), num=TOTALS_STEP
                )
                active.update(text(i) for i in ids)
                if len(ids) < TOTALS_STEP:
                    break
            idle = math.fsum(score for p, score in rows.items() if p not in active)
            rows = {p: score for p, score in rows.items() if p in active}
        return rows, None if running is None else float(running) - idle

    async def _season_id(self, ladder: str, season: int) -> str:
        """The id of the season-start record that ended `season` (1-based); KeyError if none."""
        ended = await self.seasons(ladder)
        if not 1 <= season <= len(ended):
            raise KeyError(season)
        return ended[season - 1]

    async def _board(self, ladder: str, board: str, players: Sequence[str] = (), **fields: Any) -> list[Any]:
        """The board script's reply (see ``board.lua``) on the live generation's `board` (a key
        suffix), in one round trip: the script checks the cached live generation and says which
        one is live when another is (then the call is made again). `BoardBehind` for a read
        with too many idle players left to skip. `ladder` may be a board name ``<ladder>@<mode>``:
        that mode's board (`store.redis.mode_boards`). The players buckets of `players` (whose
        states it reads) follow the board's keys, each player's index among them in ``bucket``."""
        name = ladder
        buckets, index = grouped(players, bucket)
        if players:
            fields["bucket"] = index
        while True:
            ladder, mode = split_board(name)
            gen = self._live.get(ladder, 0)
            keys = self.named_keys(ladder, gen, BOARD_KEYS, **board_suffixes(mode, board))
            keys += self.bucket_keys(ladder, gen, "players", buckets)
            arg = script_args(limit=IDLE_READ_LIMIT, generation=gen, mode="live", **fields)
            reply: list[Any] = await self._board_script(keys=keys, args=[arg])
            self.round_trips += 1
            status = text(reply[0])
            if status == "generation":
                self._live[ladder] = int(reply[1])
                continue
            if status == "behind":
                raise BoardBehind(ladder, int(reply[1]))
            if status != "ok":
                check_reply(ladder, reply)
            return reply


def _rows(flat: Sequence[Any]) -> list[BoardRow]:
    """The board script's rows ``id, score, rank, …`` as `BoardRow`s."""
    return list(map(BoardRow, map(text, flat[0::3]), map(float, flat[1::3]), map(int, flat[2::3])))
