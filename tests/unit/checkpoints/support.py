"""What the checkpoint unit tests share: ladders, a history, a replay, checkpoints of it."""

from __future__ import annotations

import random
from typing import Any

from stream_rater.checkpoints import Checkpoint, Replica
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel, match

LADDERS = Ladders(
    [Ladder("ts", "trueskill", {"leaderboard_min_games": 3}), Ladder("elo", "elo")], source="test"
)


def entries(ladder: str, n: int, seed: int = 7) -> list[tuple[Any, tuple[int, int]]]:
    """`n` matches of `ladder` among 20 players (a few 2-vs-2), at offsets 0..n-1 of partition 0."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = rng.sample([f"p{k}" for k in range(20)], 4)
        event = (
            match(f"m{i}", p[:2], p[2:], ladder=ladder)
            if i % 5 == 0
            else duel(f"m{i}", *p[:2], ladder=ladder)
        )
        event["finished_at"] = 1.7e9 + i
        out.append((parse_match(event, LADDERS), (0, i)))
    return out


async def replayed(history: list, ladder: str, voids: dict | None = None) -> MemoryStore:
    store = MemoryStore()
    if voids:
        await store.set_voids(ladder, voids, [], 0)
    await Processor(LADDERS, store).process([m for m, _ in history], [w for _, w in history])
    return store


def exact(states: dict) -> dict:
    return {p: tuple(s)[:4] + tuple(s)[5:] for p, s in states.items()}


async def checkpoint_at(history: list, ladder: str, upto: int, voids: dict | None = None) -> Checkpoint:
    replica = await Replica(LADDERS, ladder, voids=voids).open()
    await replica.apply(history[:upto])
    return await replica.checkpoint()
