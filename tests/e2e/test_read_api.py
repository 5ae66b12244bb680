"""The read API as users reach it: ``stream-rater predict`` and ``stream-rater serve`` over a
ladder replayed into a real Redis, checked against the closed form computed here from the
stored states."""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from scipy.stats import norm

from stream_rater.local.demo import serving
from stream_rater.rating import TrueSkill
from stream_rater.store import open_store
from tests.helpers import FINISHED_AT, cli, duel, stored_players

pytestmark = pytest.mark.e2e


def replay_into(redis_url: str, ladders: Path, events: list[dict], tmp_path: Path) -> None:
    """``stream-rater replay`` of `events` into the store at `redis_url`."""
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    out = str(tmp_path / "out.jsonl")
    cli(
        "replay",
        "--store",
        redis_url,
        "--out",
        out,
        str(tmp_path / "m.jsonl"),
        "--ladders-file",
        str(ladders),
        check=True,
    )


def test_predict_and_serve_answer_from_the_stored_states(redis_url: str, tmp_path: Path):
    """`predict --json` gives each side's win chance and the draw chance, summing to 1 and
    equal to the TrueSkill closed form of the stored states; `serve` answers the same over
    HTTP, and an unknown ladder is a one-line error (exit 2)."""
    ladder = f"r-{uuid.uuid4().hex[:10]}"
    ladders = tmp_path / "ladders.toml"
    ladders.write_text(f'[ladders.{ladder}]\nmodel = "trueskill"\n')
    rng = random.Random(3)
    pairs = (rng.sample(["p0", "p1", "p2", "p3", "p4"], 2) for _ in range(200))
    events = [duel(f"m{i}", a, b, ladder=ladder, at=FINISHED_AT + i) for i, (a, b) in enumerate(pairs)]
    replay_into(redis_url, ladders, events, tmp_path)

    answer = cli(
        "predict",
        "--ladder",
        ladder,
        "--store",
        redis_url,
        "--json",
        "p0,p1",
        "p2,p3",
        "--ladders-file",
        str(ladders),
    )
    assert answer.returncode == 0, answer.stderr
    body = json.loads(answer.stdout)
    assert set(body) == {"ladder", "teams", "draw_probability", "quality"}
    wins = [t["win_probability"] for t in body["teams"]]
    assert sum(wins) + body["draw_probability"] == pytest.approx(1.0, abs=1e-12)

    states = stored_players(redis_url, ladder)
    ts = TrueSkill()
    c = math.sqrt(sum(states[p].sigma ** 2 + ts.tau**2 + ts.beta**2 for p in ("p0", "p1", "p2", "p3")))
    eps = norm.ppf((ts.draw_probability + 1) / 2) * ts.beta * 2
    delta = states["p0"].mu + states["p1"].mu - states["p2"].mu - states["p3"].mu
    assert wins == pytest.approx([norm.cdf((delta - eps) / c), norm.cdf((-delta - eps) / c)], abs=1e-12)

    with serving(redis_url, ladders) as server:
        request = urllib.request.Request(
            f"{server.url}/api/ladders/{ladder}/predict",
            data=json.dumps({"teams": [["p0", "p1"], ["p2", "p3"]]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            served = json.loads(response.read())
    assert server.process.returncode in (0, -15)
    assert [t["win_probability"] for t in served["teams"]] == pytest.approx(wins, abs=1e-12)

    unknown = cli(
        "predict", "--ladder", "nosuch", "--store", redis_url, "a", "b", "--ladders-file", str(ladders)
    )
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "unknown ladder 'nosuch'" in unknown.stderr


def test_serve_leaderboard_gives_stored_states_and_sigma_as_of_now(redis_url: str, tmp_path: Path):
    """`serve`'s leaderboard lists a time-scaled ladder's players best first with their states
    as stored in Redis and σ as of the request, ``σ² + γ²·Δt`` since each one's last match."""
    ladder = f"lb-{uuid.uuid4().hex[:10]}"
    ladders = tmp_path / "ladders.toml"
    ladders.write_text(f'[ladders.{ladder}]\nmodel = "trueskill"\ntime_tau = 0.01\ntime_unit = "days"\n')
    rng = random.Random(5)
    pairs = (rng.sample(["p0", "p1", "p2", "p3"], 2) for _ in range(60))
    events = [duel(f"m{i}", a, b, ladder=ladder, at=FINISHED_AT + 3600 * i) for i, (a, b) in enumerate(pairs)]
    replay_into(redis_url, ladders, events, tmp_path)

    states = stored_players(redis_url, ladder)
    with serving(redis_url, ladders) as server:
        before = time.time()
        with urllib.request.urlopen(
            f"{server.url}/api/ladders/{ladder}/leaderboard?top=3", timeout=10
        ) as response:
            board = json.loads(response.read())
        after = time.time()
    assert server.process.returncode in (0, -15)
    assert [r["rank"] for r in board["rows"]] == [1, 2, 3]
    display = {p: s.mu - 3 * s.sigma for p, s in states.items()}
    assert [r["player_id"] for r in board["rows"]] == sorted(display, key=display.get, reverse=True)[:3]
    gamma2 = 0.01**2 / 86400.0  # per second
    for row in board["rows"]:
        state = states[row["player_id"]]
        assert (row["mu"], row["sigma"], row["games"], row["last_played"]) == (
            state.mu,
            state.sigma,
            state.games,
            state.last_played,
        )
        low, high = (math.sqrt(state.sigma**2 + gamma2 * (t - state.last_played)) for t in (before, after))
        assert state.sigma < low <= row["sigma_now"] <= high
        assert row["rating_now"] == pytest.approx(state.mu - 3 * row["sigma_now"], abs=1e-12)


def test_predict_with_a_party_adds_the_learned_party_effect(redis_url: str, tmp_path: Path):
    """On a ``party_effects`` ladder replayed into Redis, ``predict --party p0,p1`` adds the
    stored ``party:2`` effect to that team: its win chance is the closed form with the effect
    as a member, above the one without the party."""
    ladder = f"pp-{uuid.uuid4().hex[:10]}"
    ladders = tmp_path / "ladders.toml"
    ladders.write_text(f'[ladders.{ladder}]\nmodel = "trueskill"\nparty_effects = true\n')
    rng = random.Random(4)
    events = []
    for i in range(80):
        a, b, c, d = rng.sample([f"p{k}" for k in range(8)], 4)
        team = [{"id": a, "party": "q"}, {"id": b, "party": "q"}]
        events.append(
            {
                "match_id": f"m{i}",
                "ladder": ladder,
                "finished_at": FINISHED_AT + i,
                "teams": [{"rank": 1, "players": team}, {"rank": 2, "players": [{"id": c}, {"id": d}]}],
            }
        )
    replay_into(redis_url, ladders, events, tmp_path)

    def win_chance(*party: str) -> tuple[float, list]:
        args = ["predict", "--ladder", ladder, "--store", redis_url, "--json", "p0,p1", "p2,p3"]
        answer = cli(*args, *party, "--ladders-file", str(ladders))
        assert answer.returncode == 0, answer.stderr
        body = json.loads(answer.stdout)
        return body["teams"][0]["win_probability"], [t["effects"] for t in body["teams"]]

    alone, no_effects = win_chance()
    together, effects = win_chance("--party", "p0,p1")
    assert no_effects == [[], []] and effects == [["party:2"], []]
    states = stored_players(redis_url, ladder)
    effect = asyncio.run(stored_effects(redis_url, ladder))["party:2"]
    ts = TrueSkill()
    members = [states[p] for p in ("p0", "p1", "p2", "p3")] + [effect]
    c = math.sqrt(sum(s.sigma**2 + ts.tau**2 + ts.beta**2 for s in members))
    eps = norm.ppf((ts.draw_probability + 1) / 2) * ts.beta * math.sqrt(5)
    delta = states["p0"].mu + states["p1"].mu + effect.mu - states["p2"].mu - states["p3"].mu
    assert together == pytest.approx(norm.cdf((delta - eps) / c), abs=1e-12)
    assert together > alone


async def stored_effects(redis_url: str, ladder: str) -> dict:
    store = open_store(redis_url)
    try:
        return await store.players(ladder, effects=True)
    finally:
        await store.close()


def test_balance_keeps_a_party_on_one_team(redis_url: str, tmp_path: Path):
    """``balance --party`` puts the party on one team; without it the split is the fairest of
    all; bad sizes are a one-line usage error."""
    ladder = f"bl-{uuid.uuid4().hex[:10]}"
    ladders = tmp_path / "ladders.toml"
    ladders.write_text(f'[ladders.{ladder}]\nmodel = "trueskill"\nparty_effects = true\n')
    events = [
        duel(f"m{i}", f"p{i % 2}", f"p{2 + i % 2}", ladder=ladder, at=FINISHED_AT + i) for i in range(20)
    ]
    replay_into(redis_url, ladders, events, tmp_path)
    args = [
        "balance",
        "--ladder",
        ladder,
        "--store",
        redis_url,
        "--sizes",
        "2,2",
        "--json",
        "p0",
        "p1",
        "p2",
        "p3",
    ]
    free = json.loads(cli(*args, "--ladders-file", str(ladders), check=True).stdout)
    assert {"p0", "p1"} not in [set(t) for t in free["teams"]]  # the two winners are split up
    kept = json.loads(cli(*args, "--party", "p0,p1", "--ladders-file", str(ladders), check=True).stdout)
    assert {"p0", "p1"} in [set(t) for t in kept["teams"]] and kept["quality"] < free["quality"]
    bad = cli("balance", "--ladder", ladder, "--store", redis_url, "--sizes", "2,x", "a", "b", "c", "d")
    assert bad.returncode == 2 and "--sizes" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_explain_says_what_was_expected_and_what_happened(redis_url: str, tmp_path: Path):
    """`explain --json` gives each player's before/after/expected/actual from the stored
    events; the text form names the result; an unknown match is a one-line error (exit 2)."""
    ladder = f"x-{uuid.uuid4().hex[:10]}"
    ladders = tmp_path / "ladders.toml"
    ladders.write_text(f'[ladders.{ladder}]\nmodel = "trueskill"\n')
    events = [
        duel("m0", "ann", "bob", ladder=ladder, at=FINISHED_AT),
        duel("m1", "bob", "ann", ladder=ladder, at=FINISHED_AT + 60),
    ]
    replay_into(redis_url, ladders, events, tmp_path)
    args = ("--ladder", ladder, "--store", redis_url, "--ladders-file", str(ladders))
    answer = cli("explain", "m1", "--json", *args, check=True)
    bob, ann = json.loads(answer.stdout)["players"]
    assert (bob["player_id"], bob["actual"], ann["actual"]["result"]) == (
        "bob",
        {"result": "win", "rank": 1},
        "loss",
    )
    assert bob["expected"]["win"] < ann["expected"]["win"]  # ann won m0, so was favoured
    assert bob["after"]["mu"] > bob["before"]["mu"] and ann["after"]["mu"] < ann["before"]["mu"]
    text = cli("explain", "m1", *args, check=True).stdout
    assert "bob: win (expected win" in text and "ann: loss" in text
    missing = cli("explain", "nope", *args)
    assert (
        missing.returncode == 2
        and missing.stderr.strip()
        == f"stream-rater explain: no match 'nope' on ladder '{ladder}' within Redis's window: never applied, or "
        "applied longer ago than the markers are kept (STREAM_RATER_MARKER_TTL); no archive is configured "
        "(STREAM_RATER_ARCHIVE_URL) to look further back"
    )
