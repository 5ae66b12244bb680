"""The read API's ``?mode=`` on a ladder with modes (issue 48), on a memory store: every read
answers from the mode's states, board, model and quality; a bad mode name is a 400, a mode the
ladder does not have a 404, a moded ladder read without a mode (and no default) a 400."""

from __future__ import annotations

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from stream_rater.config.ladders import Ladders
from stream_rater.processor import Processor
from stream_rater.queries import Queries
from stream_rater.service.query_api import OPENAPI, serve_app
from stream_rater.store.memory import MemoryStore
from tests.unit.moding import arena, moded
from tests.unit.processing import fixed_clock

LADDERS = Ladders([arena()])


@pytest.fixture
async def client() -> TestClient:
    store = MemoryStore()
    matches = [moded(f"d{i}", "duel", ["ann"], ["bob"], at=1_000_000.0 + i) for i in range(3)]
    matches += [moded("f1", "ffa", ["bob"], ["cat"], ["ann"], at=1_000_010.0)]
    await Processor(LADDERS, store, clock=fixed_clock).process(matches)
    client = TestClient(TestServer(serve_app(Queries(store, LADDERS), store)))
    await client.start_server()
    yield client
    await client.close()


async def get(client: TestClient, path: str) -> tuple[int, dict]:
    response = await client.get(path)
    return response.status, await response.json()


async def test_each_read_answers_of_the_mode_asked(client):
    status, duel = await get(client, "/api/ladders/arena/leaderboard?mode=duel")
    assert status == 200 and [r["player_id"] for r in duel["rows"]] == ["ann", "bob"]
    _, ffa = await get(client, "/api/ladders/arena/leaderboard?mode=ffa")
    assert [r["player_id"] for r in ffa["rows"]] == ["bob", "cat", "ann"]
    _, around = await get(client, "/api/ladders/arena/leaderboard?mode=ffa&around=cat&n=1")
    assert around["rank"] == 2
    response = await client.post("/api/ladders/arena/players?mode=duel", json={"players": ["ann", "cat"]})
    players = (await response.json())["players"]
    assert players[0]["games"] == 3 and players[0]["rank"] == 1 and players[1]["new"] is True
    _, history = await get(client, "/api/ladders/arena/players/ann?mode=ffa")
    assert [e["mode"] for e in history["history"]] == ["ffa"] and history["state"]["games"] == 1
    response = await client.post("/api/ladders/arena/predict?mode=duel", json={"teams": [["ann"], ["bob"]]})
    assert response.status == 200 and (await response.json())["teams"][0]["win_probability"] > 0.5
    draws = {}
    for mode in ("duel", "team"):  # two new players: each mode's own draw probability
        response = await client.post(
            f"/api/ladders/arena/predict?mode={mode}", json={"teams": [["x"], ["y"]]}
        )
        draws[mode] = (await response.json())["draw_probability"]
    assert draws["team"] > 3 * draws["duel"] > 0  # draw_probability 0.1 against 0.02
    response = await client.post(
        "/api/ladders/arena/balance?mode=ffa", json={"players": ["ann", "bob"], "team_sizes": [1, 1]}
    )
    assert response.status == 200
    status, explained = await get(client, "/api/ladders/arena/matches/f1?mode=ffa")
    assert status == 200 and [p["player_id"] for p in explained["players"]] == ["bob", "cat", "ann"]
    _, quality = await get(client, "/api/ladders/arena/quality?mode=duel")
    assert quality["scorer"] == "live@duel" and quality["cumulative"]["matches"] == 3
    _, whole = await get(client, "/api/ladders/arena/quality")
    assert whole["scorer"] == "live" and whole["cumulative"]["matches"] == 4


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/api/ladders/arena/leaderboard?mode=Duel", 400, "mode: must be a plain word"),
        ("/api/ladders/arena/leaderboard?mode=ctf", 404, "mode: ladder 'arena' has no mode 'ctf'"),
        ("/api/ladders/default/leaderboard?mode=duel", 404, "mode: ladder 'default' has no modes"),
        ("/api/ladders/arena/leaderboard", 400, "mode: ladder 'arena' has modes (duel, ffa, team)"),
        ("/api/ladders/arena/players/ann?mode=x!", 400, "mode: must be a plain word"),
        ("/api/ladders/arena/quality?mode=ctf", 404, "mode: ladder 'arena' has no mode 'ctf'"),
    ],
)
async def test_bad_modes_get_their_status(client, path, status, says):
    got, body = await get(client, path)
    assert got == status and body["error"].startswith(says)


async def test_a_bad_mode_on_a_post_is_refused_too(client):
    response = await client.post("/api/ladders/arena/predict?mode=ctf", json={"teams": [["ann"], ["bob"]]})
    assert response.status == 404


def test_the_openapi_contract_gives_every_per_mode_read_its_mode():
    paths = yaml.safe_load(OPENAPI.read_text())["paths"]
    moded = {
        ("/api/ladders/{ladder}/players", "post"),
        ("/api/ladders/{ladder}/leaderboard", "get"),
        ("/api/ladders/{ladder}/predict", "post"),
        ("/api/ladders/{ladder}/balance", "post"),
        ("/api/ladders/{ladder}/players/{player}", "get"),
        ("/api/ladders/{ladder}/matches/{match_id}", "get"),
        ("/api/ladders/{ladder}/quality", "get"),
    }
    for path, method in moded:
        names = {p.get("name") or p["$ref"].rsplit("/", 1)[1] for p in paths[path][method]["parameters"]}
        assert "mode" in names, path
