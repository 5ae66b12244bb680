"""Ladder rules on a real Redis and Redis Cluster, as on the in-memory store: the same
processor and queries, the same answers (the store's scripts keep the leaderboard, the
activity set and the seasons)."""

from __future__ import annotations

import uuid

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.offline.verify import board_differences, eligible_board
from stream_rater.processor import Processor
from stream_rater.queries import NotRanked, Queries, UnknownPlayer
from stream_rater.store import open_store
from stream_rater.store.redis import RedisStore, ladder_key
from tests.helpers import duel

T0 = 1_700_000_000.0


@pytest.fixture(params=["memory", "redis", "redis_cluster"])
async def store(request):
    s = open_store("memory" if request.param == "memory" else request.getfixturevalue(f"{request.param}_url"))
    yield s
    await s.close()


def table(**params) -> tuple[str, Ladders]:
    name = f"r-{uuid.uuid4().hex[:10]}"
    return name, Ladders([Ladder(name, "elo", params)])


async def apply(store, ladders: Ladders, name: str, *events: dict) -> list:
    processor = Processor(ladders, store)
    result = await processor.process([parse_match({**e, "ladder": name}, ladders) for e in events])
    return result.results


async def test_a_one_game_elo_player_is_ranked_only_once_eligible(store):
    """``leaderboard_min_games = 3`` and ``provisional_games = 2``: a player who won their only
    game is not on the leaderboard and has no rank, until their third game."""
    name, ladders = table(leaderboard_min_games=3, provisional_games=2)
    await apply(store, ladders, name, *(duel(f"m{i}", "a", "b", at=T0 + i) for i in range(3)))
    results = await apply(store, ladders, name, duel("x1", "lucky", "a", at=T0 + 10))
    assert [e["provisional"] for e in results[0].events] == [True, False]
    queries = Queries(store, ladders)
    assert [r["player_id"] for r in (await queries.leaderboard(name, 10, T0))["rows"]] == ["a", "b"]
    [lucky] = (await queries.players(name, ["lucky"], T0))["players"]
    assert lucky["rank"] is None and lucky["provisional"] and lucky["peak"] == lucky["rating"] > 1500
    await apply(
        store, ladders, name, duel("x2", "lucky", "b", at=T0 + 11), duel("x3", "lucky", "b", at=T0 + 12)
    )
    board = (await queries.leaderboard(name, 10, T0))["rows"]
    assert board[0]["player_id"] == "lucky" and not board[0]["provisional"]


async def test_activity_and_seasons_on_every_store(store):
    """Idle players drop out of the active leaderboard and ranks; a season record keeps the
    ending season's eligible board (without the idle players) and shrinks every rating."""
    name, ladders = table(leaderboard_active_days=1, season_shrink=0.0)
    day = 86_400.0
    await apply(
        store, ladders, name, duel("m1", "old", "older", at=T0), duel("m2", "new", "newer", at=T0 + 5 * day)
    )
    queries = Queries(store, ladders)
    now = T0 + 5.5 * day
    assert [r["player_id"] for r in (await queries.leaderboard(name, 10, now))["rows"]] == ["new", "newer"]
    found = {
        p["player_id"]: p["rank"] for p in (await queries.players(name, ["old", "newer"], now))["players"]
    }
    assert found == {"old": None, "newer": 2}
    season = {"kind": "season", "match_id": "s2", "finished_at": T0 + 6 * day}
    results = await apply(store, ladders, name, season)
    assert {e["player_id"] for e in results[0].events} == {"old", "older", "new", "newer"}
    assert {s.mu for s in (await store.players(name)).values()} == {1500.0}
    ended = await queries.leaderboard(name, 10, now, season=1)
    assert [r["player_id"] for r in ended["rows"]] == ["new", "newer"]


async def test_an_ended_seasons_leaderboard_shows_the_states_it_ended_with(store):
    """`leaderboard --season 1` (and `?season=1`) shows each player as the season left them,
    on every store: μ, σ, games and last match from before the soft reset, and a rating that
    is μ − 3σ of those, not the final rating beside the reset μ and σ."""
    name = f"r-{uuid.uuid4().hex[:10]}"
    ladders = Ladders([Ladder(name, "trueskill", {"season_shrink": 0.5, "season_sigma": 2.0})])
    await apply(
        store, ladders, name, duel("m1", "alice", "bob", at=T0), duel("m2", "alice", "cat", at=T0 + 1)
    )
    before = await store.players(name)
    await apply(store, ladders, name, {"kind": "season", "match_id": "s2", "finished_at": T0 + 2})
    await apply(store, ladders, name, duel("m3", "bob", "alice", at=T0 + 3))
    assert (await store.players(name))["alice"].mu != before["alice"].mu
    rows = (await Queries(store, ladders).leaderboard(name, 10, T0 + 10**6, season=1))["rows"]
    assert {r["player_id"]: (r["mu"], r["sigma"], r["games"], r["last_played"]) for r in rows} == {
        p: (s.mu, s.sigma, s.games, s.last_played) for p, s in before.items()
    }
    for row in rows:
        assert row["rating"] == pytest.approx(row["mu"] - 3 * row["sigma"])
        assert (row["sigma_now"], row["rating_now"]) == (row["sigma"], row["rating"])


