"""The read API over HTTP: served by every worker's web server and, without a consumer, by
``stream-rater serve`` (so reads scale apart from rating). Documented in ``openapi.yaml``.

``POST /api/ladders/{ladder}/players``  ``{"players": [ids]}`` → states, ratings, ranks
``GET /api/ladders/{ladder}/leaderboard?top=N[&season=S]``  the top N (default 25, at most 500) with
                                        stored states and σ and rating as of now
``GET /api/ladders/{ladder}/leaderboard?around=P[&n=N]``  the rows from N (default 5) above player
                                        P to N below; 404 unknown player, 409 not ranked (why)
``POST /api/ladders/{ladder}/predict``  ``{"teams": [[ids], [ids], ...]}`` → win and draw
                                        probabilities, match quality
``POST /api/ladders/{ladder}/balance``  ``{"players": [ids], "team_sizes": [n, ...]}`` → the
                                        fairest split

Errors are JSON ``{"error": "..."}``: 400 names the field, 404 the unknown ladder (or player), 409
a player the ladder does not rank, 413 says the player limit; never a traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from stream_rater.queries import AROUND_N, LEADERBOARD_TOP, Queries, QueryError, n_of
from stream_rater.store import ReadStore

OPENAPI = Path(__file__).with_name("openapi.yaml")

Handler = Callable[[web.Request], Awaitable[web.Response]]


def query_routes(queries: Queries, clock: Callable[[], float] = time.time) -> list[web.RouteDef]:
    """The read API's routes over `queries`; `clock` is "now" for time-aware reads."""

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
        ladder, query = request.match_info["ladder"], request.query
        try:
            n = n_of(query.get("n", AROUND_N))  # checked even without around, which it serves
            if "around" in query:
                if "season" in query or "top" in query:
                    raise QueryError("around: not with top or season")
                answer = await queries.around(ladder, query["around"], n, clock())
            else:
                answer = await queries.leaderboard(
                    ladder, query.get("top", LEADERBOARD_TOP), clock(), query.get("season")
                )
            return web.json_response(answer)
        except QueryError as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)

    return [
        web.get("/api/ladders/{ladder}/leaderboard", leaderboard),
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


async def _openapi(request: web.Request) -> web.FileResponse:
    return web.FileResponse(OPENAPI)


def serve_app(queries: Queries, store: ReadStore) -> web.Application:
    """The read-only server of ``stream-rater serve``: the read API plus health endpoints."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        if await store.ping():
            return web.json_response({"ready": True})
        return web.json_response({"ready": False, "reason": "the store does not answer PING"}, status=503)

    application = web.Application()
    application.add_routes([*query_routes(queries), web.get("/healthz", healthz), web.get("/readyz", readyz)])
    return application
