"""Shadow models end to end (issue #38) on a real Apache Kafka broker: a worker rates a ladder
and its shadow from the same batches; the live ladder's events and states are exactly a replay
without the shadow, nothing of the shadow reaches the topic, the shadow's states are exactly a
replay with its parameters, `verify` checks both, and the read API answers for the shadow."""

from __future__ import annotations

import json
import urllib.request

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from tests.e2e.streams import assert_equals_replay, exact, random_matches, replay_events
from tests.helpers import cli, stored_players

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

WIDE = {"beta": 10.0, "draw_probability": 0.0}


def test_a_shadow_is_rated_beside_its_ladder_unpublished_verified_and_readable(stream_factory, tmp_path):
    stream = stream_factory(partitions=1)
    name, s = stream.ladder, stream.settings
    ladders_file = tmp_path / "ladders.toml"
    params = "\n".join(f"{k} = {v}" for k, v in WIDE.items())
    ladders_file.write_text(
        f'[ladders.{name}]\nmodel = "trueskill"\n\n[ladders.{name}.shadows.wide]\nmodel = "trueskill"\n{params}\n'
    )
    stream.env = {"STREAM_RATER_LADDERS_FILE": str(ladders_file)}
    stream.start_worker()
    matches = random_matches(stream, 300, players=20, seed=5)
    stream.publish(matches)
    records = stream.updates(expected=2 * len(matches), key=lambda r: (r.key, r.value))
    assert {json.loads(r.value)["ladder"] for r in records} == {name}  # no shadow event published
    assert_equals_replay(stream, matches, records)
    shadow = f"{name}~wide"
    _, oracle = replay_events(stream, matches, Ladders([Ladder(name, "trueskill", WIDE)]))
    assert exact({name: stored_players(s.redis_url, shadow, s.redis_prefix)}) == exact(oracle)

    verify = ["verify", "--ladder", name, "--store", s.redis_url, "--consumer-group", s.consumer_group]
    topic = ["--broker", s.broker, "--topic-matches", s.topic_matches, "--ladders-file", str(ladders_file)]
    ok = cli(*verify, *topic)
    assert ok.returncode == 0 and "(shadows " + shadow + " included)" in ok.stdout, ok.stdout + ok.stderr
    drifted = tmp_path / "drifted.toml"
    drifted.write_text(ladders_file.read_text().replace("beta = 10.0", "beta = 12.0"))
    bad = cli(*verify, *topic[:-1], str(drifted))
    assert bad.returncode == 1 and "shadow wide: player " in bad.stdout, bad.stdout + bad.stderr

    url = f"http://127.0.0.1:{stream.web_ports[0]}/api/ladders/{shadow}/leaderboard?top=5"
    with urllib.request.urlopen(url, timeout=10) as response:
        board = json.load(response)
    top = sorted(oracle[name].items(), key=lambda p: -(p[1].mu - 3 * p[1].sigma))[:5]
    assert board["ladder"] == shadow and [r["player_id"] for r in board["rows"]] == [p for p, _ in top]
    listed = cli(
        "leaderboard", "--ladder", shadow, "--top", "5", "--json", "--store", s.redis_url, *topic[-2:]
    )
    assert json.loads(listed.stdout)["rows"] == board["rows"], listed.stderr
