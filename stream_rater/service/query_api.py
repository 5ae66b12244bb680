"""The read API over HTTP: served by every worker's web server and, without a consumer, by
``stream-rater serve`` (so reads scale apart from rating). Documented in ``openapi.yaml``.

``POST /api/ladders/{ladder}/players``  ``{"players": [ids]}`` → states, ratings, ranks
``GET /api/ladders/{ladder}/leaderboard?top=N[&season=S]``  the top N (default 25, at most 500) with
                                        stored states and σ and rating as of now
``GET /api/ladders/{ladder}/leaderboard?around=P[&n=N]``  the rows from N (default 5) above player
                                        P to N below; 404 unknown player, 409 not ranked (why)
``POST /api/ladders/{ladder}/predict``  ``{"teams": [[ids], [ids], ...], "parties"?: [[ids]]}``
                                        → win and draw probabilities, match quality
``POST /api/ladders/{ladder}/balance``  ``{"players": [ids], "team_sizes": [n, ...], "parties"?:
                                        [[ids]]}`` → the fairest split, parties kept together
``GET /api/ladders``                    the configured ladders, models and parameters
``GET /api/ladders/{ladder}/players/{player}?limit=N&before=C``  a player's state and rating
                                        changes, newest first, and how far back they reach (from
                                        the archive, page by page, when one is configured)
``GET /api/ladders/{ladder}/quality?last=N&scorer=live``  the ladder's live prediction quality,
                                        cumulative and over its last N matches (`processor.quality`)
``GET /api/ladders/{ladder}/matches/{match_id}``  why each player's rating moved in that match
                                        (`stream_rater.explain`; from the archive once the marker expired); 404 for an unknown match
``GET /api/docs``                       this API's interactive docs (Swagger UI, packaged: `api_docs`)

A leaderboard answer carries an ``ETag``; sent back in ``If-None-Match`` it gets 304 while the
answer is the same (`BoardCache`, which also keeps the answers of ladders whose answer moves
only with their commits, per ladder version). Answers are JSON by orjson.

Errors are JSON ``{"error": "..."}``: 400 names the field, 404 the unknown ladder (or player), 409
a player the ladder does not rank, 413 says the player limit; never a traceback.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from stream_rater.config.ladders import Ladder
from stream_rater.explain import explain_match
from stream_rater.processor import quality
from stream_rater.processor.modes import mode_scorer
from stream_rater.queries import AROUND_N, LEADERBOARD_TOP, Queries, QueryError, ladder_of, n_of, whole_number
from stream_rater.service.api_docs import docs_routes
from stream_rater.service.mode_reads import mode_queries, queries_mode
from stream_rater.store import BoardAround, BoardBehind, BoardRanks, Lookup, ReadStore, Snapshot
from stream_rater.store.base import Generations

OPENAPI = Path(__file__).with_name("openapi.yaml")
#: Leaderboard answers `BoardCache` keeps (the most recently asked).
BOARD_CACHE_SIZE = 256

Handler = Callable[[web.Request], Awaitable[web.Response]]


def query_routes(queries: Queries, clock: Callable[[], float] = time.time) -> list[web.RouteDef]:
    """The read API's routes over `queries` (their store reads batched across concurrent
    requests: `BatchedReads`); `clock` is "now" for time-aware reads."""
    queries = copy.copy(queries)
    queries.store = BatchedReads(queries.store)

    def answering(ask: Callable[[Queries, str, dict[str, Any]], Awaitable[dict[str, Any]]]) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            try:
                body = orjson.loads(await request.read() or b"null")
            except orjson.JSONDecodeError as exc:
                return _json({"error": f"body: invalid JSON: {exc}"}, 400)
            except web.HTTPRequestEntityTooLarge as exc:
                return _json({"error": f"body: {exc.text}"}, 413)
            if not isinstance(body, dict):
                return _json({"error": "body: must be a JSON object"}, 400)
            ladder = request.match_info["ladder"]
            return await _reply(_in_mode(queries, request, lambda q: ask(q, ladder, body)))

        return handle

    async def ladder_list(request: web.Request) -> web.Response:
        return _json(queries.ladder_list())

    async def history(request: web.Request) -> web.Response:
        ladder, player, query = request.match_info["ladder"], request.match_info["player"], request.query
        limit, before = query.get("limit"), query.get("before")
        return await _reply(_in_mode(queries, request, lambda q: q.history(ladder, player, limit, before)))

    return [
        web.get("/api/ladders", ladder_list),
        web.get("/api/ladders/{ladder}/players/{player}", history),
        web.get("/api/ladders/{ladder}/leaderboard", _leaderboard(BoardCache(queries), clock)),
        *_judging_routes(queries),
        web.post(
            "/api/ladders/{ladder}/players",
            answering(lambda q, ladder, b: q.players(ladder, b.get("players"), clock())),
        ),
        web.post(
            "/api/ladders/{ladder}/predict",
            answering(
                lambda q, ladder, b: q.predict(
                    ladder, b.get("teams"), clock(), b.get("rankings", False), b.get("parties")
                )
            ),
        ),
        web.post(
            "/api/ladders/{ladder}/balance",
            answering(
                lambda q, ladder, b: q.balance(
                    ladder, b.get("players"), b.get("team_sizes"), clock(), b.get("parties")
                )
            ),
        ),
        web.get("/api/openapi.yaml", _openapi),
        *docs_routes(),
    ]


async def _in_mode(
    queries: Queries, request: web.Request, ask: Callable[[Queries], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """`ask` of `queries` in the request's ``?mode=`` (`mode_reads`; issue 48)."""
    return await ask(mode_queries(queries, request.match_info["ladder"], request.query))


