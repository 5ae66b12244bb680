"""Builders the ladder-rules tests share: a one-ladder table, a duel on it, and a replay of
events through the processor on the in-memory store."""

from __future__ import annotations

from typing import Any

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.offline.replay import replay
from stream_rater.processor import MatchResult, Processor
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel

T0 = 1_700_000_000.0


def ladders(model: str = "elo", **params: Any) -> Ladders:
    return Ladders([Ladder("l", model, params)])


def match(match_id: str, first: str, second: str, at: float = T0, **fields: Any) -> dict[str, Any]:
    return {**duel(match_id, first, second, ladder="l", at=at), **fields}


async def run(
    table: Ladders, events: list[dict[str, Any]], store: MemoryStore | None = None, batch_size: int = 1000
):
    """Replay `events` into `store` (a new one by default); the store and every result."""
    store = store or MemoryStore()
    results: list[MatchResult] = []
    await replay(
        [parse_match(e, table) for e in events],
        Processor(table, store),
        batch_size=batch_size,
        on_result=results.append,
    )
    return store, results
