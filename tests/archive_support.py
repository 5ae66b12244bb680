"""Helpers of the archive tests: rating-changed events to publish, the archive's contents, and
an in-process archiver run as an asyncio task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from prometheus_client import REGISTRY

from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts.rating_changed import correction_changed, rating_changed
from stream_rater.kafka.produce import Record, send_records, update_record
from stream_rater.service.archiver import ArchiveOptions, Archiver
from stream_rater.waiting import wait_until_async


def events(ladder: str, matches: int, players: int = 6, start: int = 0) -> list[dict[str, Any]]:
    """`matches` duels' rating-changed events on `ladder` (two per match), players in turn; each
    player's events form a chain of made-up numbers (the archive does not judge them)."""
    out = []
    for m in range(start, start + matches):
        for side, p in enumerate((m % players, (m + 1) % players)):
            before, after = 1000.0 + m, 1000.0 + m + (1 if side == 0 else -1)
            out.append(
                rating_changed(
                    f"m{m}",
                    ladder,
                    f"p{p}",
                    "elo",
                    (before, None),
                    (after, None),
                    after,
                    m + 1,
                    f"2024-01-01T00:{m // 60 % 60:02d}:{m % 60:02d}Z",
                    "2024-06-01T00:00:00Z",
                )
            )
    return out


def correction(ladder: str, player: str, generation: int = 2) -> dict[str, Any]:
    """A correction event of `player` (kind correction, same topic)."""
    cause = {
        "id": f"rerate:{ladder}:{generation}",
        "reason": "test",
        "voided": ["m0"],
        "unvoided": [],
        "params": {},
    }
    return correction_changed(
        f"rerate:{ladder}:{generation}",
        ladder,
        player,
        "elo",
        (1.0, None),
        (2.0, None),
        2.0,
        1,
        "2024-07-01T00:00:00Z",
        cause,
    )


def records(topic: str, evs: Iterable[dict[str, Any]]) -> list[Record]:
    """The events as the workers send them (key ``<ladder>:<player>``)."""
    return [update_record(topic, e) for e in evs]


async def send(settings: Settings, recs: Iterable[Record]) -> None:
    """Produce `recs`; returns when the broker has them all."""
    await send_records(settings, recs)


def archived(url: str, ladder: str | None = None) -> list[tuple[str, str, str]]:
    """The archive's (ladder, kind, event_id) rows, of one ladder or all."""
    with psycopg.connect(url) as conn:
        where, params = ("WHERE ladder = %s", (ladder,)) if ladder else ("", ())
        return [
            tuple(r)
            for r in conn.execute(
                f"SELECT ladder, kind, event_id FROM rating_events {where}".encode(), params
            )
        ]  # type: ignore[misc]


def count(url: str) -> int:
    """Rows in ``rating_events`` (0 before the schema exists)."""
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("SELECT count(*) FROM rating_events").fetchone()
            return int(row[0]) if row else 0
    except psycopg.Error:
        return -1


def placings(url: str) -> list[tuple[str, str, Any]]:
    """The archive's (ladder, match_id, placings) rows."""
    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute("SELECT ladder, match_id, placings FROM match_placings")]  # type: ignore[misc]


def metric(name: str, **labels: str) -> float:
    """A sample of this process's registry (0 when absent)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def wait_count(url: str, expected: int, timeout: float = 60.0) -> None:
    """Wait until the archive holds `expected` rows."""
    seen = [0]

    async def reached() -> bool:
        seen[0] = await asyncio.to_thread(count, url)
        return seen[0] == expected

    await wait_until_async(
        reached, lambda: f"{expected} archived events (have {seen[0]})", timeout, interval=0.1
    )


@asynccontextmanager
async def running_archiver(
    settings: Settings, url: str, group: str, batch_size: int = 500, ladders: Ladders | None = None
) -> AsyncIterator[Archiver]:
    """An `Archiver` running as a task; stopped (and awaited) on the way out."""
    options = ArchiveOptions(group=group, batch_size=batch_size, max_backoff=0.5)
    archiver = Archiver(settings, url, options, ladders)
    task = asyncio.create_task(archiver.run())
    try:
        yield archiver
    finally:
        archiver.stop.set()
        await asyncio.wait_for(task, 30)
