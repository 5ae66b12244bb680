"""``stream-rater bench capacity``: what one stored or produced item costs, measured — the
inputs of "Capacity" in stream_rater/bench/README.md.

The bundled football results (the demo ladder: TrueSkill with the home effect) are replayed
through the processor into a local Redis with the worker's default marker TTL and history cap,
each batch's events noted as produced the way the worker notes them (so the next commit
drops them). Then Redis's ``MEMORY USAGE … SAMPLES 0`` is asked of:

- the ``players:<b>`` buckets and the ``lb`` zset — per player state (usage less the history
  fields' bytes / players) and per leaderboard entry (usage / members). A small ladder has about one player per bucket, so its
  figure carries a key's overhead per player: a ten-million-player ladder's buckets hold about
  76 each (bench README "Capacity" measures that density too);
- the ``mk:<c>`` markers buckets — per match applied ("marker, produced") — and the
  ``unproduced`` hash, which holds the last batch's events until the ladder's next commit drops
  them — per match whose events are not yet produced, added to a marker's bytes ("marker,
  whole": what every match costs until its events are produced);
- the history fields of the players buckets — per history entry (their field and value
  bytes / entries);

and the Kafka bytes (key + value as produced, uncompressed, without the record batch framing)
of each match-finished record (`kafka.match_record`) and rating-changed record
(`kafka.update_record`). `project` scales the figures to a deployment.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from stream_rater.config.ladders import Ladders, load_ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts import parse_match
from stream_rater.kafka import match_record, update_record
from stream_rater.local.demo import (
    DEMO_LADDER,
    DEMO_LADDER_ENV,
    default_data_file,
    football_events,
)
from stream_rater.local.runtime import LocalRuntime
from stream_rater.offline.replay import replay
from stream_rater.processor import MatchResult, Processor
from stream_rater.store.redis import RedisStore, ladder_key
from stream_rater.store.redis.keys import HISTORY_MARK

DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Sizes:
    """Measured bytes per item, and what they were measured on."""

    matches: int
    events: int
    players: int
    state: float
    state_encoding: str
    marker_shrunk: float
    marker_whole: float
    history_entry: float
    history_encoding: str
    leaderboard_entry: float
    leaderboard_encoding: str
    match_record: float
    update_record: float
    used_per_match: float  # growth of Redis's used_memory per match (every key, whole markers too)

    @property
    def events_per_match(self) -> float:
        return self.events / self.matches


@dataclass(frozen=True, slots=True)
class Projection:
    """Redis memory and Kafka bytes of a deployment, from measured `Sizes`."""

    states: float
    leaderboard: float
    markers: float
    history: float
    history_window: float  # the history of the window's matches alone (below the cap)
    kafka_per_day: float

    @property
    def redis(self) -> float:
        return self.states + self.leaderboard + self.markers + self.history


def project(
    sizes: Sizes, players: int, matches_per_day: float, window_days: float, history_cap: int
) -> Projection:
    """Bytes for `players` rated players and `matches_per_day` with markers kept
    `window_days` (all of them shrunk; the last batch of each ladder is whole, negligible) and
    every player's history full at `history_cap` (the ceiling it reaches; `history_window`:
    only the window's matches, a young deployment's)."""
    entries = matches_per_day * window_days * sizes.events_per_match
    return Projection(
        states=players * sizes.state,
        leaderboard=players * sizes.leaderboard_entry,
        markers=matches_per_day * window_days * sizes.marker_shrunk,
        history=players * history_cap * sizes.history_entry,
        history_window=min(players * history_cap, entries) * sizes.history_entry,
        kafka_per_day=matches_per_day * (sizes.match_record + sizes.events_per_match * sizes.update_record),
    )


async def measure(
    redis_url: str,
    ladders: Ladders,
    events: Sequence[dict[str, Any]],
    *,
    settings: Settings | None = None,
    batch_size: int = 1000,
) -> Sizes:
    """Replay `events` (all of one ladder, new to the Redis at `redis_url`) with the marker
    TTL and history cap of `settings` (default: the worker's defaults) and measure."""
    settings = settings or Settings()
    matches = [parse_match(e, ladders) for e in events]
    ladder = matches[0].ladder
    store = RedisStore.from_url(
        redis_url, marker_ttl=settings.marker_ttl, history_limit=settings.history_limit
    )
    produced: list[int] = []

    def on_result(result: MatchResult) -> None:
        produced.extend(
            len(k or b"") + len(v) for _, k, v, _ in (update_record("u", e) for e in result.events)
        )

    client = store.client
    try:
        before = (await client.info("memory"))["used_memory"]
        await replay(matches, Processor(ladders, store), batch_size=batch_size, on_result=on_result)
        used = (await client.info("memory"))["used_memory"] - before
        prefix = ladder_key(ladder, "")
        kinds = {kind: await _kind_sizes(client, prefix, kind) for kind in ("players:", "mk:")}
        lb = await _kind_sizes(client, prefix, "lb")
        unproduced = await _kind_sizes(client, prefix, "unproduced")
        players = await store.players(ladder)
        h_bytes = await _history_bytes(client, prefix)
        entries = sum([len(await store.history(ladder, p, settings.history_limit)) for p in players])
    finally:
        await store.close()
    players_bytes, _, players_encoding = kinds["players:"]
    markers_bytes, markers, _ = kinds["mk:"]
    marker = markers_bytes / max(markers, 1)
    return Sizes(
        matches=len(matches),
        events=len(produced),
        players=len(players),
        state=(players_bytes - h_bytes) / len(players),
        state_encoding=players_encoding,
        marker_shrunk=marker,
        marker_whole=marker + unproduced[0] / max(unproduced[1], 1),
        history_entry=h_bytes / max(entries, 1),
        history_encoding=players_encoding,
        leaderboard_entry=lb[0] / lb[1],
        leaderboard_encoding=lb[2],
        match_record=_mean([len(r[1] or b"") + len(r[2]) for r in (match_record("m", e) for e in events)]),
        update_record=_mean(produced),
        used_per_match=used / len(matches),
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


async def _kind_sizes(client: Any, prefix: str, kind: str) -> tuple[int, int, str]:
    """Bytes (MEMORY USAGE, whole) of a ladder's keys of `kind` (``players:`` its buckets, or
    one key's suffix), how many fields or members they hold, and the first one's encoding."""
    keys = [
        k
        async for k in client.scan_iter(match=prefix + kind + ("*" if kind.endswith(":") else ""), count=1000)
    ]
    if kind == "players:":  # the buckets, not the season archives
        keys = [k for k in keys if k.rsplit(b":", 1)[-1].isdigit() and b":season:" not in k]
    if not keys:
        return 0, 0, "none"
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.memory_usage(key, samples=0)
            pipe.zcard(key) if kind == "lb" else pipe.hlen(key)
        pipe.object("encoding", keys[0])
        replies = list(await pipe.execute())
    return sum(replies[0:-1:2]), sum(replies[1:-1:2]), _text(replies[-1])


async def _history_bytes(client: Any, prefix: str) -> int:
    """The bytes of the history fields of a ladder's players buckets: field and value lengths
    (a listpack's per-entry overhead is a few bytes more)."""
    total = 0
    async for key in client.scan_iter(match=prefix + "players:*", count=1000):
        if b":season:" not in key:
            rows = await client.hgetall(key)
            total += sum(len(f) + len(v) for f, v in rows.items() if f.startswith(HISTORY_MARK))
    return total


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def run(players: int = 10_000_000, per_day: Sequence[float] = (1e6, 20e6), out: TextIO = sys.stdout) -> Sizes:
    """Measure on the football data and print the figures and their projection."""
    settings = Settings()
    events = list(football_events(default_data_file(), DEMO_LADDER))
    with LocalRuntime(broker=False) as runtime:
        sizes = asyncio.run(
            measure(runtime.redis_url, load_ladders(None, DEMO_LADDER_ENV), events, settings=settings)
        )
    window = settings.marker_ttl / DAY
    print(
        f"football: {sizes.matches:,} matches, {sizes.events:,} rating changes, {sizes.players} players; "
        f"marker TTL {window:g} days, history cap {settings.history_limit}",
        file=out,
    )
    print("Redis MEMORY USAGE (sampled):", file=out)
    for label, value, what in [
        ("player state", sizes.state, f"per field of the players:<b> buckets ({sizes.state_encoding})"),
        (
            "leaderboard entry",
            sizes.leaderboard_entry,
            f"per member of the lb zset ({sizes.leaderboard_encoding})",
        ),
        ("marker, produced", sizes.marker_shrunk, "per match in the mk:<slot> hashes"),
        (
            "marker, whole",
            sizes.marker_whole,
            "a marker and its events in the unproduced hash (until they are produced)",
        ),
        ("history entry", sizes.history_entry, f"per entry of the history fields ({sizes.history_encoding})"),
        ("used_memory", sizes.used_per_match, "growth per match, all keys (the last batch's markers whole)"),
    ]:
        print(f"  {label:<18} {value:8.1f} B  {what}", file=out)
    print("Kafka key + value bytes (JSON, uncompressed, before record-batch framing):", file=out)
    print(f"  {'match-finished':<18} {sizes.match_record:8.1f} B", file=out)
    print(
        f"  {'rating-changed':<18} {sizes.update_record:8.1f} B  ({sizes.events_per_match:.2f} per match)",
        file=out,
    )
    for rate in per_day:
        p = project(sizes, players, rate, window, settings.history_limit)
        print(
            f"{players:,} players, {rate:,.0f} matches/day: Redis {p.redis / 1e9:.1f} GB = states "
            f"{p.states / 1e9:.2f} + leaderboard {p.leaderboard / 1e9:.2f} + markers {p.markers / 1e9:.2f} + "
            f"history {p.history / 1e9:.1f} (the window's {p.history_window / 1e9:.1f}); Kafka {p.kafka_per_day / 1e9:.2f} GB/day per replica "
            f"({rate / DAY:,.0f} matches/s on average)",
            file=out,
        )
    return sizes
