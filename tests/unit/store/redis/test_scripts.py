"""The Redis scripts and their Python side agree on names: every field a script reads is one
the client sends, and every status a script answers is in the one refusal table."""

from __future__ import annotations

import re
from importlib.resources import files

import msgpack
import pytest

from stream_rater.store.base import (
    Commit,
    CommitConflict,
    GenerationGone,
    LadderFrozen,
    LockLost,
    PlayerState,
    RerateRunning,
    StateWrite,
)
from stream_rater.store.redis.scripts import Buckets, commit_args
from stream_rater.store.status import REFUSALS, check_reply, refusal

SCRIPTS = ("common.lua", "commit.lua", "read.lua", "control.lua")


def _lua(name: str) -> str:
    return files("stream_rater.store.redis").joinpath(name).read_text()


def _fields_read(name: str) -> set[str]:
    """Fields a script (or the helper it calls) reads of its argument map ``args``."""
    return set(re.findall(r"\bargs\.(\w+)", _lua(name)))


def test_commit_script_reads_only_fields_the_client_packs() -> None:
    event = {"event_id": "m1:a"}
    commit = Commit(
        "L",
        [StateWrite("a", PlayerState(25.0, 8.0, 1, 1.0, 1), 0, False, 1.0)],
        {"m1": [event]},
        {"a": [event]},
        {0: 7},
    )
    # raw: packed states and events are msgpack inside, not UTF-8 text
    packed = {
        k.decode(): v
        for k, v in msgpack.unpackb(
            commit_args(commit, 12, 0, Buckets.of(commit, 1000.0, 60), 100),
            raw=True,
            strict_map_key=False,
        ).items()
    }
    assert _fields_read("commit.lua") | _fields_read("common.lua") == set(packed)
    assert packed["positions"] == {0: 7} and packed["unproduced_at"] == [1] and packed["mode"] == b"live"


def test_every_status_a_script_answers_is_ok_or_a_refusal() -> None:
    answered = {s for name in SCRIPTS for s in re.findall(r"return \{'(\w+)'", _lua(name))}
    assert answered - {"ok"} == set(REFUSALS)


@pytest.mark.parametrize(
    ("reply", "error", "text"),
    [
        ([b"applied", b"m1"], CommitConflict, "match 'm1' already applied"),
        ([b"conflict", b"p1"], CommitConflict, "state of 'p1' changed since it was read"),
        ([b"frozen"], LadderFrozen, "ladder 'L' is being switched"),
        ([b"generation", 3], CommitConflict, "switched it to generation 3"),
        ([b"gone", 2], GenerationGone, "generation 2 is no longer being built"),
        ([b"lost"], LockLost, "expired or was taken over"),
        ([b"moved"], CommitConflict, "moved on during the switch"),
        ([b"running", b"me", 1500], RerateRunning, r"\(me\); its lock expires in 1.5 s"),
    ],
)
def test_check_reply_raises_the_refusal(reply: list[object], error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        check_reply("L", reply)


def test_ok_passes_and_memory_store_details_build_the_same_exceptions() -> None:
    check_reply("L", [b"ok", 1, -1])
    running = refusal("running", "L", "other", 2000.0)  # as MemoryStore gives it: str, ms
    assert isinstance(running, RerateRunning) and running.seconds_left == 2.0
