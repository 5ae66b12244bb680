"""The Redis store's key layout (stored format 3), and `KeyLayout`, the keys of one
store's prefix.

Every key of a ladder carries the hash tag ``{ladder}`` so the scripts are valid on Redis
Cluster (all keys of a ladder live in one slot, so one node: the layout keeps a
ten-million-player ladder within a few GB), and ladders spread across shards. Every key starts
with the store's prefix, ``sr`` unless ``STREAM_RATER_REDIS_PREFIX`` says otherwise (deployments
sharing one Redis each have their own; ``<prefix>:deployment`` records the stored format, see
`store.deployment`); below it is ``sr``. A ladder's ratings live in a *generation* (see
`StateStore`); generation 0's keys are ``sr:{L}:<suffix>``, generation g's ``sr:{L}:g<g>:<suffix>``.

Players are spread over `BUCKETS` buckets, ``b = crc32(utf-8 id) mod BUCKETS`` (`bucket`), so
that each bucket's hash stays small enough for Redis's compact listpack encoding (about 76
players per bucket at ten million, each a state and up to ``STREAM_RATER_HISTORY_LIMIT``
history fields: within the limits `REDIS_HASH_LIMITS` recommends): no key per player, and no
hash table per ladder. The scripts get every bucket key they touch in KEYS.

- ``players:<b>`` hash  player id → msgpack ``[mu, sigma, games, last_played, version]`` (then
  ``extra``, ``peak``, ``peak_at`` as far as set; integral floats as ints, a ``peak_at`` equal to
  ``last_played`` as ``true``: `values.PlayerState.pack`, at most 64 bytes but in the extreme
  case its docstring names)
  and, in the same bucket, its history: field byte 0xFF ``<player id>:<n>`` → the player's
  changes in the commit that wrote its state version v, n = v mod ``STREAM_RATER_HISTORY_LIMIT``
  (`history_slot`: a ring of its last commits, written with the state in one HSET, never read
  by a commit; a read returns the newest ``STREAM_RATER_HISTORY_LIMIT`` changes of the ring,
  which holds from that many to twice as many): 4 bytes big-endian v, then the commit's newest
  changes (at most the limit), newest first,
  each a 2-byte big-endian length then the entry: msgpack
  ``[match_id, before_mu, before_sigma, after_mu, after_sigma, rating, games, finished_at,
  processed_at, late(, expected)]`` with timestamps as integer microseconds where they read
  back identical (`stored_events.pack_entry`), or any other event's msgpack map
- ``effects`` hash  effect name → same state form (context effects, never ranked; few per ladder:
  one hash, with a field '' that is no id and keeps it a hash table, see ``commit.lua``)
- ``lb``      zset  player id scored by display rating: the eligible leaderboard (on a ladder
  whose rules rank only some players, just those; on one ranking only recently active players,
  the commits trim the idle ones off it, ``eligible.lua``)
- ``act``     zset  ranked player id scored by their last match: the leaderboard's time index
  (only on ladders whose rules rank only recently active players)
- ``seasons`` list  ids of the season-start records applied, in order; ``lb:season:<id>`` the
  leaderboard as the season that record ended left it, ``players:season:<id>:<b>`` hashes (as
  ``players:<b>``) the state before the season start of each player it wrote
- ``mk:<s>``  hash  match id → its "match applied" marker: msgpack ``[[player id, team rank],
  …]`` of the match's rated players (the index by match: `ReadStore.placings`), or an empty
  string. ``s`` is a time slot, 15 minutes or a sixteenth of the TTL wide (`marker_slots`): each
  commit writes its markers into the slot of its time, and the key expires itself once its newest
  marker is past the TTL (a marker lives TTL to TTL + a slot); a read looks in the slots of its
  last TTL. Without a
  TTL, ``mk:all`` holds them all. A slot of a busy ladder is a hash table (some 110 bytes a
  marker; from 128 markers on, by a field '' that is no match id: ``commit.lua``): one write
  and a handful of lookups per batch, not per match. Readers and writers
  must share the TTL (``STREAM_RATER_MARKER_TTL``): a reader with a shorter one sees fewer
- ``unproduced`` hash  match id → msgpack list of the rating-changed events the match
  produced, until they are with the broker (dropped by a later commit, or by the worker's
  `forget_produced` as it stops or loses partitions; see `store.base`); each
  event in the stored form of `stored_events` (a compact array); ``unproduced:staged``, the
  same for one commit's events only, lives inside that commit's MULTI/EXEC on a single Redis:
  written by a plain ``HSET`` before the commit script, which renames it to ``unproduced``
  (or copies it in) and deletes it when it refuses (`RedisStore._staged_commit`);
  ``unproduced:older``, the same, the events ``unproduced`` held when a commit's staged events
  came while they were not all produced yet (a worker produces a batch's events while it
  commits the next): moved aside by a RENAME rather than copied through Lua, where it held
  none itself (stored format 3 only; a format-2 store, which the release before may share,
  has none, nor the quality sums' field '': `store.deployment`)
- ``q:<scorer>`` hash  the cumulative prediction-quality sums of a scorer (``live``: the
  ladder's model; `processor.quality`), written with each batch (and the field '', which
  keeps it a hash table: ``commit.lua``); ``qw:<scorer>`` list, newest
  first, of the last `QUALITY_WINDOW` matches' scores (msgpack)
- ``meta``    hash  ``applied`` → matches applied to the generation so far (the watermark:
  it only grows, so a read that finds less than a worker committed means the store lost
  data); ``p:<partition>`` → offset after the last record of the ladder applied (a redelivered
  record below it is applied already, whatever the markers say); ``model`` → the model of the
  history entries (which leave it out); ``lb:sum`` → the sum of the leaderboard's scores, kept
  by the commits (the inflation totals)

and per ladder, whatever the generation:

- ``sr:{L}:control`` hash ``topic`` the matches topic the ladder is applied from (its
  positions are offsets of it; `store.deployment`), ``live`` / ``staging`` generation, ``last``
  generation handed out, ``params:<g>`` generation g's parameter overrides (msgpack), ``voids``
  changes of the voids so far and ``voids:<g>`` how many generation g was built with,
  ``begun`` / ``abandoned`` the last re-rate begin's request token and the staging generation
  it abandoned (-1: none), answered again to that begin sent again
- ``sr:{L}:lock`` the re-rate lock (owner; expires) · ``sr:{L}:frozen`` set for the moment
  of a switch (live commits are refused while it exists; expires), then the set of the players
  held until their correction events are sent
- ``sr:{L}:outbox`` hash player id → msgpack correction event a switch stored, until they are
  sent; a staging generation's ``staged_outbox`` and ``staged_held`` (its players) are filled
  before the freeze and renamed to ``outbox`` and ``frozen`` by the switch
- ``sr:{L}:voids`` hash match id → msgpack ``{"reason", "at"}``

Format 1 (`store.redis.upgrade` reads it) had one ``players`` hash, ``h:<player id>`` lists of
whole stored events, one ``mk`` hash with a ``mk:expiry`` zset, and ``players:season:<id>``
copies of the whole players hash.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable, Sequence

from stream_rater.config.settings import Settings

#: Keys of a ladder that belong to no generation.
LADDER_KEYS = ("control", "lock", "frozen", "outbox", "voids")

#: The keys each script gets first in KEYS, in order, named by their suffix (above): `KeyLayout`
#: builds its key lists from these names and `scripts.SCRIPTS` writes them into each script as
#: the header ``local K = {effects = 1, …}`` (and ``K_FIXED``, how many: a script's variable keys
#: follow them), so that Python and Lua name one position the same way and no script reads a
#: key by a number.
READ_KEYS = ("effects", "meta", "unproduced", "control", "voids", "older")
COMMIT_KEYS = ("effects", "lb", "meta", "control", "frozen", "act", "seasons", "unproduced", "older", "voids")
#: The suffix of a script's key whose name (a Lua identifier) is not its suffix.
SUFFIXES = {"older": "unproduced:older"}
BOARD_KEYS = ("lb", "act", "meta", "control")
#: The control script's keys of the staging generation (the others: of the live one), last.
STAGED_KEYS = ("staged_outbox", "staged_held")
CONTROL_KEYS = ("control", "lock", "frozen", "outbox", "meta", *STAGED_KEYS)

#: Buckets of a ladder's players (and histories): 2^17, so that ten million players make about
#: 76 per bucket, under Redis's default ``hash-max-listpack-entries`` (128). Fixed: a player's
#: bucket must never move.
BUCKETS = 1 << 17
#: The narrowest markers time slot (`marker_slots`), in seconds: with the default TTL (an hour)
#: a read looks in one slot per 15 minutes, and a marker outlives its TTL by at most as much.
SLOT_SECONDS = 900
#: The most slots a marker TTL is cut into (a longer TTL gets wider slots).
MAX_SLOTS = 16

#: Most slots of a player's history ring (`history_slot`): what a read looks at, whatever the
#: writers' ``STREAM_RATER_HISTORY_LIMIT`` (at most this many changes are kept).
HISTORY_SLOTS = 32
#: The first byte of a history field in a players bucket (never in a UTF-8 player id).
HISTORY_MARK = b"\xff"

#: The hash encoding limits recommended for a Redis serving the store (deploy/README.md "Redis"),
#: as ``redis-server`` flags: a players bucket (a state and two history chunks per player) stays
#: a compact listpack up to 512 fields — 170 players, some 20 million a ladder (76 each on
#: average at ten million) — and values of 512 bytes (a history chunk, a team match's marker).
#: Only memory depends on them. The ``ziplist`` names, which Redis 7 keeps as aliases of the
#: ``listpack`` ones, work on Redis 6 too.
REDIS_HASH_LIMITS = ("--hash-max-ziplist-entries", "512", "--hash-max-ziplist-value", "512")

#: The key prefix of a store made without one (`Settings.redis_prefix`).
DEFAULT_PREFIX: str = Settings.redis_prefix


def bucket(player_id: str) -> int:
    """The bucket of `player_id`: crc32 of its UTF-8 mod `BUCKETS` (stable across releases)."""
    return zlib.crc32(player_id.encode()) & (BUCKETS - 1)


def marker_slots(now: float, ttl: float) -> tuple[list[str], str, int | None]:
    """The markers slots a read or commit at `now` (seconds) with markers kept `ttl` seconds
    looks in, the one it writes, and that slot key's time to live in seconds (None: for ever).

    A marker goes to the slot of its commit's time, ``floor(now / w)`` with ``w`` the larger of
    `SLOT_SECONDS` and ``ttl / MAX_SLOTS`` (so a read looks in at most ``MAX_SLOTS + 2`` slots
    whatever the TTL), whose key expires `ttl` after the slot's end: a marker lives from `ttl` to
    `ttl` + ``w``. Readers look from the slot of ``now - ttl`` to the one after ``now`` (a
    writer's clock a little ahead), and in ``all``, where a store without a TTL (0) keeps every
    marker."""
    if not ttl:
        return ["all"], "all", None
    width = max(SLOT_SECONDS, -(-int(ttl) // MAX_SLOTS))
    slot = int(now // width)
    first = int((now - ttl) // width)
    return ["all", *map(str, range(first, slot + 2))], str(slot), (slot + 1) * width + int(ttl) - int(now) + 1


def history_slot(player_id: str, version: int, cap: int) -> bytes:
    """The field of a player's history that the commit writing its state `version` fills, in
    the player's bucket: byte 0xFF (never in a player id, which is UTF-8), the id, ``:`` and
    ``version mod cap`` (a ring of its last `cap` commits; `cap` at most `HISTORY_SLOTS`)."""
    return history_slots((player_id,), (version,), cap)[0]


def history_slots(player_ids: Iterable[str], versions: Iterable[int], cap: int) -> list[bytes]:
    """`history_slot` of each of `player_ids` at the version `versions` give in turn."""
    ring = min(cap, HISTORY_SLOTS)
    return [
        HISTORY_MARK + f"{player}:{version % ring}".encode() for player, version in zip(player_ids, versions)
    ]


def history_chunk(version: int, entries: Iterable[bytes]) -> bytes:
    """A history field's value: `version` as 4 bytes big-endian, then `entries` (newest first)."""
    return (version & 0xFFFFFFFF).to_bytes(4, "big") + b"".join(entries)


def ladder_key(ladder: str, suffix: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The key ``<prefix>:{ladder}:suffix``; the braces make `ladder` the cluster hash tag."""
    return f"{prefix}:{{{ladder}}}:{suffix}"


def generation_key(ladder: str, generation: int, suffix: str, prefix: str = DEFAULT_PREFIX) -> str:
    """A key of one generation of `ladder` (generation 0 has no infix)."""
    return ladder_key(ladder, f"g{generation}:{suffix}" if generation else suffix, prefix)


def ladder_of_meta(prefix: str) -> re.Pattern[str]:
    """A meta key of any generation of the store with key `prefix`: its ladder (every
    generation that applied a match has one)."""
    return re.compile(rf"^{re.escape(prefix)}:\{{(.+)\}}:(?:g\d+:)?meta$")


def legacy_marker(prefix: str) -> re.Pattern[str]:
    """A marker key of the layout before the markers hash: ladder, generation (None for 0), match."""
    return re.compile(rf"^{re.escape(prefix)}:\{{([^}}]+)\}}:(?:g(\d+):)?m:(.+)$", re.DOTALL)


def grouped(ids: Iterable[str], of: Callable[[str], int]) -> tuple[list[int], list[int]]:
    """The distinct buckets of `ids` (by `of`) in first-seen order, and per id the 1-based
    index of its bucket among them (the scripts' form)."""
    order: dict[int, int] = {}
    index = [order.setdefault(of(i), len(order) + 1) for i in ids]
    return list(order), index


def bucketed(ids: Iterable[str]) -> tuple[list[int], list[int]]:
    """``grouped(ids, bucket)``, with `bucket` inline: no Python call per id."""
    order: dict[int, int] = {}
    crc32, mask = zlib.crc32, BUCKETS - 1
    index = [order.setdefault(crc32(i.encode()) & mask, len(order) + 1) for i in ids]
    return list(order), index


class KeyLayout:
    """The keys of a store whose keys start with `prefix`."""

    prefix: str = DEFAULT_PREFIX

    def _key(self, ladder: str, suffix: str) -> str:
        """`ladder_key` of this store's prefix."""
        return f"{self.prefix}:{{{ladder}}}:{suffix}"

    def _gen_key(self, ladder: str, generation: int, suffix: str) -> str:
        """`generation_key` of this store's prefix."""
        return self._key(ladder, f"g{generation}:{suffix}" if generation else suffix)

    def named_keys(self, ladder: str, generation: int, names: Iterable[str], **instead: str) -> list[str]:
        """The keys `names` (a script's, such as `COMMIT_KEYS`) of `ladder`, those of a
        generation of `generation`; `instead` gives another suffix for a name."""
        return [
            self._key(ladder, n)
            if n in LADDER_KEYS
            else self._gen_key(ladder, generation, instead.get(n, SUFFIXES.get(n, n)))
            for n in names
        ]

    def bucket_keys(self, ladder: str, generation: int, kind: str, buckets: Iterable[int | str]) -> list[str]:
        """The keys ``<kind>:<b>`` of `buckets` in `ladder`'s `generation`."""
        prefix = self._gen_key(ladder, generation, kind)
        return [f"{prefix}:{b}" for b in buckets]

    def read_keys(
        self, ladder: str, generation: int, players: Sequence[int], markers: Sequence[str]
    ) -> list[str]:
        """The keys the read script gets for `ladder`'s `generation`: then those of the
        `players` buckets and of the `markers` buckets."""
        return [
            *self.named_keys(ladder, generation, READ_KEYS),
            *self.bucket_keys(ladder, generation, "players", players),
            *self.bucket_keys(ladder, generation, "mk", markers),
        ]

    def commit_keys(
        self,
        ladder: str,
        generation: int,
        buckets: tuple[Sequence[int], Sequence[str]],
        season: str | None,
        scorers: Iterable[str] = (),
    ) -> list[str]:
        """The keys the commit script gets for `ladder`'s `generation` (in ``commit.lua``'s
        order): `buckets` are those of the players written (states and histories) and the markers
        slots; then the prediction-quality sums and window of each of `scorers`; with a `season`
        start, the ending season's leaderboard and the archive bucket of each players bucket."""
        players, markers = buckets
        prefix = self._gen_key(ladder, generation, "")
        keys = [
            *self.named_keys(ladder, generation, COMMIT_KEYS),
            *self.bucket_keys(ladder, generation, "players", players),
            *self.bucket_keys(ladder, generation, "mk", markers),
            *(f"{prefix}{kind}:{scorer}" for scorer in scorers for kind in ("q", "qw")),
        ]
        if season is not None:
            keys.append(f"{prefix}lb:season:{season}")
            keys += self.bucket_keys(ladder, generation, f"players:season:{season}", players)
        return keys
