"""The read API over HTTP: served by every worker's web server and, without a consumer, by
``stream-rater serve`` (so reads scale apart from rating). Documented in ``openapi.yaml``.

``POST /api/ladders/{ladder}/players``  ``{"players": [ids]}`` → states, ratings, ranks
``GET /api/ladders/{ladder}/leaderboard?top=N[&season=S]``  the top N (default 25, at most 500) with
                                        stored states and σ and rating as of now
``POST /api/ladders/{ladder}/predict``  ``{"teams": [[ids], [ids], ...]}`` → win and draw
                                        probabilities, match quality
``POST /api/ladders/{ladder}/balance``  ``{"players": [ids], "team_sizes": [n, ...]}`` → the
                                        fairest split
``GET /api/ladders/{ladder}/quality?last=N&scorer=live``  the ladder's live prediction quality,
                                        cumulative and over its last N matches (`processor.quality`)
``GET /api/ladders/{ladder}/matches/{match_id}``  why each player's rating moved in that match
                                        (`stream_rater.explain`); 404 for an unknown match

Errors are JSON ``{"error": "..."}``: 400 names the field, 404 the unknown ladder, 413 says the
player limit; never a traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from stream_rater.config.ladders import Ladder
from stream_rater.config.settings import Settings
from stream_rater.explain import explain_match
from stream_rater.processor import quality
from stream_rater.queries import LEADERBOARD_TOP, Queries, QueryError, ladder_of
from stream_rater.store import ReadStore

OPENAPI = Path(__file__).with_name("openapi.yaml")

Handler = Callable[[web.Request], Awaitable[web.Response]]


def query_routes(
    queries: Queries, clock: Callable[[], float] = time.time, history_limit: int = Settings.history_limit
) -> list[web.RouteDef]:
    """The read API's routes over `queries`; `clock` is "now" for time-aware reads;
    `history_limit` the events of a player's history a match is looked for in."""

    def answering(ask: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            try:
                body = json.loads(await request.read() or b"null")
            except ValueError:
                body = None
            if not isinstance(body, dict):
                return web.json_response({"error": "body: must be a JSON object"}, status=400)
            try:
                return web.json_response(await ask(request.match_info["ladder"], body))
            except QueryError as exc:
                return web.json_response({"error": str(exc)}, status=exc.status)

        return handle

    async def leaderboard(request: web.Request) -> web.Response:
        top = request.query.get("top", LEADERBOARD_TOP)
        season = request.query.get("season")
        try:
            return web.json_response(
                await queries.leaderboard(request.match_info["ladder"], top, clock(), season)
            )
        except QueryError as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)

    return [
        web.get("/api/ladders/{ladder}/leaderboard", leaderboard),
        *_judging_routes(queries, history_limit),
        web.post(
            "/api/ladders/{ladder}/players",
            answering(lambda ladder, b: queries.players(ladder, b.get("players"), clock())),
        ),
        web.post(
            "/api/ladders/{ladder}/predict",
            answering(
                lambda ladder, b: queries.predict(ladder, b.get("teams"), clock(), b.get("rankings", False))
            ),
        ),
        web.post(
            "/api/ladders/{ladder}/balance",
            answering(
                lambda ladder, b: queries.balance(ladder, b.get("players"), b.get("team_sizes"), clock())
            ),
        ),
        web.get("/api/openapi.yaml", _openapi),
    ]


def _judging_routes(queries: Queries, history_limit: int) -> list[web.RouteDef]:
    """The routes that judge ratings: a ladder's live prediction quality, a match explained."""
    store = queries.store
    return [
        web.get(
            "/api/ladders/{ladder}/quality",
            _of_ladder(queries, lambda ladder, r: quality_of(store, ladder.name, r.query)),
        ),
        web.get(
            "/api/ladders/{ladder}/matches/{match_id}",
            _of_ladder(
                queries,
                lambda ladder, r: explain_match(store, ladder, r.match_info["match_id"], history_limit),
            ),
        ),
    ]


def _of_ladder(queries: Queries, ask: Callable[[Ladder, web.Request], Awaitable[dict[str, Any]]]) -> Handler:
    """A GET handler answering `ask` of the request's configured ladder (404 if unknown; a
    `QueryError` answered with its status)."""

    async def handle(request: web.Request) -> web.Response:
        try:
            answer = await ask(ladder_of(queries.ladders, request.match_info["ladder"]), request)
        except QueryError as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)
        return web.json_response(answer)

    return handle


async def quality_of(store: ReadStore, ladder: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The answer of ``…/quality``: `offline.evaluate`'s figures of `ladder`'s scorer
    (``scorer``, default ``live``), cumulative and over the ``last`` N matches (1 to
    `quality.WINDOW`; absent: not asked), these also in consecutive stretches (``over_time``)."""
    scorer = query.get("scorer", quality.LIVE)
    raw = query.get("last")
    last = 0
    if raw is not None:
        try:
            last = int(raw)
        except ValueError:
            last = 0
        if not 1 <= last <= quality.WINDOW:
            raise QueryError(f"last: must be an integer from 1 to {quality.WINDOW}, got {raw!r}")
    sums, window = await store.quality(ladder, scorer, last)
    return {
        "ladder": ladder,
        "scorer": scorer,
        "cumulative": quality.summary(sums),
        "last": {**quality.summary({}, window), "over_time": quality.over_time(window)} if last else None,
    }


async def _openapi(request: web.Request) -> web.FileResponse:
    return web.FileResponse(OPENAPI)


def serve_app(
    queries: Queries, store: ReadStore, history_limit: int = Settings.history_limit
) -> web.Application:
    """The read-only server of ``stream-rater serve``: the read API plus health endpoints."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        if await store.ping():
            return web.json_response({"ready": True})
        return web.json_response({"ready": False, "reason": "the store does not answer PING"}, status=503)

    application = web.Application()
    routes = query_routes(queries, history_limit=history_limit)
    application.add_routes([*routes, web.get("/healthz", healthz), web.get("/readyz", readyz)])
    return application