def _leaderboard(boards: BoardCache, clock: Callable[[], float]) -> Handler:
    """``…/leaderboard``: the answer with its ETag, or 304 when ``If-None-Match`` names it."""

    async def handle(request: web.Request) -> web.Response:
        try:
            ladder = request.match_info["ladder"]
            asked = mode_queries(boards.queries, ladder, request.query)
            body, etag = await boards.answer(ladder, request.query, clock(), asked)
        except (QueryError, BoardBehind) as exc:
            return _refused(exc)
        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if _matches(request.headers.get("If-None-Match"), etag):
            return web.Response(status=304, headers=headers)
        return web.Response(body=body, content_type="application/json", headers=headers)

    return handle


def _judging_routes(queries: Queries) -> list[web.RouteDef]:
    """The routes that judge ratings: a ladder's live prediction quality, a match explained."""
    return [
        web.get(
            "/api/ladders/{ladder}/quality",
            _of_ladder(
                queries, lambda q, ladder, r: quality_of(q.store, ladder, r.query), default_mode=False
            ),
        ),
        web.get(
            "/api/ladders/{ladder}/matches/{match_id}",
            _of_ladder(
                queries,
                lambda q, ladder, r: explain_match(
                    q.store, ladder, r.match_info["match_id"], q.history_limit, q.archive
                ),
            ),
        ),
    ]


def _of_ladder(
    queries: Queries,
    ask: Callable[[Queries, Ladder, web.Request], Awaitable[dict[str, Any]]],
    default_mode: bool = True,
) -> Handler:
    """A GET handler answering `ask` of the request's configured ladder (404 if unknown; a
    `QueryError` answered with its status), in the request's mode (`mode_reads`; without
    `default_mode` a moded ladder's read naming no mode is of the whole ladder)."""

    async def handle(request: web.Request) -> web.Response:
        try:
            name = request.match_info["ladder"]
            asked = mode_queries(queries, name, request.query, default=default_mode)
            ladder = ladder_of(asked.ladders, name)
        except QueryError as exc:
            return _json({"error": str(exc)}, exc.status)
        return await _reply(ask(asked, ladder, request))

    return handle


