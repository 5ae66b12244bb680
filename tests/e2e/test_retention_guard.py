"""The log loses its head: once ``delete_records`` (as retention does) removed the first
records of the matches topic, ``void`` and ``replay --from-topic`` refuse in one line naming
the ladder and the first offset left, and change nothing (a worker dead-letters a void request
with that reason); ``verify`` says it checked only a tail; with ``--history`` holding the
deleted matches they do what they would have done on the whole log. Oracle: a replay of the
published matches."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from stream_rater.local.demo import ladders_env
from tests.e2e.e2e_support import delete_head
from tests.e2e.streams import Stream, exact, read_topic, replay_events, void_args
from tests.helpers import cli, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

MATCHES = 300
DELETED = 120


def duels(stream: Stream) -> list[dict]:
    """`MATCHES` 1-vs-1 matches among 30 players, one second apart."""
    rng = random.Random(33)
    players = [f"p{i}" for i in range(30)]
    return [stream.match(f"m{i}", *rng.sample(players, 2), at=1.7e9 + i) for i in range(MATCHES)]


def refused(result, command: str, stream: Stream) -> None:
    """`result` failed with exit 1 and the one line naming the ladder and the first offset left."""
    expected = (
        f"stream-rater {command}: ladder {stream.ladder!r}: partition 0 of topic "
        f"{stream.settings.topic_matches!r} starts at offset {DELETED}; offsets 0..{DELETED - 1} were "
        "deleted (retention?); give the rest with --history FILE"
    )
    assert (result.returncode, result.stderr.strip()) == (1, expected), result.stderr


def via_topic(stream: Stream, match_id: str) -> list[str]:
    """``stream-rater void --via-topic`` arguments: a request for the stream's worker."""
    return [
        *("void", match_id, "--reason", "r", "--ladder", stream.ladder, "--via-topic"),
        *("--broker", stream.settings.broker, "--topic-corrections", stream.settings.topic_corrections),
    ]


def changes(path: Path) -> list[tuple[str, float, float | None]]:
    """The rating changes of a ``replay --out`` file (or events), without their processing time."""
    return [(e["event_id"], e["after"]["mu"], e["after"]["sigma"]) for e in map(json.loads, path.open())]


def test_void_and_replay_refuse_a_topic_without_its_head_unless_history_supplies_it(
    stream_factory, tmp_path: Path
):
    stream = stream_factory(partitions=1)
    stream.start_worker()
    events = duels(stream)
    stream.publish(events)
    wait_for(lambda: stream.applied() == MATCHES, "every match applied")
    _, whole = replay_events(stream, events)
    asyncio.run(delete_head(stream.settings, stream.ladder, DELETED))
    env = ladders_env([stream.ladder])
    history = tmp_path / "deleted.jsonl"
    history.write_text("".join(json.dumps(e) + "\n" for e in events[:DELETED]))
    voided = events[200]["match_id"]

    refused(cli(*void_args(stream, voided), env=env), "void", stream)
    requested = cli(*via_topic(stream, voided), env=env)
    assert requested.returncode == 0, requested.stderr
    dead = asyncio.run(read_topic(stream.settings, stream.settings.topic_dlq, 1, 60, key=lambda r: r.offset))
    reason = dict(dead[0].headers)["sr-reason"].decode()
    assert reason.startswith(f"history: ladder {stream.ladder!r}: partition 0 of topic "), reason
    assert exact(stream.all_states()) == exact(whole), "a refused void changed the live ladder"

    topic = ("--broker", stream.settings.broker, "--topic-matches", stream.settings.topic_matches)
    group = ("--consumer-group", stream.settings.consumer_group)
    verified = cli(
        "verify", "--ladder", stream.ladder, "--store", stream.settings.redis_url, *topic, *group, env=env
    )
    assert verified.returncode == 1 and "only a tail of its history was checked" in verified.stdout
    assert f"starts at offset {DELETED}; offsets 0..{DELETED - 1} were deleted" in verified.stdout

    out = tmp_path / "replayed.jsonl"
    replay = ("replay", "--from-topic", "--ladder", stream.ladder, *topic, "--out", str(out))
    refused(cli(*replay, env=env), "replay", stream)
    assert not out.exists()
    rebuilt = cli(*replay, "--history", str(history), env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    expected, _ = replay_events(stream, events)
    assert changes(out) == [(e["event_id"], e["after"]["mu"], e["after"]["sigma"]) for e in expected]

    done = cli(*void_args(stream, voided), "--history", str(history), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["voided"] == [voided]
    _, without = replay_events(stream, [e for e in events if e["match_id"] != voided])
    assert exact(stream.all_states()) == exact(without)
