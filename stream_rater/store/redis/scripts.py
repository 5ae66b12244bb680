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

from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import msgpack

from stream_rater.store.redis.keys import bucket, grouped, history_chunk, history_slot, marker_slots
from stream_rater.store.stored_events import PACKER, StoredForms, stored_event
from stream_rater.store.values import QUALITY_WINDOW, Commit, PlayerState, ReadRequest, Snapshot


def _script(name: str, *helpers: str) -> str:
    """A Lua script of this package, after the msgpack helpers every script uses and the
    files of `helpers`."""
    lua = files("stream_rater.store.redis")
    return "".join(lua.joinpath(n).read_text() for n in ("common.lua", *helpers, name))


READ_SCRIPT = _script("read.lua")
COMMIT_SCRIPT = _script("commit.lua", "eligible.lua")
CONTROL_SCRIPT = _script("control.lua")
BOARD_SCRIPT = _script("board.lua", "eligible.lua")
#: Every state of the players buckets in KEYS, flat: field, value, … (a full scan:
#: `RedisStore.players`), leaving out the history fields (byte 0xFF first: `keys.HISTORY_MARK`).
SCAN_SCRIPT = """local out = {}
for _, key in ipairs(KEYS) do
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if string.byte(all[i], 1) ~= 255 then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
end
return out"""
#: Buckets one call of the scan script reads: 2^17 buckets make 128 calls; on a ladder of ten
#: million players about 78 000 states per call (tens of milliseconds of Redis at a time).
SCAN_STEP = 1024
#: Most players gone idle since the leaderboard was last trimmed that a read of ``board.lua``
#: skips (each costs about a microsecond); past it the read is refused (`BoardBehind`) rather
#: than made slow.
IDLE_READ_LIMIT = 1_000
#: Idle players one step of ``board.lua``'s 'trim' takes off (a few ms of Redis at a time).
TRIM_STEP = 2_000
#: Entries one step of ``board.lua``'s 'recount' mode adds up: each step holds Redis for about
#: 2 µs per entry on an idle core (ZRANGE WITHSCORES), so a million-player recount never blocks
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


@dataclass(frozen=True, slots=True)
class Buckets:
    """The bucket keys a commit touches (`KeyLayout.commit_keys`): the players buckets of its
    writes and histories (distinct; per write and per history the 1-based index of its own;
    effects 0) and the markers slots (`keys.marker_slots`: those looked in, the index of the one
    written and its time to live)."""

    players: list[int]
    player_index: list[int]
    history_index: list[int]
    slots: list[str]
    slot_written: int
    slot_ttl: int | None

    @classmethod
    def of(cls, commit: Commit, now: float, ttl: float) -> Buckets:
        """The buckets of `commit` at `now` with markers kept `ttl` seconds (0: for ever)."""
        written = [w.player_id for w in commit.writes if not w.is_effect]
        players, index = grouped([*written, *commit.history], bucket)
        it = iter(index)
        player_index = [0 if w.is_effect else next(it) for w in commit.writes]
        slots, slot, slot_ttl = marker_slots(now, ttl)
        return cls(players, player_index, list(it), slots, slots.index(slot) + 1, slot_ttl)

    def keys(self) -> tuple[list[int], list[str]]:
        """The buckets in `KeyLayout.commit_keys`' form."""
        return self.players, self.slots


def history_args(
    commit: Commit, cap: int, forms: StoredForms | None = None
) -> tuple[str | None, list[bytes], list[bytes]]:
    """The history entries' model (of the first plain event), and per player the field its
    entries of this commit go to, ``<player>:<version mod cap>`` (a ring of the player's last
    `cap` commits: `history_slot`), and its value (`history_chunk`: its newest `cap` entries,
    the most a read returns), packed by `forms` (the commit's markers' own, so that each event's
    compact form is made once)."""
    entry = (forms or StoredForms(commit.ladder)).entry
    model = next(
        (
            e["model"]
            for entries in commit.history.values()
            for e in entries
            if isinstance(e.get("model"), str)
        ),
        None,
    )
    versions = {w.player_id: w.state.version for w in commit.writes if not w.is_effect}
    fields, chunks = [], []
    for player, entries in commit.history.items():
        version = versions.get(player, 0)  # a history without its state (not the processor's): 0
        fields.append(history_slot(player, version, cap))
        chunks.append(history_chunk(version, [entry(e, model or "", player) for e in entries[::-1][:cap]]))
    return model, fields, chunks


def _with_history(commit: Commit) -> list[int]:
    """Per write, the 1-based index of its player's history among the commit's, or 0."""
    at = {player: h for h, player in enumerate(commit.history, 1)}
    return [0 if w.is_effect else at.get(w.player_id, 0) for w in commit.writes]


def commit_args(
    commit: Commit,
    keys: int,
    generation: int,
    buckets: Buckets,
    history_cap: int,
    trim_since: float | None = None,
) -> bytes:
    """The commit script's argument for `commit`, whose `keys` keys it passes (its fields are
    described in ``commit.lua``); histories keep `history_cap` entries; players idle since
    `trim_since` leave the leaderboard."""
    ladder = commit.ladder
    ids, states, expected, is_effect, scores, active = zip(*commit.writes) if commit.writes else ((),) * 6
    forms = StoredForms(ladder)
    unproduced = [forms.marker(events) for events in commit.markers.values() if events]
    model, history_fields, history = history_args(commit, history_cap, forms)
    ids_of = list(commit.markers)
    return script_args(
        keys=keys,
        generation=generation,
        mode=mode(commit.generation),
        ids=ids,
        is_effect=list(map(bool, is_effect)),
        bucket=buckets.player_index,
        expected=expected,
        watermark=commit.read_at[1]
        if commit.read_at is not None and commit.read_at[0] == generation
        else None,
        states=list(map(PlayerState.pack, states)),
        scores=[None if score is None else repr(float(score)) for score in scores],
        activity=list(active) if any(a is not None for a in active) else None,
        season=commit.season,
        buckets=[len(buckets.players), len(buckets.slots)],
        history_bucket=buckets.history_index,
        with_history=_with_history(commit),
        marker_ids=ids_of,
        markers=[PACKER.pack(commit.placings[m]) if m in commit.placings else "" for m in ids_of],
        slot=buckets.slot_written,
        slot_ttl=buckets.slot_ttl,
        unproduced_at=[i for i, events in enumerate(commit.markers.values(), 1) if events],
        unproduced=unproduced,
        produced=list(commit.produced),
        history_fields=history_fields,
        history=history,
        model=model,
        positions=dict(commit.positions),
        quality_add=[
            [x for name, value in add.items() for x in (name, repr(float(value)))]
            for add, _ in commit.quality.values()
        ],
        quality_window=[[PACKER.pack(s) for s in scores] for _, scores in commit.quality.values()],
        quality_cap=QUALITY_WINDOW,
        trim_since=trim_since,
    )


def read_args(
    request: ReadRequest, generation: int, now: float, ttl: float
) -> tuple[list[int], list[str], dict[str, Any]]:
    """The players buckets and markers slots of the read script's argument for `request` (at
    `now`, markers kept `ttl` seconds), and its fields but ``keys`` (described in ``read.lua``)."""
    players, player_index = grouped(request.player_ids, bucket)
    slots = marker_slots(now, ttl)[0]
    return (
        players,
        slots,
        {
            "players": request.player_ids,
            "bucket": player_index,
            "effects": request.effect_ids,
            "matches": request.match_ids,
            "records": request.records,
            "buckets": [len(players), len(slots)],
            "generation": generation,
            "mode": mode(request.generation),
        },
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