async def test_around_a_player_is_the_slice_of_the_whole_leaderboard(store):
    """``around``: the rows from n above the player to n below equal the full eligible
    leaderboard's slice around them, ranks included, on every store; the players' ranks agree
    with `players`, asked one by one or many at once."""
    name, ladders = table(leaderboard_active_days=1, provisional_games=2)
    day = 86_400.0
    # a chain of wins p0 > p1 > … in three rounds; the duels i = 0, 1 mod 4 are 3 days older, so
    # p0 and p1, p5, p9, … (both of whose duels are) are inactive
    events = [
        duel(f"m{r}-{i}", f"p{i}", f"p{i + 1}", at=T0 + (r * 30 + i) * 60 + (3 * day if i % 4 > 1 else 0))
        for r in range(3)
        for i in range(20)
    ]
    await apply(store, ladders, name, *sorted(events, key=lambda e: e["finished_at"]))
    queries = Queries(store, ladders)
    now = T0 + 3.5 * day
    whole = (await queries.leaderboard(name, 500, now))["rows"]
    assert len(whole) == 15
    for n in (0, 2, 4):
        for at in (0, 1, len(whole) // 2, len(whole) - 1):
            row = whole[at]
            answer = await queries.around(name, row["player_id"], n, now)
            assert answer["rows"] == whole[max(0, at - n) : at + n + 1]
            assert answer["rank"] == row["rank"] and answer["ranked"] == len(whole)
            [same] = (await queries.players(name, [row["player_id"]], now))["players"]
            assert same["rank"] == row["rank"]
    for ids in ([r["player_id"] for r in whole], [r["player_id"] for r in whole[-3:]]):
        ranks = {p["player_id"]: p["rank"] for p in (await queries.players(name, ids, now))["players"]}
        assert ranks == {r["player_id"]: r["rank"] for r in whole if r["player_id"] in ids}


async def test_around_says_why_a_player_is_not_ranked(store):
    """An unknown player is `UnknownPlayer` (404); a provisional or an inactive one is
    `NotRanked` (409) with the rule that leaves them out."""
    name, ladders = table(leaderboard_active_days=30, provisional_games=3)
    day = 86_400.0
    await apply(
        store,
        ladders,
        name,
        *(duel(f"m{i}", "a", "b", at=T0 + i) for i in range(3)),
        duel("x", "a", "rookie", at=T0 + 40 * day),
    )
    queries = Queries(store, ladders)
    now = T0 + 40 * day + 60
    with pytest.raises(UnknownPlayer, match="nobody has not played on ladder") as unknown:
        await queries.around(name, "nobody", 2, now)
    assert unknown.value.status == 404
    with pytest.raises(
        NotRanked, match=r"^rookie is not ranked: provisional, 1 of 3 games played$"
    ) as rookie:
        await queries.around(name, "rookie", 2, now)
    assert rookie.value.status == 409
    with pytest.raises(
        NotRanked,
        match=r"^b is not ranked: inactive for 40 days \(the ladder ranks players active within 30 days\)$",
    ):
        await queries.around(name, "b", 2, now)
    answer = await queries.around(name, "a", 2, now)
    assert [r["player_id"] for r in answer["rows"]] == ["a"] and answer["rank"] == 1


async def test_the_eligible_board_equals_a_recomputation_from_the_states(store):
    """Through matches, a late match of an idle player and a season start (an activity rule and
    provisional players), the live eligible leaderboard — and on Redis its running sum — equals
    the one the live states give (`verify`'s check); a wrong entry or sum is named."""
    name, ladders = table(leaderboard_active_days=2, provisional_games=2, season_shrink=0.5)
    day = 86_400.0
    events = [duel(f"m{i}", f"p{i % 7}", f"p{(i + 1 + i % 3) % 7}", at=T0 + i * day / 3) for i in range(30)]
    events.insert(20, {"kind": "season", "match_id": "s2", "finished_at": T0 + 6.6 * day})
    events.append(duel("late", "p0", "p6", at=T0))  # an old match: counted, but p0 stays idle
    for at in range(0, len(events), 6):  # batches of 6: commits trim as they go
        await apply(store, ladders, name, *events[at : at + 6])
    ladder = ladders.get(name)
    states = await store.players(name, only=[f"p{i}" for i in range(7)])  # not a full scan: lean
    now = T0 + 11 * day
    since = ladder.rules.active_since(now)
    assert await board_differences(store, ladder, states, now, 1e-9) == []
    board = eligible_board(ladder, states, since)
    assert 0 < len(board) < len(states) - 1
    top = [(r.player_id, r.score) for r in await store.board_top(name, 10, since)]
    assert top == sorted(board.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    if isinstance(store, RedisStore):
        wrong = top[0][0]
        await store.client.zadd(ladder_key(name, "lb"), {wrong: 1.0})
        lines = [d.line() for d in await board_differences(store, ladder, states, now, 1e-9)]
        assert lines[0] == f"leaderboard: player {wrong}: live 1.0; from the live state {top[0][1]!r}"
        assert lines[1].startswith("leaderboard: running sum ") and len(lines) == 2


async def test_tied_players_share_a_rank_in_every_read(store):
    """Two equal ratings share a rank ("1224": 1 + the players strictly higher) and a
    percentile in the leaderboard, around-me, the player lookup and an ended season's board;
    inside the tie the rows come by id, descending."""
    name, ladders = table(leaderboard_active_days=30, season_shrink=0.0)
    await apply(store, ladders, name, duel("m1", "ann", "bob", at=T0), duel("m2", "cat", "dan", at=T0 + 1))
    queries = Queries(store, ladders)
    expected = [("cat", 1), ("ann", 1), ("dan", 3), ("bob", 3)]
    rows = (await queries.leaderboard(name, 10, T0 + 2))["rows"]
    assert [(r["player_id"], r["rank"]) for r in rows] == expected
    around = await queries.around(name, "ann", 1, T0 + 2)
    assert [(r["player_id"], r["rank"]) for r in around["rows"]] == expected[:3] and around["rank"] == 1
    found = (await queries.players(name, ["ann", "cat", "bob", "dan"], T0 + 2))["players"]
    assert [(p["rank"], p["percentile"]) for p in found] == [(1, 100.0), (1, 100.0), (3, 50.0), (3, 50.0)]
    await apply(store, ladders, name, {"kind": "season", "match_id": "s2", "finished_at": T0 + 3})
    ended = (await queries.leaderboard(name, 10, T0 + 4, season=1))["rows"]
    assert [(r["player_id"], r["rank"]) for r in ended] == expected
    now = [(r["player_id"], r["rank"]) for r in (await queries.leaderboard(name, 10, T0 + 4))["rows"]]
    assert now == [("dan", 1), ("cat", 1), ("bob", 1), ("ann", 1)]  # the reset made them all equal


async def test_inactivity_decay_is_on_the_leaderboard_the_scripts_keep(store):
    """``decay_after_days``/``decay_per_day``: a player back after 30 idle days starts their
    match from the decayed rating (one below the start keeps theirs), and the leaderboard the
    commit scripts keep shows it, equal to the events and to the recomputation from the states
    (`verify`'s check)."""
    name, ladders = table(decay_after_days=10, decay_per_day=4.0)
    await apply(store, ladders, name, *(duel(f"m{i}", "a", "b", at=T0 + i) for i in range(4)))
    before = {r.player_id: r.score for r in await store.board_top(name, 10, None)}
    results = await apply(store, ladders, name, duel("back", "b", "a", at=T0 + 30 * 86_400.0))
    events = {e["player_id"]: e for e in results[0].events}
    assert events["b"]["before"]["rating"] == pytest.approx(before["b"]) and before["b"] < 1500.0
    decayed = max(before["a"] - 4.0 * 19, 1500.0)  # 19 whole days past 10, never below the start
    assert events["a"]["before"]["rating"] == pytest.approx(decayed) and decayed < before["a"]
    ladder, states = ladders.get(name), await store.players(name, only=["a", "b"])
    top = {r.player_id: r.score for r in await store.board_top(name, 10, None)}
    assert top == eligible_board(ladder, states, None) == {p: e["rating"] for p, e in events.items()}
    assert await board_differences(store, ladder, states, T0 + 30 * 86_400.0, 1e-9) == []
