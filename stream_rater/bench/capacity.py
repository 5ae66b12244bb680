"""``stream-rater bench capacity``: what a ladder costs Redis, measured on a real load and
projected — the figures of "Capacity" in stream_rater/bench/README.md.

A synthetic 1-vs-1 TrueSkill ladder with the rules that cost memory (newcomers not ranked yet,
ranking only the recently active) is applied through the processor to a local Redis started
for the run, in batches, each batch's events noted as produced the way the worker notes them.
The first matches pair every player once, so each of ``--load-players`` has a state; the rest
are random pairs. The store's clock is the matches' own: they are spread over simulated time
at the fastest ``--per-day`` rate, so the markers of the dedupe window expire as they would in
production. Then every key of the ladder is sized (``MEMORY USAGE … SAMPLES 0`` and its entry
count) and `capacity_model` fits each kind's cost per key and per entry, scaled by Redis's
keyspace memory growth over the keys' sum, and projects it to ``--players`` and each
``--per-day`` (markers alive = matches/day × the marker window). Kafka bytes are the produced
key + value of each match-finished and rating-changed record, uncompressed.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from stream_rater.bench.capacity_model import KeySample, KindSizes, kind_of, kinds
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.rules.newcomers import Newcomers
from stream_rater.config.settings import Settings
from stream_rater.contracts import parse_match
from stream_rater.kafka import match_record, update_record
from stream_rater.local.runtime import LocalRuntime
from stream_rater.processor import Processor
from stream_rater.store.redis import RedisStore, ladder_key
from stream_rater.store.redis.keys import HISTORY_MARK

DAY = 86_400.0
LADDER = "capacity"
#: The newcomers rule of the bench ladder: a player is flagged (in every event) and not
#: ranked for their first 3 rated games.
NEWCOMERS = Newcomers(3)
#: The bench ladder: TrueSkill with the rules whose keys cost memory (`config.rules`).
LADDER_PARAMS = {**NEWCOMERS.params, "leaderboard_active_days": 30.0}
#: Matches per batch (the worker's default batch ceiling).
BATCH = 2000
#: Epoch seconds of the first synthetic match.
START = 1_700_000_000.0


@dataclass(frozen=True, slots=True)
class Load:
    """What was loaded: players, matches, seconds taken, Redis's `keyspace_memory` growth, and
    the Kafka bytes of the first `sampled` matches' records (match-finished, rating-changed)."""

    players: int
    matches: int
    seconds: float
    keyspace_memory: int
    sampled: int = 0
    match_bytes: int = 0
    events: int = 0
    event_bytes: int = 0


#: Matches whose Kafka records are sized (their bytes per record vary little).
SAMPLED_RECORDS = 20_000


def _synthetic(players: int, matches: int, seconds_apart: float, seed: int) -> Iterator[dict[str, Any]]:
    """1-vs-1 matches: the first ``players // 2`` pair every player once, then random pairs."""
    rng = random.Random(seed)
    for i in range(matches):
        if 2 * i + 1 < players:
            a, b = 2 * i, 2 * i + 1
        else:
            a, b = rng.sample(range(players), 2)
        yield {
            "match_id": f"c{i}",
            "ladder": LADDER,
            "finished_at": START + i * seconds_apart,
            "teams": [{"rank": 1, "players": [{"id": f"p{a}"}]}, {"rank": 2, "players": [{"id": f"p{b}"}]}],
        }


def _batches(players: int, matches: int, per_day: float, size: int) -> Iterator[list[dict[str, Any]]]:
    """The synthetic matches in batches of `size`, spread over simulated time at `per_day`."""
    batch: list[dict[str, Any]] = []
    for event in _synthetic(players, matches, DAY / per_day, 0):
        batch.append(event)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def ladders() -> Ladders:
    """The bench's one ladder."""
    return Ladders([Ladder(LADDER, "trueskill", LADDER_PARAMS)])


async def load(
    redis_url: str,
    players: int,
    matches: int,
    per_day: float,
    settings: Settings,
    batch_size: int = BATCH,
) -> Load:
    """Apply the synthetic load to the (empty) ladder of the Redis at `redis_url`, in batches
    of `batch_size` (few enough that a player is rarely twice in one, as on a big ladder)."""
    table, now = ladders(), [START]
    store = RedisStore.from_url(
        redis_url,
        marker_ttl=settings.marker_ttl,
        history_limit=settings.redis_history(),
        clock=lambda: now[0],
        prefix=settings.redis_prefix,
    )
    processor = Processor(table, store, clock=lambda: now[0])
    sizes = [0, 0, 0, 0]  # sampled matches, their bytes, their events, their bytes
    started, offset = time.perf_counter(), 0
    try:
        before = await keyspace_memory(store.client)
        for batch in _batches(players, matches, per_day, batch_size):
            now[0] = batch[-1]["finished_at"]
            parsed = [parse_match(e, table) for e in batch]
            result = await processor.process(parsed, [(0, offset + i) for i in range(len(batch))])
            processor.produced(result)
            offset += len(batch)
            if sizes[0] < SAMPLED_RECORDS:
                _size_records(sizes, batch, result.events)
        used = await keyspace_memory(store.client) - before
    finally:
        await store.close()
    return Load(players, matches, time.perf_counter() - started, used, *sizes)


