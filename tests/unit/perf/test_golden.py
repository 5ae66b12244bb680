"""Byte-identical outputs (issue #46): the golden replay (`tests.unit.perf.golden`) gives the
digest the code before the speed work gave, and the Redis store's commit argument of each of
its commits is the same whether built from the events' fields the planner handed over
(`Commit.event_fields`) or read back from the events themselves, and byte-identical to the one
the code before the speed work built (`ARGS_DIGEST`: the stored states, markers and histories),
once put back in the one map it was then (`_one_map`: the stored values now travel as
arguments of their own, the same bytes)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Sequence
from typing import Any

import msgpack
import pytest

from stream_rater.store.base import Commit
from stream_rater.store.memory import MemoryStore
from stream_rater.store.redis.scripts import Buckets, commit_args
from tests.unit.perf.golden import DIGEST, golden_digest


def _one_map(args: list[bytes | str]) -> bytes:
    """The commit argument as one map, as it was before the stored values became arguments of
    their own (``commit.lua``): the map's fields with the values put back in their old places."""
    fields = msgpack.unpackb(args[0], raw=True, strict_map_key=False)
    values = iter(args[1:])

    def take(n: int) -> list[Any]:
        return [v.encode() if isinstance(v, str) else v for v in itertools.islice(values, n)]

    states, history = take(len(fields[b"ids"])), take(len(fields[b"history_fields"]))
    markers, unproduced = take(2 * fields[b"markers"]), take(2 * fields[b"unproduced"])
    marker_ids = markers[::2]
    old = {
        b"is_effect": [b == 0 for b in fields[b"bucket"]],
        b"expected": msgpack.unpackb(fields[b"expected"]),
        b"states": states,
        b"marker_ids": marker_ids,
        b"markers": markers[1::2],
        b"unproduced_at": [marker_ids.index(m) + 1 for m in unproduced[::2]],
        b"unproduced": unproduced[1::2],
        b"produced": take(fields[b"produced"]),
        b"quality_window": [take(n) for n in fields[b"quality_window"]],
        b"history": history,
    }
    order = [b"keys", b"generation", b"mode", b"ids", b"is_effect", b"bucket", b"expected", b"watermark"]
    order += [b"states", b"scores", b"activity", b"season", b"buckets", b"history_bucket", b"with_history"]
    order += [b"marker_ids", b"markers", b"slot", b"slot_ttl", b"unproduced_at", b"unproduced", b"produced"]
    order += [b"history_fields", b"history", b"model", b"positions", b"quality_add", b"quality_window"]
    order += [b"quality_cap", b"trim_since"]
    boards = [k for k in fields if k not in order and k not in (b"values", b"unproduced")]
    packed: bytes = msgpack.packb(
        {k: old[k] if k in old else fields[k] for k in order + boards}, use_bin_type=False
    )
    return packed


#: sha256 of every commit argument of the golden replay, in order (`produced` sorted), as the code before the speed work built them.
ARGS_DIGEST = DIGEST.with_name("commit_args.sha256")


def test_events_and_states_are_byte_identical_to_the_golden_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    commit_many = MemoryStore.commit_many
    checked: list[bool] = []
    handed_over = 0
    args = hashlib.sha256()

    async def checking(self: MemoryStore, commits: Sequence[Commit]) -> Any:
        nonlocal handed_over
        for commit in commits:
            handed_over += len(commit.event_fields)
            buckets = Buckets.of(commit, 1_700_000_000.0, 3600.0)
            commit = dataclasses.replace(commit, produced=sorted(commit.produced))  # a set: hash-ordered
            from_events = dataclasses.replace(commit, event_fields={})
            packed = commit_args(commit, 0, 0, buckets, 2)
            args.update(_one_map(packed))
            checked.append(packed == commit_args(from_events, 0, 0, buckets, 2))
        return await commit_many(self, commits)

    monkeypatch.setattr(MemoryStore, "commit_many", checking)
    assert golden_digest() == DIGEST.read_text().strip()
    assert checked and all(checked)
    digest = args.hexdigest()
    assert digest == ARGS_DIGEST.read_text().strip()
    assert handed_over > 10_000  # the fields path was taken
