"""The read API over HTTP on a memory store: lookups, the leaderboard, predictions and balanced
teams answered from live states (time-aware), and every kind of bad request answered with its status and the
field — never a traceback."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from functools import partial

import pytest
import uvloop
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from scipy.stats import norm

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.processor import Processor
from stream_rater.queries import Queries, TooManyPlayers
from stream_rater.rating.base import Rating
from stream_rater.rating.predict import predict
from stream_rater.service.query_api import (
    OPENAPI,
    BatchedReads,
    query_routes,
    serve_app,
    serving_loop,
)
from stream_rater.store.memory import MemoryStore
from stream_rater.store.values import BoardBehind, Generations
from tests.helpers import parsed_duel
from tests.unit.shadowing import SHADOWED, alone, duels

DAY = 86400.0
LADDERS = Ladders(
    [Ladder("default", "trueskill"), Ladder("timed", "trueskill", {"time_tau": 1.0}), Ladder("elo", "elo")]
)
NOW = 1_700_000_000.0 + 10 * DAY


#: A valid 1-vs-1 match on `LADDERS`: the first player wins.
duel = partial(parsed_duel, LADDERS)


@pytest.fixture
async def client() -> TestClient:
    store = MemoryStore()
    await Processor(LADDERS, store).process(
        [
            duel("m1", "ann", "bob"),
            duel("m2", "ann", "cat"),
            duel("t1", "ann", "bob", ladder="timed"),
            duel("e1", "ann", "bob", ladder="elo"),
        ]
    )
    queries = Queries(store, LADDERS, max_players=6)
    application = serve_app(queries, store)
    client = TestClient(TestServer(application))
    await client.start_server()
    yield client
    await client.close()


async def post(client: TestClient, path: str, body: object) -> tuple[int, dict]:
    """POST `body` as JSON, or as it is if bytes (a malformed body)."""
    response = await (
        client.post(path, data=body) if isinstance(body, bytes) else client.post(path, json=body)
    )
    return response.status, await response.json()


async def test_players_are_looked_up_with_rank_percentile_and_new_flag(client):
    """Known players get their state, rank and percentile; an unknown one the prior, flagged new."""
    status, body = await post(client, "/api/ladders/default/players", {"players": ["bob", "ann", "zed"]})
    assert status == 200
    bob, ann, zed = body["players"]
    assert (ann["rank"], ann["percentile"], ann["games"], ann["new"]) == (1, 100.0, 2, False)
    assert bob["rank"] in (2, 3) and bob["games"] == 1
    assert (zed["new"], zed["mu"], zed["sigma"], zed["rank"]) == (True, 25.0, 25 / 3, None)


async def test_a_time_scaled_ladder_reads_sigma_as_of_now_without_writing_it():
    """σ² grows by γ²·Δt (γ = 1 per day) since the last match at read time; the stored state
    is unchanged by the read."""
    store = MemoryStore()
    await Processor(LADDERS, store).process([duel("t1", "ann", "bob", ladder="timed")])
    stored = (await store.players("timed"))["ann"]
    queries = Queries(store, LADDERS)
    later = (await queries.players("timed", ["ann"], stored.last_played + 3 * DAY))["players"][0]
    assert later["sigma"] == pytest.approx(math.sqrt(stored.sigma**2 + 3.0))
    assert (await queries.players("timed", ["ann"], stored.last_played))["players"][0][
        "sigma"
    ] == stored.sigma
    assert (await store.players("timed"))["ann"] == stored


async def test_predict_two_players_equals_the_closed_form_and_sums_to_one(client):
    """Win, loss and draw probabilities from the stored states equal the TrueSkill closed form."""
    status, body = await post(client, "/api/ladders/elo/predict", {"teams": [["ann"], ["bob"]]})
    assert status == 200 and body["draw_probability"] == 0.0
    status, body = await post(client, "/api/ladders/default/predict", {"teams": [["ann"], ["zed"]]})
    assert status == 200
    _, looked = await post(client, "/api/ladders/default/players", {"players": ["ann", "zed"]})
    ann, zed = looked["players"]
    model = LADDERS.get("default").rating_model
    c = math.sqrt(ann["sigma"] ** 2 + zed["sigma"] ** 2 + 2 * (model.tau**2 + model.beta**2))
    eps = norm.ppf((model.draw_probability + 1) / 2) * model.beta * math.sqrt(2)
    delta = ann["mu"] - zed["mu"]
    wins = [t["win_probability"] for t in body["teams"]]
    assert wins == pytest.approx([norm.cdf((delta - eps) / c), norm.cdf((-delta - eps) / c)], abs=1e-12)
    assert sum(wins) + body["draw_probability"] == pytest.approx(1.0)
    assert body["teams"][1]["new"] == ["zed"] and 0 < body["quality"] <= 1


async def test_balance_splits_the_pool_into_the_sizes_asked(client):
    """Four players into 2 v 2: every player once, the quality and the search reported."""
    status, body = await post(
        client,
        "/api/ladders/default/balance",
        {"players": ["ann", "bob", "cat", "zed"], "team_sizes": [2, 2]},
    )
    assert status == 200 and body["exhaustive"] is True
    assert sorted(p for team in body["teams"] for p in team) == ["ann", "bob", "cat", "zed"]
    assert {"ann", "zed"} not in [set(team) for team in body["teams"]] or body["quality"] > 0


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        ("/api/ladders/nosuch/predict", {"teams": [["a"], ["b"]]}, 404, "unknown ladder 'nosuch'"),
        (
            "/api/ladders/default/predict",
            {"teams": [["a"]]},
            400,
            "teams: must be an array of at least two teams",
        ),
        (
            "/api/ladders/default/predict",
            {"teams": [["a"], [7]]},
            400,
            "teams[1][0]: must be a non-empty string",
        ),
        (
            "/api/ladders/default/predict",
            {"teams": [["a", "b", "c"], ["d", "e", "f", "g"]]},
            413,
            "at most 6",
        ),
        (
            "/api/ladders/default/predict",
            {"teams": [["a", "b"], ["c"], ["d", "b"]]},
            400,
            "teams[2]: player 'b' is on two teams (also teams[0])",
        ),
        ("/api/ladders/default/predict", {"teams": [["a", "a"], ["b"]]}, 400, "teams[0]: names 'a' twice"),
        ("/api/ladders/default/players", [1, 2], 400, "body: must be a JSON object"),
        ("/api/ladders/default/players", b'{"players": ["a",]}', 400, "body: invalid JSON: "),
        (
            "/api/ladders/default/balance",
            {"players": ["a", "b", "c"], "team_sizes": [2, 2]},
            400,
            "team_sizes: add up to 4",
        ),
    ],
)
async def test_bad_requests_get_their_status_and_the_field(client, path, body, status, says):
    """Unknown ladder 404, malformed body 400 naming the field, too many players 413."""
    got, answer = await post(client, path, body)
    assert got == status and says in answer["error"] and "Traceback" not in answer["error"]


async def test_a_body_over_the_size_limit_is_a_413_in_json(client):
    """A batch too big to read (over aiohttp's 1 MiB body limit) is 413 with a JSON error."""
    players = [f"player-{i:07d}" for i in range(80_000)]
    status, answer = await post(client, "/api/ladders/default/players", {"players": players})
    assert status == 413 and answer["error"].startswith("body: Maximum request body size")


async def test_the_openapi_file_is_served_as_yaml(client):
    """The shipped OpenAPI document (which names every route: tests/unit/service/test_web.py)
    is served at /api/openapi.yaml, as YAML."""
    spec = yaml.safe_load(OPENAPI.read_text())
    response = await client.get("/api/openapi.yaml")
    assert response.status == 200 and yaml.safe_load(await response.text()) == spec
    assert response.content_type == "application/yaml"


@pytest.mark.parametrize(
    ("operation", "example", "body"),
    [
        ("predict", "two_teams", {"teams": [["a"], ["b", "a"]]}),
        ("balance", "sizes", {"players": ["a", "b", "c"], "team_sizes": [2, 2]}),
    ],
)
async def test_the_openapi_file_documents_the_refusals_json_schema_cannot_state(
    client, operation, example, body
):
    """A rule JSON Schema cannot state is documented by its 400 answer, word for word."""
    spec = yaml.safe_load(OPENAPI.read_text())
    refusal = spec["paths"][f"/api/ladders/{{ladder}}/{operation}"]["post"]["responses"]["400"]
    documented = refusal["content"]["application/json"]["examples"][example]["value"]
    assert await post(client, f"/api/ladders/default/{operation}", body) == (400, documented)


async def test_predict_gives_ranking_probabilities_when_asked(client):
    """With "rankings": true, every order of three teams with its probability, summing to 1."""
    status, body = await post(
        client, "/api/ladders/default/predict", {"teams": [["ann"], ["bob"], ["cat"]], "rankings": True}
    )
    assert status == 200 and len(body["rankings"]) == 6
    assert sum(r["probability"] for r in body["rankings"]) == pytest.approx(1.0)
    assert body["rankings"][0]["order"][0] == 0  # ann, who beat both, most likely leads
    status, body = await post(
        client, "/api/ladders/default/predict", {"teams": [["ann"], ["bob"]], "rankings": "yes"}
    )
    assert status == 400 and body["error"] == "rankings: must be true or false"


async def test_leaderboard_rows_give_the_stored_state_and_sigma_as_of_now():
    """Each row has the stored state and display rating beside σ and rating as of the read's
    clock (σ² + γ²·Δt, γ = 1 per day), the same σ a players lookup gives; nothing is written."""
    store = MemoryStore()
    await Processor(LADDERS, store).process(
        [
            duel("t1", "ann", "bob", ladder="timed"),
            duel("t2", "ann", "cat", ladder="timed", at=1_700_000_000.0 + DAY),
        ]
    )
    stored = await store.players("timed")
    queries = Queries(store, LADDERS)
    application = web.Application()
    application.add_routes(query_routes(queries, clock=lambda: NOW))
    async with TestClient(TestServer(application)) as client:
        response = await client.get("/api/ladders/timed/leaderboard?top=3")
        assert response.status == 200
        body = await response.json()
    assert (body["ladder"], body["model"]) == ("timed", "trueskill")
    assert next((r["rank"], r["player_id"]) for r in body["rows"]) == (1, "ann")
    looked = {
        p["player_id"]: p for p in (await queries.players("timed", ["ann", "bob", "cat"], NOW))["players"]
    }
    for row in body["rows"]:
        state = stored[row["player_id"]]
        idle_days = (NOW - state.last_played) / DAY
        assert (row["mu"], row["sigma"], row["games"], row["last_played"]) == (
            state.mu,
            state.sigma,
            state.games,
            state.last_played,
        )
        assert row["rating"] == pytest.approx(state.mu - 3 * state.sigma, abs=1e-12)
        assert row["sigma_now"] == pytest.approx(math.sqrt(state.sigma**2 + idle_days), rel=1e-12)
        assert row["sigma_now"] == looked[row["player_id"]]["sigma"]
        assert row["rating_now"] == pytest.approx(state.mu - 3 * row["sigma_now"], abs=1e-12)
    assert await store.players("timed") == stored


async def test_leaderboard_takes_top_and_answers_bad_requests_with_the_field(client):
    """``top`` bounds the rows (default 25); a bad ``top`` is 400 naming it, an unknown ladder 404."""
    body = await (await client.get("/api/ladders/default/leaderboard?top=1")).json()
    assert [(r["rank"], r["player_id"], r["games"]) for r in body["rows"]] == [(1, "ann", 2)]
    assert len((await (await client.get("/api/ladders/default/leaderboard")).json())["rows"]) == 3
    for bad in ("0", "501", "many", "2.5"):
        response = await client.get(f"/api/ladders/default/leaderboard?top={bad}")
        assert response.status == 400
        assert (await response.json())["error"] == "top: must be an integer from 1 to 500"
    response = await client.get("/api/ladders/nosuch/leaderboard")
    assert response.status == 404 and "unknown ladder 'nosuch'" in (await response.json())["error"]


async def test_leaderboard_of_an_elo_ladder_has_no_sigma(client):
    """An Elo ladder's rows have no σ, stored or now, and the rating now is the stored one."""
    body = await (await client.get("/api/ladders/elo/leaderboard")).json()
    assert [
        (r["player_id"], r["sigma"], r["sigma_now"], r["rating_now"] == r["rating"] == r["mu"])
        for r in body["rows"]
    ] == [("ann", None, None, True), ("bob", None, None, True)]


async def test_ladders_list_their_parameters_typed(client):
    """`/api/ladders` gives each ladder's parameters as configured: a number stays a number."""
    response = await client.get("/api/ladders")
    ladders = {ladder["name"]: ladder for ladder in (await response.json())["ladders"]}
    assert ladders["timed"] == {
        "name": "timed",
        "model": "trueskill",
        "params": {"time_tau": 1.0},
        "shadows": [],
    }
    assert ladders["elo"]["params"] == {}


async def test_serve_gives_a_players_history_newest_first(client):
    """A player's history (served by `serve` as by a worker): the stored state and the
    rating-changed events, newest first, `limit` of them; no trace of a player → 404."""
    response = await client.get("/api/ladders/default/players/ann?limit=1")
    body = await response.json()
    assert [e["match_id"] for e in body["history"]] == ["m2"]
    assert body["state"]["games"] == 2 and body["history"][0]["after"]["mu"] == body["state"]["mu"]
    missing = await client.get("/api/ladders/default/players/nobody")
    assert missing.status == 404 and "no player 'nobody'" in (await missing.json())["error"]


async def test_the_leaderboard_gives_a_rerates_parameters_typed():
    """The parameter overrides a re-rate left are given as they are: a number stays a number,
    a boolean a boolean."""

    class Rerated(MemoryStore):
        async def generations(self, ladder: str) -> Generations:
            return replace(await super().generations(ladder), params={"beta": 2.5, "player_scores": True})

    store = Rerated()
    await Processor(LADDERS, store).process([duel("m1", "ann", "bob")])
    async with TestClient(TestServer(serve_app(Queries(store, LADDERS), store))) as client:
        body = await (await client.get("/api/ladders/default/leaderboard")).json()
    assert body["params"] == {"beta": 2.5, "player_scores": True}


async def test_a_shadow_is_read_side_by_side_with_its_ladder_and_an_unknown_one_is_404():
    """``<ladder>~<shadow>`` answers from the shadow's own states (README "Shadow models")."""
    store = MemoryStore()
    await Processor(SHADOWED, store).process(duels(30))
    client = TestClient(TestServer(serve_app(Queries(store, SHADOWED), store)))
    await client.start_server()
    try:
        boards = {}
        for name in ("duel", "duel~elo"):
            response = await client.get(f"/api/ladders/{name}/leaderboard?top=3")
            assert response.status == 200
            boards[name] = await response.json()
        elo = await store.players("duel~elo")
        best = sorted(elo, key=lambda p: -elo[p].mu)[:3]
        assert (
            boards["duel~elo"]["model"] == "elo"
            and [r["player_id"] for r in boards["duel~elo"]["rows"]] == best
        )
        assert boards["duel"]["rows"][0]["mu"] != boards["duel~elo"]["rows"][0]["mu"]
        status, body = await post(client, "/api/ladders/duel~elo/predict", {"teams": [["a"], ["b"]]})
        assert status == 200 and body["ladder"] == "duel~elo"
        response = await client.get("/api/ladders/duel~nope/leaderboard")
        assert response.status == 404 and "duel~nope" in (await response.json())["error"]
    finally:
        await client.close()


async def test_predict_and_balance_take_parties_on_a_party_effects_ladder():
    """On a ladder with ``party_effects``: predict adds the learned ``party:2`` to the team of
    a pair (named per team, and its win probability equals `predict` with the effect as a
    member), and balance keeps the pair together; parties naming strangers are refused."""
    ladders = Ladders([Ladder("party", "trueskill", {"party_effects": True})])
    store = MemoryStore()
    teams = [[{"id": "a", "party": "q"}, {"id": "b", "party": "q"}], [{"id": "c"}, {"id": "d"}]]
    event = {
        "match_id": "m1",
        "ladder": "party",
        "finished_at": NOW,
        "teams": [{"rank": 1, "players": teams[0]}, {"rank": 2, "players": teams[1]}],
    }
    await Processor(ladders, store).process([parse_match(event, ladders)])
    effect = (await store.players("party", effects=True))["party:2"]
    assert effect.mu > 0
    application = serve_app(Queries(store, ladders), store)
    async with TestClient(TestServer(application)) as client:
        body = {"teams": [["c", "a"], ["b", "d"]], "parties": [["a", "b"]]}
        status, split = await post(client, "/api/ladders/party/predict", body)
        assert status == 200 and [t["effects"] for t in split["teams"]] == [[], []]
        body = {"teams": [["a", "b"], ["c", "d"]], "parties": [["a", "b"]]}
        status, together = await post(client, "/api/ladders/party/predict", body)
        assert status == 200 and [t["effects"] for t in together["teams"]] == [["party:2"], []]
        states = await store.players("party")
        rated = [[Rating(states[p].mu, states[p].sigma) for p in team] for team in body["teams"]]
        expected = predict(
            ladders["party"].rating_model, [rated[0] + [Rating(effect.mu, effect.sigma)], rated[1]]
        )
        assert [t["win_probability"] for t in together["teams"]] == pytest.approx(expected.win_probabilities)
        body = {"players": ["a", "b", "c", "d"], "team_sizes": [2, 2], "parties": [["a", "c"]]}
        status, balanced = await post(client, "/api/ladders/party/balance", body)
        assert status == 200 and {"a", "c"} in [set(t) for t in balanced["teams"]]
        body["parties"] = [["a", "zed"]]
        status, refused = await post(client, "/api/ladders/party/balance", body)
        assert (status, refused["error"]) == (400, "parties[0]: 'zed' is not one of the players")


async def test_a_match_is_explained_and_an_unknown_one_is_a_404(client):
    """``GET …/matches/{id}``: the match's players with expected and actual; 404 naming an
    unknown match or ladder."""
    response = await client.get("/api/ladders/default/matches/m2")
    answer = await response.json()
    assert response.status == 200 and answer["match_id"] == "m2"
    assert [(p["player_id"], p["actual"]["result"]) for p in answer["players"]] == [
        ("ann", "win"),
        ("cat", "loss"),
    ]
    assert answer["players"][0]["expected"]["win"] > answer["players"][1]["expected"]["win"]
    response = await client.get("/api/ladders/default/matches/nope")
    assert response.status == 404 and "no match 'nope'" in (await response.json())["error"]
    response = await client.get("/api/ladders/nowhere/matches/m1")
    assert response.status == 404


async def test_quality_is_evaluates_figures_cumulative_and_over_the_last_n(client):
    """``GET …/quality``: the fixture's two default-ladder matches scored as `evaluate` does;
    ``?last=1`` the newest alone; a bad ``last`` is a 400 naming it."""
    response = await client.get("/api/ladders/default/quality?last=1")
    answer = await response.json()
    assert response.status == 200 and answer["scorer"] == "live"
    cumulative, last = answer["cumulative"], answer["last"]
    assert (cumulative["matches"], cumulative["pairs"], last["matches"]) == (2, 2, 1)
    assert cumulative["wrong_order"] == 0.25  # m1: newcomers, a tie (½); m2: ann favoured and won
    assert last["wrong_order"] == 0.0 and last["log_loss"] < cumulative["log_loss"]
    assert sum(b["count"] for b in cumulative["calibration"]) == 2
    assert (await client.get("/api/ladders/default/quality")).status == 200
    response = await client.get("/api/ladders/default/quality?last=0")
    assert (
        response.status == 400
        and "last: must be an integer from 1 to 1000" in (await response.json())["error"]
    )


async def test_leaderboard_around_a_player_over_http(client):
    """``?around=P&n=N``: the rows around P as the whole leaderboard has them; an unknown player
    404, ``around`` with ``top`` or a bad ``n`` 400 naming the field."""
    whole = (await (await client.get("/api/ladders/default/leaderboard")).json())["rows"]
    middle = whole[1]["player_id"]
    body = await (await client.get(f"/api/ladders/default/leaderboard?around={middle}&n=1")).json()
    assert body["rows"] == whole and (body["rank"], body["ranked"], body["player_id"]) == (2, 3, middle)
    body = await (await client.get("/api/ladders/default/leaderboard?around=ann")).json()
    assert body["rows"] == whole  # n defaults to 5
    response = await client.get("/api/ladders/default/leaderboard?around=zed")
    assert (
        response.status == 404
        and (await response.json())["error"] == "zed has not played on ladder 'default'"
    )
    for query, says in (
        ("around=ann&top=3", "around: not with top or season"),
        ("around=ann&n=101", "n: must be"),
    ):
        response = await client.get(f"/api/ladders/default/leaderboard?{query}")
        assert response.status == 400 and (await response.json())["error"].startswith(says)


async def test_a_leaderboard_read_is_revalidated_by_its_etag_and_cached_until_a_commit():
    """Every leaderboard answer has an ETag; sent back in If-None-Match it gets 304 with no
    body while the ladder has not moved. A clock-free ladder's answer comes from the cache
    (the board is not read again) until a commit moves the ladder: then a new answer and
    ETag. A time-scaled ladder's answer is computed every time, and so is one around a
    player, whose ETag still revalidates."""
    store = MemoryStore()
    processor = Processor(LADDERS, store)
    await processor.process([duel("m1", "ann", "bob"), duel("t1", "ann", "bob", ladder="timed")])
    queries = Queries(store, LADDERS)
    asked: list[str] = []
    board = queries.leaderboard

    async def counted(ladder, *args, **kwargs):
        asked.append(ladder)
        return await board(ladder, *args, **kwargs)

    queries.leaderboard = counted  # type: ignore[method-assign]
    async with TestClient(TestServer(serve_app(queries, store))) as client:
        first = await client.get("/api/ladders/default/leaderboard?top=10")
        etag = first.headers["ETag"]
        again = await client.get("/api/ladders/default/leaderboard?top=10", headers={"If-None-Match": etag})
        assert again.status == 304 and again.headers["ETag"] == etag and await again.read() == b""
        same = await client.get("/api/ladders/default/leaderboard?top=10")
        assert await same.json() == await first.json() and asked == ["default"]
        weak = await client.get(
            "/api/ladders/default/leaderboard?top=10", headers={"If-None-Match": f"W/{etag}"}
        )
        assert weak.status == 304
        await processor.process([duel("m2", "bob", "cat")])
        moved = await client.get("/api/ladders/default/leaderboard?top=10", headers={"If-None-Match": etag})
        assert moved.status == 200 and moved.headers["ETag"] != etag and asked == ["default"] * 2
        assert len((await moved.json())["rows"]) == 3
        for _ in range(2):
            await client.get("/api/ladders/timed/leaderboard?top=10")
        assert asked == ["default"] * 2 + ["timed"] * 2
        around = await client.get("/api/ladders/default/leaderboard?around=bob&n=1")
        tag = {"If-None-Match": around.headers["ETag"]}
        assert (
            await client.get("/api/ladders/default/leaderboard?around=bob&n=1", headers=tag)
        ).status == 304


async def test_a_balance_too_slow_for_its_model_is_refused_with_413_and_says_so():
    """An Elo ladder scores splits one by one: 100 players into ten teams is a 413 naming the
    model; a TrueSkill ladder searches the same pool locally and says how."""
    queries = Queries(MemoryStore(), LADDERS, max_players=100)
    pool = [f"p{i}" for i in range(100)]
    with pytest.raises(TooManyPlayers, match="too slow to search with the elo model"):
        await queries.balance("elo", pool, [10] * 10, NOW)
    answer = await queries.balance("default", pool, [10] * 10, NOW)
    assert answer["exhaustive"] is False and answer["search"].startswith("local search")


async def test_concurrent_lookups_and_reads_reach_the_store_as_one_call_each():
    """Lookups of one ladder asked in the same turn go to the store as one call of all their
    players, and state reads, leaderboard ranks and rows around players too; each caller gets
    its own players, as a call of its own would give them."""
    store = MemoryStore()
    await Processor(LADDERS, store).process([duel("m1", "ann", "bob"), duel("m2", "ann", "cat")])
    calls: list[tuple[str, list[str]]] = []
    lookup, read = store.lookup, store.read

    async def counted_lookup(ladder, ids, since=None):
        calls.append(("lookup", list(ids)))
        return await lookup(ladder, ids, since)

    async def counted_read(ladder, ids, effects, matches, generation=None):
        calls.append(("read", list(ids)))
        return await read(ladder, ids, effects, matches, generation)

    store.lookup, store.read = counted_lookup, counted_read  # type: ignore[method-assign]
    batched = BatchedReads(store)
    first, second = await asyncio.gather(
        batched.lookup("default", ["ann"]), batched.lookup("default", ["bob", "zed"])
    )
    assert calls == [("lookup", ["ann", "bob", "zed"])]
    alone = await lookup("default", ["bob", "zed"])
    assert (second.players, second.places, second.ranked) == (alone.players, alone.places, alone.ranked)
    assert set(first.players) == set(first.places) == {"ann"}
    states = await asyncio.gather(*(batched.read("default", [p], [], []) for p in ("cat", "bob")))
    assert calls[1:] == [("read", ["cat", "bob"])] and [set(s.players) for s in states] == [{"cat"}, {"bob"}]
    ranks = await asyncio.gather(*(batched.board_ranks("default", [p], None) for p in ("ann", "bob")))
    assert ranks == [await store.board_ranks("default", [p], None) for p in ("ann", "bob")]
    arounds, asked = store.board_arounds, []

    async def counted_arounds(ladder, ids, n, since):
        asked.append(list(ids))
        return await arounds(ladder, ids, n, since)

    store.board_arounds = counted_arounds  # type: ignore[method-assign]
    rows = await asyncio.gather(*(batched.board_around("default", p, 1, None) for p in ("ann", "nobody")))
    assert asked == [["ann", "nobody"]]
    assert rows == [await store.board_around("default", "ann", 1, None), None]


async def test_a_batch_whose_first_caller_is_cancelled_still_answers_the_others():
    """The first caller of a turn makes the batch's store call; cancelled before or during it,
    the others of its turn still get the store's answer (and the cancelled caller its
    cancellation), and a failing call fails every caller with the store's error."""

    class Gated(MemoryStore):
        gate = asyncio.Event()

        async def lookup(self, ladder, ids, since=None):
            await self.gate.wait()
            return await super().lookup(ladder, ids, since)

    store = Gated()
    await Processor(LADDERS, store).process([duel("m1", "ann", "bob")])
    batched = BatchedReads(store)
    for turns in (1, 2):  # cancelled while the turn is open, then while the call waits
        store.gate.clear()
        first = asyncio.ensure_future(batched.lookup("default", ["ann"]))
        other = asyncio.ensure_future(batched.lookup("default", ["bob"]))
        for _ in range(turns):
            await asyncio.sleep(0)
        first.cancel()
        store.gate.set()
        found = await asyncio.wait_for(other, 5)
        with pytest.raises(asyncio.CancelledError):
            await first
        assert set(found.players) == {"bob"}

    class Refusing(MemoryStore):
        async def board_ranks(self, ladder, ids, since):
            raise BoardBehind(ladder, 1000)

    refused = BatchedReads(Refusing())
    answers = await asyncio.gather(
        *(refused.board_ranks("default", [p], None) for p in ("ann", "bob")), return_exceptions=True
    )
    assert [type(a) for a in answers] == [BoardBehind, BoardBehind]


async def test_concurrent_leaderboard_versions_ask_the_store_for_generations_once():
    """The generations that cached leaderboard answers of the same turn check their version
    by are one store call, each caller getting the store's answer."""
    store = MemoryStore()
    await Processor(LADDERS, store).process([duel("m1", "ann", "bob")])
    generations, calls = store.generations, []

    async def counted(ladder):
        calls.append(ladder)
        return await generations(ladder)

    store.generations = counted  # type: ignore[method-assign]
    batched = BatchedReads(store)
    answers = await asyncio.gather(*(batched.generations("default") for _ in range(3)))
    assert calls == ["default"] and answers == [await generations("default")] * 3


async def test_each_shadow_is_scored_beside_the_live_ladder_as_a_live_ladder_of_its_model_would_be():
    """``…/quality`` of a shadowed ladder gives each shadow's figures under its name, equal to
    the live figures of a ladder rated alone with that shadow's model and parameters."""
    store = MemoryStore()
    matches = duels(40)
    await Processor(SHADOWED, store).process(matches)
    async with TestClient(TestServer(serve_app(Queries(store, SHADOWED), store))) as client:
        answer = await (await client.get("/api/ladders/duel/quality?last=10")).json()
    assert set(answer["shadows"]) == {s.name.split("~")[1] for s in SHADOWED["duel"].shadows}
    for shadow in SHADOWED["duel"].shadows:
        solo, alone_store = alone(shadow, "solo"), MemoryStore()
        await Processor(solo, alone_store).process(duels(40, ladder="solo"))
        async with TestClient(TestServer(serve_app(Queries(alone_store, solo), alone_store))) as client:
            oracle = await (await client.get("/api/ladders/solo/quality?last=10")).json()
        figures = answer["shadows"][shadow.name.split("~")[1]]
        assert figures["cumulative"]["matches"] == 40
        assert figures == {"cumulative": oracle["cumulative"], "last": oracle["last"]}
    assert answer["cumulative"] != answer["shadows"]["elo"]["cumulative"]


def test_the_two_time_forms_are_documented_side_by_side():
    """The API gives times as epoch seconds, events as ISO 8601 strings (issue #37 chose to
    document both): every ``last_played`` of openapi.yaml says so, and the read-API page does."""

    def described(node: object) -> list[str]:
        """The description of every ``last_played`` property under `node`."""
        if isinstance(node, list):
            return [d for value in node for d in described(value)]
        if not isinstance(node, dict):
            return []
        played = node.get("last_played")
        own = [played.get("description", "")] if isinstance(played, dict) else []
        return own + [d for value in node.values() for d in described(value)]

    descriptions = described(yaml.safe_load(OPENAPI.read_text()))
    assert descriptions and all("epoch seconds" in d and "ISO 8601" in d for d in descriptions)
    guide = (OPENAPI.parents[2] / "docs" / "pages" / "reference" / "read-api.md").read_text()
    assert "ISO 8601" in guide and "epoch seconds" in guide


async def test_a_leaderboard_behind_its_trim_is_a_503_with_retry_after_on_every_board_read():
    """A store refusing a board read (`BoardBehind`: too many players went idle since the last
    trim) answers 503 and when to ask again, on the leaderboard, around and the players' lookup."""

    class Behind(MemoryStore):
        async def board_ranks(self, ladder, ids, since):
            raise BoardBehind(ladder, 1000)

        async def board_top(self, ladder, top, since, season=None):
            raise BoardBehind(ladder, 1000)

        async def board_around(self, ladder, player_id, n, since):
            raise BoardBehind(ladder, 1000)

    store = Behind()
    await Processor(LADDERS, store).process([duel("m1", "ann", "bob")])
    async with TestClient(TestServer(serve_app(Queries(store, LADDERS), store))) as client:
        for response in (
            await client.get("/api/ladders/default/leaderboard"),
            await client.get("/api/ladders/default/leaderboard?around=ann"),
            await client.post("/api/ladders/default/players", json={"players": ["ann"]}),
        ):
            assert response.status == 503, response.url
            assert response.headers["Retry-After"] == "5"
            assert "went idle since its leaderboard was last trimmed" in (await response.json())["error"]


def test_serve_answers_on_uvloops_event_loop():
    """``stream-rater serve`` runs on uvloop's loop where uvloop is installed (a dependency)."""
    loop = serving_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
