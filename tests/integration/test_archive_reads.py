"""Reads from the archive: a player's history deeper than Redis's window, page by page, and a
match explained after its marker expired (with what happened, from the placings the archiver
keeps of the matches topic); without an archive (or with one down) the answers say how far
back they reach."""

from __future__ import annotations

import asyncio

import orjson
import psycopg
import pytest

from stream_rater.archive import (
    ArchiveReader,
    PoisonRecord,
    archived_event,
    archived_placings,
    migrate,
    write_batch,
)
from stream_rater.config.settings import Settings
from stream_rater.contracts import Limits, parse_match
from stream_rater.contracts.codecs import encode_event
from stream_rater.explain import UnknownMatch, explain_match
from stream_rater.kafka.produce import match_record
from stream_rater.processor import Processor
from stream_rater.queries import Queries, QueryError
from stream_rater.store.memory import MemoryStore
from stream_rater.waiting import wait_until_async
from tests import helpers
from tests.archive_support import metric, placings, records, running_archiver, send, wait_count
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


def wire_matches() -> list[dict]:
    """Duels of a and b (a draw among them), then a free-for-all of four teams (two tied, one
    with a player who is not rated), in wire form."""
    duels = [
        helpers.duel(f"d{i}", "a", "b", ranks=(1, 1) if i == 2 else (i % 2, 1 - i % 2), at=1e6 + i * 3600)
        for i in range(4)
    ]
    ffa = helpers.match("ffa", ["c", "d"], ["e"], ["f"], ["a"], ranks=(2, 1, 3, 3), at=1e6 + 5 * 3600)
    ffa["teams"][0]["players"].append({"id": "u", "rated": False})
    return [*duels, ffa]


def test_a_match_whose_marker_expired_has_the_actual_it_had_while_its_marker_lived(
    kafka_bootstrap, topic_factory, archive_url
):
    asyncio.run(
        _actual_from_the_archive(topic_factory(partitions=2), topic_factory(), kafka_bootstrap, archive_url)
    )


async def _actual_from_the_archive(updates: str, matches: str, kafka_bootstrap: str, url: str) -> None:
    settings = Settings(
        broker=f"kafka://{kafka_bootstrap}", topic_updates=updates, topic_matches=matches, session_timeout=3.0
    )
    wire = wire_matches()
    store = MemoryStore()
    result = await Processor(LADDERS, store, clock=fixed_clock).process(
        [parse_match(w, LADDERS) for w in wire]
    )
    invalid = [(matches, b"default", b"{not json", []), match_record(matches, {**wire[0], "ladder": "nope"})]
    sent = [match_record(matches, w) for w in wire]
    # every match twice (a publisher's retry), the invalid ones, and a last valid one to wait for
    await send(settings, [*sent[:-1], *sent[:-1], *invalid, sent[-1]])
    await send(settings, records(updates, result.events))
    before = metric("stream_rater_archive_invalid_matches_total")
    async with running_archiver(settings, url, "g-explain", ladders=LADDERS):
        await wait_count(url, len(result.events))
        await wait_until_async(
            lambda: _placed(url, len(wire)), f"the placings of {len(wire)} matches", 60.0, interval=0.1
        )
    assert metric("stream_rater_archive_invalid_matches_total") - before == 2
    rows = placings(url)
    assert sorted((ladder, mid) for ladder, mid, _ in rows) == sorted(
        ("default", w["match_id"]) for w in wire
    )
    assert {mid: p for _, mid, p in rows}["ffa"] == [["c", 2], ["d", 2], ["e", 1], ["f", 3], ["a", 3]]
    reader = ArchiveReader(url)
    try:
        for match_id in ("d0", "d1", "d2", "ffa"):
            live = await explain_match(store, LADDERS.get("default"), match_id, 100)
            old = await explain_match(MemoryStore(), LADDERS.get("default"), match_id, 100, reader)
            assert (live.pop("source"), old.pop("source")) == ("redis", "archive")
            assert old == live
            assert all(p["actual"] is not None for p in old["players"])
    finally:
        await reader.close()


async def _placed(url: str, expected: int) -> bool:
    return len(await asyncio.to_thread(placings, url)) == expected


async def test_placings_written_twice_are_kept_once_and_invalid_matches_are_refused(archive_url):
    wire = wire_matches()
    found = [
        archived_placings(orjson.dumps(w), LADDERS, Limits(), ("m", 0, i, None)) for i, w in enumerate(wire)
    ]
    season = {"match_id": "s1", "ladder": "default", "finished_at": 1e6, "kind": "season"}
    assert archived_placings(orjson.dumps(season), LADDERS, Limits(), ("m", 0, 9, None)) is None
    with pytest.raises(PoisonRecord, match="nope"):
        archived_placings(orjson.dumps({**wire[0], "ladder": "nope"}), LADDERS, Limits(), ("m", 0, 9, None))
    async with await psycopg.AsyncConnection.connect(archive_url) as conn:
        await migrate(conn)
        await write_batch(conn, [], [p for p in found if p])
        changed = [p for p in found if p]
        await write_batch(conn, [], [*changed, *changed])  # a redelivery, twice in one batch
    assert len(placings(archive_url)) == len(wire)
