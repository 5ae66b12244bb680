"""Reads from the archive: a player's history deeper than Redis's window, page by page, and a
match explained after its marker expired; without an archive (or with one down) the answers
say how far back they reach."""

from __future__ import annotations

import psycopg
import pytest

from stream_rater.archive import ArchiveReader, archived_event, migrate, write_batch
from stream_rater.contracts.codecs import encode_event
from stream_rater.explain import UnknownMatch, explain_match
from stream_rater.processor import Processor
from stream_rater.queries import Queries, QueryError
from stream_rater.store.memory import MemoryStore
from tests.unit.processing import LADDERS, fixed_clock, match

MATCHES = 30


async def rated() -> tuple[MemoryStore, list[dict]]:
    """A store after MATCHES duels of a and b (b wins every third) and their events, in order."""
    store = MemoryStore()
    matches = [
        match(f"m{i}", *((["b"], ["a"]) if i % 3 == 0 else (["a"], ["b"])), at=1_000_000.0 + i * 3600)
        for i in range(MATCHES)
    ]
    result = await Processor(LADDERS, store, clock=fixed_clock).process(matches)
    return store, result.events


async def archive(url: str, events: list[dict]) -> ArchiveReader:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await migrate(conn)
        await write_batch(
            conn, [archived_event(encode_event(e), "updates", 0, i) for i, e in enumerate(events)]
        )
    return ArchiveReader(url)


async def test_a_history_deeper_than_redis_is_served_from_the_archive_page_by_page(archive_url):
    store, events = await rated()
    reader = await archive(archive_url, events)
    try:
        queries = Queries(store, LADDERS, history_limit=5, archive=reader)
        pages, before = [], None
        while True:
            page = await queries.history("default", "a", limit=12, before=before)
            assert page["source"] == "archive" and page["state"] is not None
            pages.append(page)
            before = page["next_before"]
            if before is None:
                break
        assert [len(p["history"]) for p in pages] == [12, 12, 6]
        assert [p["complete"] for p in pages] == [False, False, True]
        mine = [e for e in events if e["player_id"] == "a"]
        assert [e for p in pages for e in p["history"]] == mine[::-1]
        assert pages[-1]["oldest"] == mine[0]["finished_at"]
        redis_only = await Queries(store, LADDERS, history_limit=5).history("default", "a", limit=50)
        assert (redis_only["source"], len(redis_only["history"]), redis_only["complete"]) == (
            "redis",
            5,
            False,
        )
        assert redis_only["history"] == mine[::-1][:5]
        with pytest.raises(QueryError, match="before: pages only the archive"):
            await Queries(store, LADDERS, history_limit=5).history("default", "a", before=3)
    finally:
        await reader.close()


async def test_a_match_whose_marker_expired_is_explained_from_the_archive(archive_url):
    store, events = await rated()
    reader = await archive(archive_url, events)
    expired = MemoryStore()  # the same ladder once the markers are gone
    try:
        live = await explain_match(store, LADDERS.get("default"), "m4", 100)
        old = await explain_match(expired, LADDERS.get("default"), "m4", 100, reader)
        assert (live["source"], old["source"]) == ("redis", "archive")
        for then, now in zip(live["players"], old["players"]):
            assert {k: v for k, v in then.items() if k != "actual"} == {
                k: v for k, v in now.items() if k != "actual"
            }
            assert now["actual"] is None
        with pytest.raises(UnknownMatch, match="neither in Redis nor in the archive"):
            await explain_match(expired, LADDERS.get("default"), "m999", 100, reader)
        with pytest.raises(UnknownMatch, match=r"STREAM_RATER_MARKER_TTL.*no archive is configured"):
            await explain_match(expired, LADDERS.get("default"), "m4", 100)
        shallow = await explain_match(
            store, LADDERS.get("default"), "m1", 2, reader
        )  # gone from Redis's history
        assert all(p["found"] for p in shallow["players"])
        assert not any(
            p["found"] for p in (await explain_match(store, LADDERS.get("default"), "m1", 2))["players"]
        )
    finally:
        await reader.close()


async def test_an_archive_that_does_not_answer_leaves_the_history_to_redis_and_says_so():
    store, _ = await rated()
    down = ArchiveReader("postgresql://postgres@127.0.0.1:1/none", connect_timeout=1)
    answer = await Queries(store, LADDERS, history_limit=5, archive=down).history("default", "a")
    assert (answer["source"], len(answer["history"]), answer["archive_error"]) == (
        "redis",
        5,
        "the archive did not answer",
    )
