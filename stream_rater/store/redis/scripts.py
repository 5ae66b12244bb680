"""The Lua scripts of the Redis store, their arguments and their replies.

The scripts receive every key they touch in KEYS (so they are valid on Redis Cluster and under
any proxy that routes by declared keys), and take everything else as one msgpack map of named
fields rather than thousands of arguments, to keep the worker's CPU per batch low (redis-py
encodes every argument and parses every reply item in Python). A script refuses with a status
that `stream_rater.store.status` turns into an exception. The read script answers with
one msgpack document that splices the stored values in unchanged, so one `msgpack.unpackb`
decodes the whole snapshot. The client caches each ladder's live generation; a script that
finds another one says so and the client retries with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from importlib.resources import files
from typing import Any

import msgpack

from stream_rater.store.stored_events import PACKER, pack_event, stored_event
from stream_rater.store.values import QUALITY_WINDOW, Commit, PlayerState, ReadRequest, Snapshot


def _script(name: str) -> str:
    """A Lua script of this package, after the msgpack helpers both scripts use."""
    lua = files("stream_rater.store.redis")
    return lua.joinpath("common.lua").read_text() + lua.joinpath(name).read_text()


READ_SCRIPT = _script("read.lua")
COMMIT_SCRIPT = _script("commit.lua")
CONTROL_SCRIPT = _script("control.lua")
BOARD_SCRIPT = _script("board.lua")
#: Most leaderboard entries one step of the board script reads: at about 2 µs each, a step
#: holds Redis for some 20 ms at most however large the ladder (bench leaderboard).
BOARD_STEP = 10_000
#: Entries one step of ``board.lua``'s 'totals' mode adds up: each step holds Redis for about
#: 2 µs per entry on an idle core (ZRANGE WITHSCORES), so a million-player sum never blocks
#: it for more than a few milliseconds at a time.
TOTALS_STEP = 2_000


def script_args(**fields: Any) -> bytes:
    """A script's argument: its named fields as one msgpack map, with raw strings because
    Redis's cmsgpack cannot read the bin type."""
    packed: bytes = msgpack.packb(fields, use_bin_type=False)
    return packed


def mode(generation: int | None) -> str:
    """A script's ``mode``: which generation its keys must be of (see ``common.lua``)."""
    return "live" if generation is None else "staging"


def commit_args(
    commit: Commit, keys: int, generation: int, marker_ttl: int, history_cap: int, now: float
) -> bytes:
    """The commit script's argument for `commit`, whose `keys` keys it passes (its fields are
    described in ``commit.lua``); `now` is the client's clock (seconds), for the markers'
    expiry."""
    ladder = commit.ladder
    ids, states, expected, is_effect, scores, active = zip(*commit.writes) if commit.writes else ((),) * 6
    # Each event is packed once, for its match's unproduced events and its history entry alike.
    packed = {id(e): pack_event(e, ladder) for events in commit.markers.values() for e in events}
    unproduced = [events for events in commit.markers.values() if events]
    history = [
        packed.get(id(e)) or pack_event(e, ladder) for entries in commit.history.values() for e in entries
    ]
    marker_ids = list(commit.markers)
    return script_args(
        keys=keys,
        generation=generation,
        mode=mode(commit.generation),
        ids=ids,
        is_effect=list(map(bool, is_effect)),
        expected=expected,
        watermark=commit.read_at[1]
        if commit.read_at is not None and commit.read_at[0] == generation
        else None,
        states=list(map(PlayerState.pack, states)),
        scores=[None if score is None else repr(float(score)) for score in scores],
        activity=list(active) if any(a is not None for a in active) else None,
        season=commit.season,
        marker_ids=marker_ids,
        placings=[PACKER.pack(commit.placings[m]) if m in commit.placings else "" for m in marker_ids],
        unproduced_at=[i for i, events in enumerate(commit.markers.values(), 1) if events],
        unproduced=[
            PACKER.pack_array_header(len(events)) + b"".join(packed[id(e)] for e in events)
            for events in unproduced
        ],
        produced=list(commit.produced),
        expiry=math.ceil(now + marker_ttl) if marker_ttl else None,
        expiring=msgpack.packb(marker_ids, use_bin_type=False) if marker_ttl else None,
        now=now,
        history_cap=history_cap,
        history_sizes=[len(v) for v in commit.history.values()],
        history=history,
        positions=dict(commit.positions),
        quality_add=[
            [x for name, value in add.items() for x in (name, repr(float(value)))]
            for add, _ in commit.quality.values()
        ],
        quality_window=[[PACKER.pack(s) for s in scores] for _, scores in commit.quality.values()],
        quality_cap=QUALITY_WINDOW,
    )


def snapshot(request: ReadRequest, generation: int, reply: bytes) -> Snapshot:
    """The `Snapshot` in the read script's answer to `request` (on `generation`)."""
    states, effect_states, markers, watermark, voids, params = msgpack.unpackb(reply, raw=False)
    make = PlayerState.of
    return Snapshot(
        players={i: make(s) for i, s in zip(request.player_ids, states) if s is not None},
        effects={i: make(s) for i, s in zip(request.effect_ids, effect_states) if s is not None},
        applied={
            m: [stored_event(e, request.ladder) for e in events]
            for m, events in zip(request.match_ids, markers)
            if events is not None
        },
        watermark=watermark or 0,
        generation=generation,
        voided=frozenset(m for m, v in zip(request.match_ids, voids or ()) if v is not None),
        params=params,
    )


def stored_states(ids: Iterable[str], values: Iterable[bytes | str | None]) -> dict[str, PlayerState]:
    """The states of `ids` from their HMGET `values`, leaving out the absent ones (None).
    Stored states are msgpack, which this store's clients answer as bytes."""
    return {i: PlayerState.unpack(raw) for i, raw in zip(ids, values) if isinstance(raw, bytes)}
