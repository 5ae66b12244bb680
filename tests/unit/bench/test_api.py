"""`bench api`'s load generator: every request offered is answered once, over its keep-alive
connections, with requests due while all are busy sent as connections free up."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from stream_rater.bench import api


async def test_every_request_offered_is_answered_once_and_timed_from_when_it_was_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.query["n"])
        await asyncio.sleep(0.002)  # busy long enough that requests wait for a connection
        return web.Response(body=b"{}", content_type="application/json")

    application = web.Application()
    application.router.add_get("/x", answer)
    monkeypatch.setattr(api, "CONNECTIONS", 2)
    async with TestServer(application) as server:
        host = f"{server.host}:{server.port}"
        requests = [api._raw(host, "", ("GET", f"/x?n={n}", None, {})) for n in range(50)]
        answered, latencies, errors, wall = await api._load(str(server.make_url("")), requests, 500.0, 0.1)
    assert (answered, errors) == (50, 0) and sorted(seen, key=int) == [str(n) for n in range(50)]
    assert latencies == sorted(latencies) and latencies[0] > 0.0 and wall >= 0.1
