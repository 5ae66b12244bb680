"""The model behind ``stream-rater bench capacity``: a ladder's Redis keys grouped by kind, the
bytes each kind costs per key and per entry, and their projection to another size.

Every key of a ladder is one *kind* (its suffix below the ladder's hash tag, without a trailing
``:<number>`` bucket or a per-player ``h:<id>``) and is driven by one count:

- **players** — states, leaderboards, histories: entries per player (a players bucket holds
  each player's state and history ring as fields);
- **markers** — the dedupe window's "match applied" markers (in a few time slots): one entry
  per match alive in the window;
- **fixed** — everything else (control, meta, quality sums, the last batch's events until
  they are produced): no growth with either.

A kind's bytes are ``keys × per_key + entries × per_entry``: a least-squares line through its
keys' ``MEMORY USAGE`` against their entry counts, so that a bucketed kind's fixed cost per key
(the key, its object, the listpack header) is told from its cost per entry. Projected to a
size, a kind spread over ``B`` buckets holding ``n`` entries uses ``B·(1 − e^(−n/B))`` keys
(the expected number of non-empty buckets for ``n`` ids), a kind of a key per player one per player, any
other kind the keys it had (one, or the markers' few time slots). The sum of the keys'
``MEMORY USAGE`` misses Redis's own per-key overhead (the keyspace's hash table, allocator
rounding): `KindSizes` carry the load's keyspace memory growth over that sum as `overhead`,
applied to every projected byte.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from stream_rater.store.redis.keys import BUCKETS

#: Which count drives each kind of key (the kinds of every stored format; unknown kinds are fixed).
DRIVERS: Mapping[str, str] = {
    "players": "players",
    "lb": "players",
    "act": "players",
    "h": "players",
    "mk": "markers",
    "mk:expiry": "markers",
    "mk:all": "markers",
}

#: Kinds spread over a fixed number of buckets by a hash of the id: that number.
BUCKETED: Mapping[str, int] = {"players": BUCKETS}

_BUCKET = re.compile(r"^(.*?):(\d+)$")


def kind_of(suffix: str) -> tuple[str, bool]:
    """The kind of the key whose suffix (below ``<prefix>:{ladder}:``) is `suffix`, and whether
    it is one of several keys of that kind (a bucket, a per-player history)."""
    found = _BUCKET.match(suffix)
    if found:
        return found.group(1), True
    if suffix.startswith("h:"):
        return "h", True
    return suffix, False


@dataclass(frozen=True, slots=True)
class KeySample:
    """One key of a load: its suffix, its ``MEMORY USAGE`` and how many entries it holds."""

    suffix: str
    usage: int
    entries: int


@dataclass(frozen=True, slots=True)
class Kind:
    """What one kind of key costs, measured on a load."""

    name: str
    driver: str
    keys: int
    entries: int
    usage: int
    per_key: float
    per_entry: float
    #: The bucket count of a kind spread over buckets by a hash of the id (`BUCKETED`), else 0.
    buckets: int

    def project(self, count: float, per_driver: float) -> float:
        """Bytes of this kind when its driver counts `count` (`per_driver` entries each)."""
        entries = count * per_driver
        if self.driver == "fixed":
            return float(self.usage)
        if self.buckets:
            keys = self.buckets * -math.expm1(-count / self.buckets)
        elif self.keys > 1 and self.driver == "players":  # one key per player
            keys = count
        else:  # one key, or a few the driver does not grow (the markers' time slots)
            keys = float(self.keys)
        return keys * self.per_key + entries * self.per_entry


def fit(samples: Iterable[KeySample]) -> tuple[float, float]:
    """``(per_key, per_entry)``: the least-squares line of usage against entries; a kind whose
    keys all hold as many entries, or whose line would put a negative cost on either, splits
    nothing off per key."""
    xs, ys = [], []
    for s in samples:
        xs.append(float(s.entries))
        ys.append(float(s.usage))
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0 or n < 3:
        total = sum(xs)
        return (0.0, sum(ys) / total) if total else (mean_y, 0.0)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread
    if slope <= 0 or mean_y - slope * mean_x < 0:  # noise, not a cost per key: price per entry
        return 0.0, sum(ys) / sum(xs)
    return mean_y - slope * mean_x, slope


def kinds(samples: Iterable[KeySample]) -> list[Kind]:
    """The keys of a load grouped by kind, each with its fitted costs."""
    grouped: dict[str, list[KeySample]] = {}
    for s in samples:
        grouped.setdefault(kind_of(s.suffix)[0], []).append(s)
    out = []
    for name, group in sorted(grouped.items()):
        per_key, per_entry = fit(group)
        out.append(
            Kind(
                name,
                DRIVERS.get(name, "fixed"),
                len(group),
                sum(s.entries for s in group),
                sum(s.usage for s in group),
                per_key,
                per_entry,
                BUCKETED.get(name, 0),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class KindSizes:
    """A load's kinds, what drove them (players and markers alive) and Redis's overhead."""

    kinds: list[Kind]
    players: int
    markers: int
    #: Keyspace memory growth of the load over the sum of its keys' ``MEMORY USAGE``.
    overhead: float

    def per_driver(self, kind: Kind) -> float:
        """Entries of `kind` per player or per marker in the load."""
        count = self.players if kind.driver == "players" else self.markers
        return kind.entries / count if count else 0.0

    def project(self, players: float, markers: float) -> dict[str, float]:
        """Bytes per kind for `players` players and `markers` markers alive."""
        counts = {"players": players, "markers": markers, "fixed": 0.0}
        return {k.name: self.overhead * k.project(counts[k.driver], self.per_driver(k)) for k in self.kinds}

    def per_item(self, driver: str) -> float:
        """Bytes one player (or one marker) costs at the load's size, every kind it drives."""
        count = self.players if driver == "players" else self.markers
        total = sum(k.usage for k in self.kinds if k.driver == driver)
        return self.overhead * total / count if count else 0.0