async def keyspace_memory(client: Any) -> int:
    """Bytes Redis holds for its keys: ``MEMORY STATS``'s dataset plus each database's hash
    tables — ``used_memory`` less what does not grow with keys (clients' query and reply buffers,
    whose size depends on when Redis last trimmed them; scripts; the startup allocation)."""
    stats = await client.memory_stats()
    tables = sum(
        v
        for db, fields in stats.items()
        if str(db).startswith("db.")
        for k, v in fields.items()
        if str(k).startswith("overhead.hashtable")
    )
    return int(stats["dataset.bytes"]) + int(tables)


def _size_records(sizes: list[int], batch: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
    """Add `batch`'s match-finished records and `events`' rating-changed records to `sizes`."""
    sizes[0] += len(batch)
    sizes[1] += sum(len(r[1] or b"") + len(r[2]) for r in (match_record("m", e) for e in batch))
    sizes[2] += len(events)
    sizes[3] += sum(len(k or b"") + len(v) for _, k, v, _ in (update_record("u", e) for e in events))


async def sample_keys(redis_url: str, prefix: str = Settings.redis_prefix) -> list[KeySample]:
    """Every key of the bench ladder: its suffix, ``MEMORY USAGE`` and entry count."""
    store = RedisStore.from_url(redis_url, prefix=prefix)
    client, head = store.client, ladder_key(LADDER, "", prefix)
    try:
        keys = [k async for k in client.scan_iter(match=head + "*", count=5000)]
        samples: list[KeySample] = []
        for start in range(0, len(keys), 5000):
            chunk = keys[start : start + 5000]
            async with client.pipeline(transaction=False) as pipe:
                for key in chunk:
                    pipe.memory_usage(key, samples=0)
                    pipe.type(key)
                usage_types = await pipe.execute()
            async with client.pipeline(transaction=False) as pipe:
                for key, kind in zip(chunk, usage_types[1::2]):
                    _length(pipe, key, kind.decode() if isinstance(kind, bytes) else kind)
                lengths = await pipe.execute()
            samples += [
                KeySample(key.decode()[len(head) :], usage or 0, length or 0)
                for key, usage, length in zip(chunk, usage_types[0::2], lengths)
            ]
    finally:
        await store.close()
    return samples


def _length(pipe: Any, key: bytes, kind: str) -> None:
    """Queue the command that counts `key`'s entries (fields, members, items; 1 for a string)."""
    {"hash": pipe.hlen, "zset": pipe.zcard, "list": pipe.llen, "set": pipe.scard, "string": pipe.exists}.get(
        kind, pipe.exists
    )(key)


#: Bytes a listpack spends on an element besides its own (the encoding header and back-length).
LISTPACK_ELEMENT = 3


async def history_share(redis_url: str, prefix: str, buckets: Sequence[str], sample: int = 2000) -> float:
    """The share of the players buckets' bytes that is history (fields ``HISTORY_MARK…``), from
    the field and value bytes of `sample` of `buckets` (key suffixes)."""
    store = RedisStore.from_url(redis_url, prefix=prefix)
    chosen = random.Random(0).sample(list(buckets), min(sample, len(buckets)))
    history = total = 0
    try:
        async with store.client.pipeline(transaction=False) as pipe:
            for suffix in chosen:
                pipe.hgetall(ladder_key(LADDER, suffix, prefix))
            for fields in await pipe.execute():
                for name, value in fields.items():
                    size = len(name) + len(value) + 2 * LISTPACK_ELEMENT
                    total += size
                    history += size if name.startswith(HISTORY_MARK) else 0
    finally:
        await store.close()
    return history / total if total else 0.0


@dataclass(frozen=True, slots=True)
class Measured:
    """A load, its keys' sizes, and the share of the players buckets that is history."""

    load: Load
    sizes: KindSizes
    history: float = 0.0


async def measure(
    redis_url: str, players: int, matches: int, per_day: float, settings: Settings, batch_size: int = BATCH
) -> Measured:
    """Load, then size the keys; markers alive are the entries of the ``mk`` kind."""
    done = await load(redis_url, players, matches, per_day, settings, batch_size)
    samples = await sample_keys(redis_url, settings.redis_prefix)
    found = kinds(samples)
    markers = sum(k.entries for k in found if k.name == "mk") or 1
    total = sum(s.usage for s in samples)
    buckets = [s.suffix for s in samples if kind_of(s.suffix)[0] == "players"]
    share = await history_share(redis_url, settings.redis_prefix, buckets)
    sizes = KindSizes(found, players, markers, done.keyspace_memory / total if total else 1.0)
    return Measured(done, sizes, share)


def projection(measured: Measured, players: int, per_day: float, settings: Settings) -> dict[str, Any]:
    """Redis bytes per replica for `players` and `per_day` (markers alive over the window),
    and Kafka bytes per day, from `measured`."""
    alive = per_day * settings.marker_ttl / DAY if settings.marker_ttl else per_day * 365
    kinds_bytes = measured.sizes.project(players, alive)
    history = kinds_bytes.get("players", 0.0) * measured.history
    kinds_bytes["players"] = kinds_bytes.get("players", 0.0) - history
    load = measured.load
    return {
        "players": players,
        "per_day": per_day,
        "markers_alive": alive,
        "redis_bytes": sum(kinds_bytes.values()),
        "redis_bytes_without_archive": sum(kinds_bytes.values()) + history,
        "kinds": {**kinds_bytes, "history (without an archive)": history},
        "kafka_bytes_per_day": per_day * (load.match_bytes + load.event_bytes) / max(load.sampled, 1),
    }


def report(measured: Measured, players: int, per_day: Sequence[float], settings: Settings) -> dict[str, Any]:
    """The bench's JSON document."""
    load, sizes = measured.load, measured.sizes
    items = {
        "player": sizes.per_item("players"),
        "marker": sizes.per_item("markers"),
        "match_record": load.match_bytes / max(load.sampled, 1),
        "rating_changed_record": load.event_bytes / max(load.events, 1),
        **{
            f"kind:{k.name}": {
                "per_key": k.per_key,
                "per_entry": k.per_entry,
                "keys": k.keys,
                "entries": k.entries,
            }
            for k in sizes.kinds
        },
    }
    projections = [projection(measured, players, rate, settings) for rate in per_day]
    return {
        "measured_players": load.players,
        "measured_matches": load.matches,
        "load_seconds": load.seconds,
        "keyspace_memory": load.keyspace_memory,
        "marker_ttl": settings.marker_ttl,
        "history_limit": settings.redis_history(),
        "history_share": measured.history,
        "items": items,
        "projections": projections,
        "redis_bytes": max(p["redis_bytes"] for p in projections),
    }


def _print(doc: dict[str, Any], out: TextIO) -> None:
    """The report as text."""
    items = doc["items"]
    print(
        f"loaded {doc['measured_players']:,} players, {doc['measured_matches']:,} matches in "
        f"{doc['load_seconds']:.0f} s: the keyspace grew {doc['keyspace_memory'] / 1e6:,.1f} MB; marker window "
        f"{doc['marker_ttl']:g} s, history {doc['history_limit']} changes per player",
        file=out,
    )
    print(
        f"per player {items['player']:.1f} B, per marker {items['marker']:.1f} B; Kafka per match-finished "
        f"{items['match_record']:.1f} B, per rating-changed {items['rating_changed_record']:.1f} B",
        file=out,
    )
    for name, k in items.items():
        if name.startswith("kind:"):
            print(
                f"  {name[5:]:<12} {k['keys']:>9,} keys {k['entries']:>11,} entries  "
                f"{k['per_key']:7.1f} B/key {k['per_entry']:7.1f} B/entry",
                file=out,
            )
    for p in doc["projections"]:
        parts = " + ".join(f"{name} {b / 1e9:.2f}" for name, b in sorted(p["kinds"].items()) if b >= 1e6)
        print(
            f"{p['players']:,} players, {p['per_day']:,.0f} matches/day: Redis {p['redis_bytes'] / 1e9:.2f} GB "
            f"per replica with an archive, {p['redis_bytes_without_archive'] / 1e9:.2f} GB without "
            f"({parts}); Kafka {p['kafka_bytes_per_day'] / 1e9:.2f} GB/day per replica",
            file=out,
        )


def run(
    players: int = 10_000_000,
    per_day: Sequence[float] = (1e6, 20e6),
    load_players: int = 1_000_000,
    load_matches: int = 10_000_000,
    as_json: bool = False,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    """Measure on a local Redis started (and stopped) for the run; print the figures."""
    settings = Settings.from_env()
    with LocalRuntime(broker=False) as runtime:
        measured = asyncio.run(measure(runtime.redis_url, load_players, load_matches, max(per_day), settings))
    doc = report(measured, players, per_day, settings)
    if as_json:
        print(json.dumps(doc, indent=2), file=out)
    else:
        _print(doc, out)
    return doc
