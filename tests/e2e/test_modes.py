"""A ladder with modes end to end (issue 48) on a real Apache Kafka broker: two workers (the
second joining mid-stream, so partitions move while matches flow) rate two moded ladders;
every event (with its ``mode``; the cross-updates' too) and every (player, mode) state is
exactly a replay's, each player's events chain per mode in the topic's order, `verify` finds 0 differences (states and each mode's board),
and the read API answers per mode."""

from __future__ import annotations

import json
import random
import urllib.request

import pytest

from stream_rater.config.ladders import Ladders
from tests.e2e.streams import by_event_id, decoded, exact, replay_events
from tests.helpers import cli, match
from tests.unit.moding import chained

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

MODES = "[ladders.{name}.modes.duel]\ndraw_probability = 0.02\n\n[ladders.{name}.modes.ffa]\n"


def moded_matches(names: tuple[str, ...], n: int, seed: int) -> list[dict]:
    """`n` duels and 3-player free-for-alls among 10 players who cross modes and ladders."""
    rng = random.Random(seed)
    ids = [f"p{i}" for i in range(10)]
    out = []
    for i in range(n):
        mode = rng.choice(["duel", "ffa"])
        players = rng.sample(ids, 2 if mode == "duel" else 3)
        event = match(f"m{i}", *([p] for p in players), ladder=rng.choice(names), at=1_700_000_000.0 + i)
        out.append({**event, "mode": mode})
    return out


def test_two_workers_on_moded_ladders_equal_replay_and_verify_finds_no_difference(stream_factory, tmp_path):
    stream = stream_factory(partitions=2, batch_size=20, ladders=2)
    ladders_file = tmp_path / "ladders.toml"
    ladders_file.write_text(
        "".join(
            f'[ladders.{n}]\nmodel = "trueskill"\nmode_coupling = 0.6\n\n{MODES.format(name=n)}\n'
            for n in stream.names
        )
    )
    stream.env = {"STREAM_RATER_LADDERS_FILE": str(ladders_file)}
    ladders = Ladders.from_toml(str(ladders_file))
    matches = moded_matches(stream.names, 400, seed=11)
    players = sum(len(team["players"]) for m in matches for team in m["teams"])
    stream.start_worker()
    stream.publish(matches[:200])
    stream.start_worker()  # a rebalance while the first half is being rated
    stream.publish(matches[200:])
    expected, replay_states = replay_events(stream, matches, ladders)
    events = decoded(stream.updates(expected=len(expected)))
    assert by_event_id(events) == by_event_id(expected)
    assert sum(e.get("kind") != "cross" for e in events) == players  # and the cross-updates' events
    assert {e["mode"] for e in events} == {"duel", "ffa"}
    states = stream.all_states()
    assert exact(states) == exact(replay_states)
    for name in stream.names:
        chained([e for e in events if e["ladder"] == name], states[name])

    s = stream.settings
    for name in stream.names:
        verify = cli(
            *("verify", "--ladder", name, "--store", s.redis_url, "--consumer-group", s.consumer_group),
            *("--broker", s.broker, "--topic-matches", s.topic_matches, "--ladders-file", str(ladders_file)),
        )
        assert verify.returncode == 0 and "none differ from the replay" in verify.stdout, (
            verify.stdout + verify.stderr
        )

    name = stream.ladder
    base = f"http://127.0.0.1:{stream.web_ports[0]}/api/ladders/{name}"
    with urllib.request.urlopen(f"{base}/leaderboard?mode=ffa&top=3", timeout=10) as response:
        board = json.load(response)
    ffa = {p.split("@", 1)[1]: st for p, st in states[name].items() if p.startswith("ffa@")}
    best = sorted(ffa, key=lambda p: (-(ffa[p].mu - 3 * ffa[p].sigma), p))[:3]
    assert [r["player_id"] for r in board["rows"]] == best
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/leaderboard?mode=ctf", timeout=10)
    assert refused.value.code == 404
