"""The Redis store's key layout, and `KeyLayout`, the keys of one store's prefix.

Key layout — every key of a ladder carries the hash tag ``{ladder}`` so the scripts are
valid on Redis Cluster (all keys of a ladder live in one slot), and ladders spread across
shards. Every key starts with the store's prefix, ``sr`` unless ``STREAM_RATER_REDIS_PREFIX``
says otherwise (deployments sharing one Redis each have their own; ``<prefix>:deployment``
records the stored format, see `store.deployment`); below it is ``sr``.
A ladder's ratings live in a *generation* (see `StateStore`); generation 0's keys are
``sr:{L}:<suffix>``, generation g's ``sr:{L}:g<g>:<suffix>``:

- ``players`` hash  player id → msgpack ``[mu, sigma, games, last_played, version]``
- ``effects`` hash  effect name → same state form (context effects, never ranked)

  (these two hashes and ``mk`` also have a field '' that is no id: it keeps them hash tables,
  see ``commit.lua``)
- ``lb``      zset  player id scored by display rating (the leaderboard; on a ladder whose
  rules rank only some players, just those)
- ``act``     zset  ranked player id scored by their last match (only on ladders whose rules
  rank only recently active players)
- ``seasons`` list  ids of the season-start records applied, in order; ``lb:season:<id>`` the
  leaderboard and ``players:season:<id>`` every player's state (as in ``players``) as the
  season that record ended left it
- ``mk``      hash  match id → the "match applied" markers: msgpack ``[[player id, team rank],
  …]`` of the match's rated players (the index by match: `ReadStore.placings`), or an empty
  string (a match with no rated players' events, or a marker written before the index)
- ``unproduced`` hash  match id → msgpack list of the rating-changed events the match
  produced, until they are with the broker (dropped by a later commit; see `store.base`); each
  event in the stored form of `stored_events` (a compact array)
- ``mk:expiry`` zset  of each commit's marker ids (msgpack list) scored by when they expire,
  with a marker TTL (the idempotency window): a commit removes the markers past it
- ``h:<player_id>`` list, newest first, of msgpack rating-changed events in the stored form
  of `stored_events` (capped)
- ``q:<scorer>`` hash  the cumulative prediction-quality sums of a scorer (``live``: the
  ladder's model; `processor.quality`), written with each batch; ``qw:<scorer>`` list, newest
  first, of the last `QUALITY_WINDOW` matches' scores (msgpack)
- ``meta``    hash  ``applied`` → matches applied to the generation so far (the watermark:
  it only grows, so a read that finds less than a worker committed means the store lost
  data); ``p:<partition>`` → offset after the last record of the ladder applied

and per ladder, whatever the generation:

- ``sr:{L}:control`` hash ``topic`` the matches topic the ladder is applied from (its
  positions are offsets of it; `store.deployment`), ``live`` / ``staging`` generation, ``last`` generation handed out,
  ``params:<g>`` generation g's parameter overrides (msgpack), ``voids`` changes of the voids
  so far and ``voids:<g>`` how many generation g was built with
- ``sr:{L}:lock`` the re-rate lock (owner; expires) · ``sr:{L}:frozen`` set for the moment
  of a switch (live commits are refused while it exists; expires)
- ``sr:{L}:outbox`` correction events a switch stored, until they are sent
- ``sr:{L}:voids`` hash match id → msgpack ``{"reason", "at"}``
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from stream_rater.config.settings import Settings

#: Keys of a ladder that belong to no generation.
LADDER_KEYS = ("control", "lock", "frozen", "outbox", "voids")


#: The key prefix of a store made without one (`Settings.redis_prefix`).
DEFAULT_PREFIX: str = Settings.redis_prefix


def ladder_key(ladder: str, suffix: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The key ``<prefix>:{ladder}:suffix``; the braces make `ladder` the cluster hash tag."""
    return f"{prefix}:{{{ladder}}}:{suffix}"


def generation_key(ladder: str, generation: int, suffix: str, prefix: str = DEFAULT_PREFIX) -> str:
    """A key of one generation of `ladder` (generation 0 has no infix)."""
    return ladder_key(ladder, f"g{generation}:{suffix}" if generation else suffix, prefix)


def ladder_of_players(prefix: str) -> re.Pattern[str]:
    """A players key of any generation of the store with key `prefix`: its ladder."""
    return re.compile(rf"^{re.escape(prefix)}:\{{(.+)\}}:(?:g\d+:)?players$")


def legacy_marker(prefix: str) -> re.Pattern[str]:
    """A marker key of the layout before the markers hash: ladder, generation (None for 0), match."""
    return re.compile(rf"^{re.escape(prefix)}:\{{([^}}]+)\}}:(?:g(\d+):)?m:(.+)$", re.DOTALL)


class KeyLayout:
    """The keys of a store whose keys start with `prefix`."""

    prefix: str = DEFAULT_PREFIX

    def _key(self, ladder: str, suffix: str) -> str:
        """`ladder_key` of this store's prefix."""
        return f"{self.prefix}:{{{ladder}}}:{suffix}"

    def _gen_key(self, ladder: str, generation: int, suffix: str) -> str:
        """`generation_key` of this store's prefix."""
        return self._key(ladder, f"g{generation}:{suffix}" if generation else suffix)

    def read_keys(self, ladder: str, generation: int) -> list[str]:
        """The keys the read script gets for `ladder`'s `generation`."""
        prefix = self._gen_key(ladder, generation, "")
        return [
            prefix + "players",
            prefix + "effects",
            prefix + "meta",
            prefix + "mk",
            prefix + "unproduced",
            self._key(ladder, "control"),
            self._key(ladder, "voids"),
        ]

    def commit_keys(
        self,
        ladder: str,
        generation: int,
        players: Iterable[str],
        season: str | None,
        scorers: Iterable[str] = (),
    ) -> list[str]:
        """The keys the commit script gets for `ladder`'s `generation`: with the histories of
        `players`, the prediction-quality sums and window of each of `scorers`, and the final
        leaderboard and players' states of the season a `season` start ends (the last two keys)."""
        prefix = self._gen_key(ladder, generation, "")
        keys = [
            prefix + "players",
            prefix + "effects",
            prefix + "lb",
            prefix + "meta",
            self._key(ladder, "control"),
            self._key(ladder, "frozen"),
            prefix + "act",
            prefix + "seasons",
            prefix + "mk",
            prefix + "unproduced",
            prefix + "mk:expiry",
            *(f"{prefix}h:{p}" for p in players),
            *(f"{prefix}{kind}:{scorer}" for scorer in scorers for kind in ("q", "qw")),
        ]
        if season is not None:
            keys += [f"{prefix}lb:season:{season}", f"{prefix}players:season:{season}"]
        return keys
