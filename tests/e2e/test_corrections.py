"""Corrections end to end: ``stream-rater void`` / ``rerate`` as subprocesses against a
running worker on a real broker and Redis, while matches keep arriving. The oracle is a
replay of the football matches without the voided one (or with the new parameter)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
import redis

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.local.demo import default_data_file, football_events, stop_process

from streams import Stream, read_topic, replay_events

pytestmark = pytest.mark.e2e

MATCHES = 3000


def football(stream: Stream, n: int = MATCHES) -> list[dict]:
    """The first `n` football matches (home effect) on the stream's ladder."""
    events = []
    for event in football_events(default_data_file(), stream.ladder):
        events.append(event)
        if len(events) == n:
            return events
    return events


def correct(stream: Stream, command: str, *args: str, lease: float = 10.0) -> subprocess.CompletedProcess:
    """Run ``stream-rater <command>`` on the stream's ladder, topics and store."""
    return subprocess.run(
        [sys.executable, "-m", "stream_rater", command, *args, "--ladder", stream.ladder, "--json",
         "--store", stream.settings.redis_url, "--broker", stream.settings.broker, "--lease", str(lease),
         "--topic-matches", stream.settings.topic_matches, "--topic-updates", stream.settings.topic_updates],
        capture_output=True, text=True, timeout=300, env={**os.environ, **ladder_env(stream)},
    )


def ladder_env(stream: Stream) -> dict[str, str]:
    return {"STREAM_RATER_LADDER_" + stream.ladder.upper().replace("-", "_"): "trueskill"}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def publishing(stream: Stream, events: list[dict], rate: float) -> threading.Thread:
    """Publish `events` at `rate` per second in the background."""
    thread = threading.Thread(target=stream.publish, args=(events, rate))
    thread.start()
    return thread


def games(stream: Stream) -> int:
    return sum(s.games for s in stream.states().values())


def close(states: dict, expected: dict) -> None:
    """Every player's state equals the oracle's to 1e-9, and the same players are stored."""
    assert states.keys() == expected.keys()
    for player, state in states.items():
        want = expected[player]
        assert abs(state.mu - want.mu) <= 1e-9 and abs(state.sigma - want.sigma) <= 1e-9, player
        assert state.games == want.games, player


def corrections(stream: Stream, expected: int) -> list[dict]:
    """The correction events of the updates topic (waiting for `expected` of them)."""
    records = asyncio.run(read_topic(stream.settings, stream.settings.topic_updates, expected, 60,
                                     key=lambda r: json.loads(r.value)["event_id"] if b'"correction"' in r.value
                                     else None))
    return [json.loads(r.value) for r in records if json.loads(r.value).get("kind") == "correction"]