async def _board(queries: Queries, ladder: str, query: Mapping[str, str], now: float) -> dict[str, Any]:
    """``…/leaderboard``: the top (``top``, an ended ``season``), or the rows around a player
    (``around``, ``n``); ``n`` is checked even without ``around``, which it serves."""
    n = n_of(query.get("n", AROUND_N))
    if "around" not in query:
        return await queries.leaderboard(ladder, query.get("top", LEADERBOARD_TOP), now, query.get("season"))
    if "season" in query or "top" in query:
        raise QueryError("around: not with top or season")
    return await queries.around(ladder, query["around"], n, now)


class BatchedReads:
    """A `ReadStore` that sends the player lookups (`ReadStore.lookup`, per activity cut-off), state reads
    (`ReadStore.read` of players only), generations (`ReadStore.generations`: a cached
    leaderboard answer's version), leaderboard ranks (`ReadStore.board_ranks`, per
    activity cut-off) and rows around players (`ReadStore.board_arounds`, per n and cut-off)
    that requests ask of one ladder in the same turn of the event loop to
    the store as one call: under load, many concurrent lookups cost the
    store client one pipeline, not one each (its per-call overhead, not Redis, bounds a
    read server). Each caller gets what it asked (its players only) of that one answer: a
    caller alone in its batch the answer as it is. Every other call goes to the store as it is.

    A batch costs one task (the store's call) and each caller a future of its own, which its
    cancellation cancels without touching the others'."""

    def __init__(self, store: ReadStore) -> None:
        self.store = store
        self._pending: dict[tuple[str, str, Any], tuple[dict[str, None], list[asyncio.Future[Any]]]] = {}
        self._sending: set[asyncio.Future[Any]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def lookup(self, ladder: str, player_ids: Sequence[str], since: float | None = None) -> Lookup:
        found: Lookup
        found, alone = await self._batched("lookup", ladder, player_ids, since)
        if alone:
            return found
        return Lookup(_of(found.players, player_ids), _of(found.places, player_ids), found.ranked)

    async def board_ranks(self, ladder: str, player_ids: Sequence[str], since: float | None) -> BoardRanks:
        found: BoardRanks
        found, alone = await self._batched("ranks", ladder, player_ids, since)
        return found if alone else BoardRanks(_of(found.ranks, player_ids), found.total)

    async def board_around(
        self, ladder: str, player_id: str, n: int, since: float | None
    ) -> BoardAround | None:
        found: dict[str, BoardAround | None] = (
            await self._batched("around", ladder, [player_id], (n, since))
        )[0]
        return found[player_id]

    async def generations(self, ladder: str) -> Generations:
        found: Generations = (await self._batched("generations", ladder, ()))[0]
        return found

    async def read(
        self,
        ladder: str,
        player_ids: Iterable[str],
        effect_ids: Iterable[str],
        match_ids: Iterable[str],
        generation: int | None = None,
    ) -> Snapshot:
        effects, matches = list(effect_ids), list(match_ids)
        if effects or matches or generation is not None:
            return await self.store.read(ladder, player_ids, effects, matches, generation)
        ids = list(player_ids)
        found: Snapshot
        found, alone = await self._batched("read", ladder, ids)
        return found if alone else dataclasses.replace(found, players=_of(found.players, ids))

    async def _batched(
        self, kind: str, ladder: str, ids: Iterable[str], extra: Any = None
    ) -> tuple[Any, bool]:
        """The answer of the store's `kind` call for the ids every caller of this turn asked
        (with the same `extra` arguments), and whether this caller asked alone (the answer is
        then all its own). The turn's first caller makes the call, once the turn is over; the
        others wait on a future each. A first caller cancelled meanwhile leaves the call to a
        task (`_send`), so that the others are answered all the same."""
        key = (kind, ladder, extra)
        batch = self._pending.get(key)
        if batch is not None:
            batch[0].update(dict.fromkeys(ids))
            waiter = asyncio.get_running_loop().create_future()
            batch[1].append(waiter)
            return await waiter, False
        asked, waiters = batch = self._pending[key] = (dict.fromkeys(ids), [])
        try:
            await asyncio.sleep(0)  # the other callers of this turn join
            del self._pending[key]
            answer = await self._call(kind, ladder, list(asked), extra)
        except asyncio.CancelledError:
            if self._pending.get(key) is batch:
                del self._pending[key]
            if waiters:
                self._send(kind, ladder, list(asked), extra, waiters)
            raise
        except Exception as failed:
            _settle(waiters, failed=failed)
            raise
        _settle(waiters, answer)
        return answer, not waiters

    def _call(self, kind: str, ladder: str, ids: list[str], extra: Any) -> Awaitable[Any]:
        """The store's call of `kind` for `ids` (see `_batched`)."""
        if kind == "lookup":
            return self.store.lookup(ladder, ids, extra)
        if kind == "ranks":
            return self.store.board_ranks(ladder, ids, extra)
        if kind == "around":
            return self.store.board_arounds(ladder, ids, *extra)
        if kind == "generations":
            return self.store.generations(ladder)
        return self.store.read(ladder, ids, [], [])

    def _send(
        self, kind: str, ladder: str, ids: list[str], extra: Any, waiters: list[asyncio.Future[Any]]
    ) -> None:
        """The store's call of `kind` for `ids` by a task, answering `waiters`."""

        def settle(done: asyncio.Task[Any]) -> None:
            self._sending.discard(done)
            if done.cancelled():
                for waiter in waiters:
                    waiter.cancel()
            else:
                _settle(waiters, None if done.exception() else done.result(), done.exception())

        task = asyncio.ensure_future(self._call(kind, ladder, ids, extra))
        self._sending.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(settle)


def _settle(
    waiters: Sequence[asyncio.Future[Any]], answer: Any = None, failed: BaseException | None = None
) -> None:
    """Give each waiter whose caller still waits `answer`, or `failed`."""
    for waiter in waiters:
        if waiter.done():  # its caller was cancelled
            continue
        if failed is not None:
            waiter.set_exception(failed)
        else:
            waiter.set_result(answer)


def _of(found: Mapping[str, Any], ids: Iterable[str]) -> dict[str, Any]:
    """The entries of `found` of `ids` (a caller's part of a batched answer)."""
    return {p: found[p] for p in ids if p in found}


class BoardCache:
    """Leaderboard answers (``…/leaderboard``) as JSON bytes and their ETag. The top (of the
    live board or an ended season: few distinct reads, asked again and again) is kept per
    ladder version (`Queries.board_version`: generation, matches applied, re-rate lock) on
    the ladders whose answer depends on nothing else: a read first asks the version and
    answers from the cache when it has not moved. An answer around a player (one per player:
    seldom asked twice) and a ladder whose answer depends on the clock (time-aware σ, an
    activity rule) are computed each time, their ETag the hash of the answer. Either way a
    client that sends the ETag back in ``If-None-Match`` gets 304 while the answer is the
    same."""

    def __init__(self, queries: Queries, size: int = BOARD_CACHE_SIZE) -> None:
        self.queries = queries
        self.size = size
        self._answers: OrderedDict[tuple[str, ...], tuple[Any, bytes, str]] = OrderedDict()

    async def answer(
        self, ladder: str, query: Mapping[str, str], now: float, queries: Queries | None = None
    ) -> tuple[bytes, str]:
        """The JSON answer of the leaderboard `query` and its ETag, asked of `queries` (a
        mode's, `mode_reads`; default this cache's); `QueryError` as `_board`."""
        queries = self.queries if queries is None else queries
        mode = f"mode={queries_mode(queries)}"
        key = (ladder, *sorted(f"{k}={v}" for k, v in query.items() if k != "mode"), mode)
        version = None if "around" in query else await queries.board_version(ladder, "season" in query)
        cached = self._answers.get(key)
        if version is not None and cached is not None and cached[0] == version:
            self._answers.move_to_end(key)
            return cached[1], cached[2]
        body = _dumps(await _board(queries, ladder, query, now))
        etag = f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
        if version is not None:
            self._answers[key] = (version, body, etag)
            self._answers.move_to_end(key)
            while len(self._answers) > self.size:
                self._answers.popitem(last=False)
        return body, etag


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names `etag` (weak or strong) or is ``*``."""
    if not if_none_match:
        return False
    tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return etag in tags or "*" in tags


def _dumps(data: Any) -> bytes:
    """JSON bytes by orjson (NaN as null; numpy numbers as numbers)."""
    return orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(data), status=status, content_type="application/json")


async def _reply(answer: Awaitable[dict[str, Any]]) -> web.Response:
    """The answer as JSON, or a refusal (`_refused`)."""
    try:
        return _json(await answer)
    except (QueryError, BoardBehind) as exc:
        return _refused(exc)


#: Seconds a client waits before asking again a leaderboard read refused as behind its trim.
BOARD_BEHIND_RETRY = 5


def _refused(exc: QueryError | BoardBehind) -> web.Response:
    """A refusal as ``{"error": ...}``: a query error with its status; a leaderboard behind its
    trim with 503 and ``Retry-After``, as it passes once a commit or the worker's trim catches up."""
    if isinstance(exc, BoardBehind):
        response = _json({"error": str(exc)}, 503)
        response.headers["Retry-After"] = str(BOARD_BEHIND_RETRY)
        return response
    return _json({"error": str(exc)}, exc.status)


async def quality_of(store: ReadStore, ladder: Ladder, query: Mapping[str, str]) -> dict[str, Any]:
    """The answer of ``…/quality``: `offline.evaluate`'s figures of `ladder`'s scorer
    (``scorer``, default ``live``), cumulative and over the ``last`` N matches (1 to
    `quality.WINDOW`; absent: not asked), these also in consecutive stretches (``over_time``);
    and the same of each of its shadow models (``shadows``, by name), scored in their own keys."""
    mode = query.get("mode")
    scorer = query.get("scorer", quality.LIVE if mode is None else mode_scorer(mode))
    raw = query.get("last")
    last = 0
    if raw is not None:
        last = whole_number(raw)
        if not 1 <= last <= quality.WINDOW:
            raise QueryError(f"last: must be an integer from 1 to {quality.WINDOW}, got {raw!r}")
    answer = {"ladder": ladder.name, "scorer": scorer, **await _figures(store, ladder.name, scorer, last)}
    shadows = {
        s.name.split("~", 1)[1]: await _figures(store, s.name, quality.LIVE, last) for s in ladder.shadows
    }
    return {**answer, "shadows": shadows}


async def _figures(store: ReadStore, ladder: str, scorer: str, last: int) -> dict[str, Any]:
    """A scorer's cumulative figures and, if `last`, those of its last matches."""
    sums, window = await store.quality(ladder, scorer, last)
    return {
        "cumulative": quality.summary(sums),
        "last": {**quality.summary({}, window), "over_time": quality.over_time(window)} if last else None,
    }


async def _openapi(request: web.Request) -> web.Response:
    return web.Response(text=OPENAPI.read_text(), content_type="application/yaml")


def serving_loop() -> asyncio.AbstractEventLoop:
    """The event loop ``stream-rater serve`` answers on: uvloop's (libuv; its transports and
    scheduling in C cost the read API less per answer than asyncio's, `bench api`), asyncio's
    where uvloop is not installed (Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def serve_app(queries: Queries, store: ReadStore) -> web.Application:
    """The read-only server of ``stream-rater serve``: the read API plus health endpoints."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        if await store.ping():
            return web.json_response({"ready": True})
        return web.json_response({"ready": False, "reason": "the store does not answer PING"}, status=503)

    application = web.Application()
    routes = query_routes(queries)
    application.add_routes([*routes, web.get("/healthz", healthz), web.get("/readyz", readyz)])
    return application
