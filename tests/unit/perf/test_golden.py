"""Byte-identical outputs (issue #46): the golden replay (`tests.unit.perf.golden`) gives the
digest the code before the speed work gave, and the Redis store's commit argument of each of
its commits is the same whether built from the events' fields the planner handed over
(`Commit.event_fields`) or read back from the events themselves."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from stream_rater.store.base import Commit
from stream_rater.store.memory import MemoryStore
from stream_rater.store.redis.scripts import Buckets, commit_args
from tests.unit.perf.golden import DIGEST, golden_digest


def test_events_and_states_are_byte_identical_to_the_golden_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    commit_many = MemoryStore.commit_many
    checked: list[bool] = []
    handed_over = 0

    async def checking(self: MemoryStore, commits: Sequence[Commit]) -> Any:
        nonlocal handed_over
        for commit in commits:
            handed_over += len(commit.event_fields)
            buckets = Buckets.of(commit, 1_700_000_000.0, 3600.0)
            from_events = dataclasses.replace(commit, event_fields={})
            checked.append(
                commit_args(commit, 0, 0, buckets, 2) == commit_args(from_events, 0, 0, buckets, 2)
            )
        return await commit_many(self, commits)

    monkeypatch.setattr(MemoryStore, "commit_many", checking)
    assert golden_digest() == DIGEST.read_text().strip()
    assert checked and all(checked)
    assert handed_over > 10_000  # the fields path was taken