def test_void_while_the_stream_runs_equals_a_replay_without_the_match(stream_factory):
    """Void one football match while the worker rates more: the final states equal a replay
    of the file without it, and each player it changed got exactly one correction event whose
    `after` is the replay without it as of the switch."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    events = football(stream)
    stream.publish(events[:2000])
    wait_for(lambda: games(stream) >= 1500 * 2, "half the matches applied")
    rest = publishing(stream, events[2000:], rate=400)
    voided = events[100]["match_id"]
    done = correct(stream, "void", voided, "--reason", "fixed match")
    rest.join()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["voided"] == [voided] and report["blocked_seconds"] < 1.0

    kept = [e for e in events if e["match_id"] != voided]
    _, final = replay_events(stream, kept)
    wait_for(lambda: games(stream) == sum(s.games for s in final[stream.ladder].values()), "all matches applied")
    close(stream.states(), final[stream.ladder])
    verified = subprocess.run(
        [sys.executable, "-m", "stream_rater", "verify", "--ladder", stream.ladder, "--store", stream.settings.redis_url,
         "--broker", stream.settings.broker, "--topic-matches", stream.settings.topic_matches,
         "--consumer-group", stream.settings.consumer_group],
        capture_output=True, text=True, timeout=300, env={**os.environ, **ladder_env(stream)})
    assert verified.returncode == 0, verified.stdout + verified.stderr

    switch = report["positions"]["0"]
    _, with_it = replay_events(stream, events[:switch])
    _, without = replay_events(stream, [e for e in events[:switch] if e["match_id"] != voided])
    before, after = with_it[stream.ladder], without[stream.ladder]
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    sent = corrections(stream, len(changed))
    assert sorted(e["player_id"] for e in sent) == sorted(changed)
    for event in sent:
        want = after[event["player_id"]]
        assert abs(event["after"]["mu"] - want.mu) <= 1e-9 and abs(event["after"]["sigma"] - want.sigma) <= 1e-9
        assert event["correction"] == {"id": f"rerate:{report['generation']}", "reason": "fixed match",
                                       "voided": [voided], "unvoided": [], "params": {}}

    again = correct(stream, "void", voided, "--reason", "fixed match")
    assert again.returncode == 0 and json.loads(again.stdout)["nothing_to_do"]
    unknown = correct(stream, "void", "no-such-match", "--reason", "x")
    assert unknown.returncode == 2 and "no-such-match" in unknown.stderr and "Traceback" not in unknown.stderr


def test_rerate_with_a_new_beta_while_publishing_equals_a_replay_with_that_beta(stream_factory):
    """Re-rate with another β while matches keep arriving: everything published ends up rated
    as a replay with that β computes (the worker takes the new parameter at the switch)."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    events = football(stream, 2000)
    stream.publish(events[:1200])
    wait_for(lambda: games(stream) >= 800 * 2, "matches applied")
    rest = publishing(stream, events[1200:], rate=400)
    done = correct(stream, "rerate", "--param", "beta=2.5", "--reason", "season 2")
    rest.join()
    assert done.returncode == 0, done.stderr
    _, final = replay_events(stream, events, Ladders([Ladder(stream.ladder, "trueskill", {"beta": 2.5})]))
    wait_for(lambda: games(stream) == sum(s.games for s in final[stream.ladder].values()), "all matches applied")
    close(stream.states(), final[stream.ladder])


def test_a_killed_rerate_leaves_the_live_ladder_untouched_and_the_next_one_completes(stream_factory):
    """SIGKILL a re-rate after it took the lock and again in the middle of building: the
    live states are unchanged each time, a re-rate started meanwhile is refused with a clear
    message, and once the lock expired a new re-rate completes and equals the replay."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    events = football(stream)
    stream.publish(events)
    _, final = replay_events(stream, events)
    wait_for(lambda: games(stream) == sum(s.games for s in final[stream.ladder].values()), "all matches applied")
    live = stream.states()
    client = redis.Redis.from_url(stream.settings.redis_url)
    lock = f"sr:{{{stream.ladder}}}:lock"
    voided = events[10]["match_id"]
    command = [sys.executable, "-m", "stream_rater", "void", voided, "--reason", "r", "--ladder", stream.ladder,
               "--store", stream.settings.redis_url, "--broker", stream.settings.broker, "--lease", "2",
               "--batch-size", "50", "--topic-matches", stream.settings.topic_matches,
               "--topic-updates", stream.settings.topic_updates]
    env = {**os.environ, **ladder_env(stream)}
    for attempt, point in enumerate(["locked", "building"], start=1):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if point == "locked":
                wait_for(lambda: client.exists(lock), "the lock taken", 60)
            else:
                wait_for(lambda: client.hlen(f"sr:{{{stream.ladder}}}:g{attempt}:players") > 50 or process.poll() is not None,
                         "the staging generation half built", 60)
            assert process.poll() is None, "the re-rate finished before it could be killed"
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
        finally:
            stop_process(process)
        assert stream.states() == live
        refused = correct(stream, "void", voided, "--reason", "r", lease=2)
        assert refused.returncode == 1 and "a re-rate is already running" in refused.stderr
        assert "Traceback" not in refused.stderr
        wait_for(lambda: not client.exists(lock), "the lock to expire", 30)
        assert stream.states() == live
    done = correct(stream, "void", voided, "--reason", "r", lease=2)
    assert done.returncode == 0, done.stderr
    _, without = replay_events(stream, [e for e in events if e["match_id"] != voided])
    close(stream.states(), without[stream.ladder])
    leftover = [k for k in client.scan_iter(match=f"sr:{{{stream.ladder}}}:g*") if b":g3:" not in k]
    assert leftover == []
