"""Byte-identical outputs (issue #46): the golden replay (`tests.unit.perf.golden`) gives the
digest the code before the speed work gave, and the Redis store's commit argument of each of
its commits is the same whether built from the events' fields the planner handed over
(`Commit.event_fields`) or read back from the events themselves, and byte-identical to the one
the code before the speed work built (`ARGS_DIGEST`: the stored states, markers and histories)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import pytest

from stream_rater.store.base import Commit
from stream_rater.store.memory import MemoryStore
from stream_rater.store.redis.scripts import Buckets, commit_args
from tests.unit.perf.golden import DIGEST, golden_digest

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
            args.update(packed)
            checked.append(packed == commit_args(from_events, 0, 0, buckets, 2))
        return await commit_many(self, commits)

    monkeypatch.setattr(MemoryStore, "commit_many", checking)
    assert golden_digest() == DIGEST.read_text().strip()
    assert checked and all(checked)
    digest = args.hexdigest()
    assert digest == ARGS_DIGEST.read_text().strip()
    assert handed_over > 10_000  # the fields path was taken
