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
import urllib.request

import pytest
import redis
from aiokafka import AIOKafkaProducer

from stream_rater.bench.chaos_verdict import broken_chains
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.kafka import bootstrap_servers
from stream_rater.local.demo import default_data_file, football_events, ladders_env, stop_process
from tests.e2e.streams import Stream, read_topic, replay_events, void_args
from tests.helpers import cli, wait_for

#: On the broker users run (Apache Kafka) only: the stream suite runs on both brokers, this one
#: would add minutes to CI for a second pass over Tansu, which only `demo` and `dev` use.
pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

MATCHES = 3000


def football(stream: Stream, n: int = MATCHES) -> list[dict]:
    """The first `n` football matches (home effect) on the stream's ladder."""
    events = []
    for event in football_events(default_data_file(), stream.ladder):
        events.append(event)
        if len(events) == n:
            return events
    return events


def correct(stream: Stream, command: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``stream-rater <command>`` on the stream's ladder, topics and store."""
    return cli(
        command,
        *args,
        "--ladder",
        stream.ladder,
        "--json",
        "--store",
        stream.settings.redis_url,
        "--broker",
        stream.settings.broker,
        "--topic-matches",
        stream.settings.topic_matches,
        "--topic-updates",
        stream.settings.topic_updates,
        "--topic-corrections",
        stream.settings.topic_corrections,
        env=ladder_env(stream),
        timeout=300,
    )


def ladder_env(stream: Stream) -> dict[str, str]:
    return ladders_env([stream.ladder])


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
    records = asyncio.run(
        read_topic(
            stream.settings,
            stream.settings.topic_updates,
            expected,
            60,
            key=lambda r: json.loads(r.value)["event_id"] if b'"correction"' in r.value else None,
        )
    )
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
    wait_for(
        lambda: games(stream) == sum(s.games for s in final[stream.ladder].values()), "all matches applied"
    )
    close(stream.states(), final[stream.ladder])
    verified = subprocess.run(
        [
            sys.executable,
            "-m",
            "stream_rater",
            "verify",
            "--ladder",
            stream.ladder,
            "--store",
            stream.settings.redis_url,
            "--broker",
            stream.settings.broker,
            "--topic-matches",
            stream.settings.topic_matches,
            "--consumer-group",
            stream.settings.consumer_group,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **ladder_env(stream)},
    )
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
        assert (
            abs(event["after"]["mu"] - want.mu) <= 1e-9 and abs(event["after"]["sigma"] - want.sigma) <= 1e-9
        )
        assert event["correction"] == {
            "id": f"rerate:{stream.ladder}:{report['generation']}",
            "reason": "fixed match",
            "voided": [voided],
            "unvoided": [],
            "params": {},
        }

    again = correct(stream, "void", voided, "--reason", "fixed match")
    assert again.returncode == 0 and json.loads(again.stdout)["nothing_to_do"]
    unknown = correct(stream, "void", "no-such-match", "--reason", "x")
    assert unknown.returncode == 2 and "no-such-match" in unknown.stderr and "Traceback" not in unknown.stderr


def test_rerate_with_a_new_beta_while_publishing_equals_a_replay_with_that_beta(stream_factory):
    """Re-rate with another β while matches keep arriving: everything published ends up rated
    as a replay with that β computes (the worker takes the new parameter at the switch), and on
    `rating-updates` every player's events chain, the correction event included, in log order."""
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
    wait_for(
        lambda: games(stream) == sum(s.games for s in final[stream.ladder].values()), "all matches applied"
    )
    close(stream.states(), final[stream.ladder])
    players, breaks = broken_chains(stream.updates(2 * len(events) + json.loads(done.stdout)["corrections"]))
    assert breaks == [] and players == len(final[stream.ladder])


def test_a_killed_rerate_leaves_the_live_ladder_untouched_and_the_next_one_completes(stream_factory):
    """SIGKILL a re-rate after it took the lock and again in the middle of building: the
    live states are unchanged each time, a re-rate started meanwhile is refused with a clear
    message, and once the lock expired a new re-rate completes and equals the replay."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    events = football(stream)
    stream.publish(events)
    _, final = replay_events(stream, events)
    wait_for(
        lambda: games(stream) == sum(s.games for s in final[stream.ladder].values()), "all matches applied"
    )
    live = stream.states()
    client = redis.Redis.from_url(stream.settings.redis_url)
    lock = f"sr:{{{stream.ladder}}}:lock"
    voided = events[10]["match_id"]
    # A lease long enough that the refused command below, a new process on a loaded machine,
    # surely finds the killed one's lock; its running out is then brought forward (PEXPIRE).
    command = [
        sys.executable,
        "-m",
        "stream_rater",
        *void_args(stream, voided),
        "--batch-size",
        "50",
        "--lease",
        "120",
    ]
    env = {**os.environ, **ladder_env(stream)}
    for attempt, point in enumerate(["locked", "building"], start=1):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if point == "locked":
                wait_for(lambda: client.exists(lock), "the lock taken", 60)
            else:
                wait_for(
                    lambda: (
                        len(client.keys(f"sr:{{{stream.ladder}}}:g{attempt}:players:*")) > 50  # noqa: B023
                        or process.poll() is not None  # noqa: B023
                    ),
                    "the staging generation half built",
                    60,
                )
            assert process.poll() is None, "the re-rate finished before it could be killed"
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
        finally:
            stop_process(process)
        assert stream.states() == live
        refused = correct(stream, "void", voided, "--reason", "r")
        assert refused.returncode == 1 and "a re-rate is already running" in refused.stderr
        assert "Traceback" not in refused.stderr
        client.pexpire(lock, 500)
        wait_for(lambda: not client.exists(lock), "the lock to expire", 30)
        assert stream.states() == live
    done = correct(stream, "void", voided, "--reason", "r")
    assert done.returncode == 0, done.stderr
    _, without = replay_events(stream, [e for e in events if e["match_id"] != voided])
    close(stream.states(), without[stream.ladder])
    leftover = [k for k in client.scan_iter(match=f"sr:{{{stream.ladder}}}:g*") if b":g3:" not in k]
    assert leftover == []


#: Runs the CLI with one store step patched to SIGKILL the process right after it: a crash at
#: an exact point of the re-rate, with nothing in the product built for the test.
KILLED_AFTER = """
import os, signal, sys
from stream_rater.cli import main
from stream_rater.store.redis import RedisStore
step = sys.argv[1]
original = getattr(RedisStore, step)
async def then_die(self, *args, **kwargs):
    await original(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
setattr(RedisStore, step, then_die)
sys.exit(main(sys.argv[2:]))
"""


def test_sigkill_inside_the_freeze_and_after_the_switch_loses_nothing(stream_factory):
    """SIGKILL right after the freeze: the live ladder is untouched and moves on once the
    freeze expires. SIGKILL right after the switch, before the correction events went out: the
    new generation is live and the worker rates on it once the freeze expires, and the next
    run of the command sends the stored events — each changed player gets exactly one."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    events = football(stream, 1500)
    stream.publish(events[:1000])
    wait_for(lambda: games(stream) == 2000, "the first matches applied")
    voided = events[10]["match_id"]
    args = void_args(stream, voided)
    env = {**os.environ, **ladder_env(stream)}
    client = redis.Redis.from_url(stream.settings.redis_url)

    live = stream.states()
    # Long leases (the last --lease counts), so that no renewal is missed on a loaded machine
    # and the freeze is surely there when looked at; its running out is then brought forward.
    freeze = [sys.executable, "-c", KILLED_AFTER, "freeze", *args, "--lease", "120"]
    killed = subprocess.run(freeze, env=env, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    frozen, lock = f"sr:{{{stream.ladder}}}:frozen", f"sr:{{{stream.ladder}}}:lock"
    assert stream.states() == live and client.exists(frozen)
    client.pexpire(frozen, 500)
    client.pexpire(lock, 500)
    stream.publish(events[1000:1200])
    wait_for(lambda: games(stream) == 2400, "the worker going on once the freeze expired", 60)

    switch = [sys.executable, "-c", KILLED_AFTER, "switch", *args, "--lease", "120"]
    killed = subprocess.run(switch, env=env, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    client.pexpire(frozen, 500)
    client.pexpire(lock, 500)
    _, without = replay_events(stream, [e for e in events[:1200] if e["match_id"] != voided])
    close(stream.states(), without[stream.ladder])
    stream.publish(events[1200:])
    _, final = replay_events(stream, [e for e in events if e["match_id"] != voided])
    wait_for(
        lambda: games(stream) == sum(s.games for s in final[stream.ladder].values()),
        "the worker rating on the new generation",
        60,
    )
    close(stream.states(), final[stream.ladder])

    _, with_it = replay_events(stream, events[:1200])
    changed = {p for p, state in with_it[stream.ladder].items() if without[stream.ladder].get(p) != state}
    wait_for(lambda: not client.exists(f"sr:{{{stream.ladder}}}:lock"), "the lock to expire", 30)
    again = correct(stream, "void", voided, "--reason", "r")
    assert again.returncode == 0, again.stderr
    sent = corrections(stream, len(changed))
    assert sorted(e["player_id"] for e in sent if e["correction"]["voided"] == [voided]) == sorted(changed)
    assert not client.exists(f"sr:{{{stream.ladder}}}:outbox")


def test_requests_on_the_corrections_topic_are_carried_out_by_the_worker(stream_factory):
    """Other systems correct through the corrections topic: a void request sent while matches
    arrive is carried out by the worker — final states equal a replay without the match,
    correction events are sent, the metrics count it — and requests it cannot carry out go to
    the dead-letter topic with the reason while the worker goes on."""
    stream = stream_factory(partitions=1)
    stream.start_worker()
    events = football(stream, 2000)
    stream.publish(events[:1500])
    wait_for(lambda: games(stream) >= 1200 * 2, "most of the first matches applied")
    ladder = stream.ladder
    bad = [
        b"not json",
        json.dumps({"kind": "void", "ladder": ladder, "match_ids": ["no-such-match"]}).encode(),
        json.dumps({"kind": "rerate", "ladder": ladder, "params": {"beta": "wide"}}).encode(),
    ]
    asyncio.run(send_raw(stream, bad))
    rest = publishing(stream, events[1500:], rate=400)
    voided = events[100]["match_id"]
    sent = correct(stream, "void", voided, "--reason", "via the topic", "--via-topic")
    rest.join()
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["match_ids"] == [voided]

    _, final = replay_events(stream, [e for e in events if e["match_id"] != voided])
    expected = final[ladder]
    wait_for(lambda: games(stream) == sum(s.games for s in expected.values()), "the void carried out")
    close(stream.states(), expected)
    assert all(e["correction"]["voided"] == [voided] for e in corrections(stream, 1))

    dead = asyncio.run(read_topic(stream.settings, stream.settings.topic_dlq, 3, 60, key=lambda r: r.offset))
    reasons = sorted(dict(r.headers)["sr-reason"].decode() for r in dead)
    assert reasons[0].startswith("correction request: not JSON or msgpack"), reasons
    assert reasons[1].startswith("match_ids: ") and "no-such-match" in reasons[1], reasons
    assert reasons[2].startswith("params: beta=wide"), reasons
    metrics = (
        urllib.request.urlopen(f"http://127.0.0.1:{stream.web_ports[0]}/metrics", timeout=10).read().decode()
    )
    assert 'stream_rater_corrections_total{kind="void",outcome="switched"} 1.0' in metrics
    assert f'stream_rater_matches_voided_total{{kind="void",ladder="{ladder}"}} 1.0' in metrics
    rejected = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("stream_rater_corrections_total{") and 'outcome="rejected"' in line
    )
    assert rejected == 3
    assert stream.workers[0].poll() is None


async def send_raw(stream: Stream, values: list[bytes]) -> None:
    """Publish raw records to the stream's corrections topic, as another system would."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers(stream.settings.broker))
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(stream.settings.topic_corrections, value, key=stream.ladder.encode())
    finally:
        await producer.stop()
