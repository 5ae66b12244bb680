"""How the Redis store keeps rating-changed events (in "match applied" markers and player
histories): a plain rating-changed event of the key's ladder as a compact msgpack array, about
half the bytes of the event's map, which Redis then copies, stores and hands out the cheaper.

The array is ``[match_id, player_id, model, before_mu, before_sigma, after_mu, after_sigma,
rating, games, finished_at, processed_at, late, expected]`` (``expected``, the event's map of
what was expected of the player's team, is left out when the event has none: arrays written
before events carried it have 12 items and read back as they were); ``event_id``, ``ladder``
and ``delta`` are rebuilt on reading by `contracts.rating_changed`, which made the event, so a stored event reads
back equal to the one written, field for field and in the same order. Any other event (a
correction event, one whose fields are not exactly a plain event's) is stored as its msgpack
map, and maps written before the compact form existed read back as they are.
"""

from __future__ import annotations

from typing import Any

import msgpack

from stream_rater.contracts import rating_changed
from stream_rater.store.base import Event

#: Packs stored values (``use_bin_type`` like every stored value); sharing it is safe: packing
#: runs no Python code.
PACKER = msgpack.Packer(use_bin_type=True)

_PLAIN = frozenset(rating_changed("m", "l", "p", "model", (0.0, 0.0), (0.0, 0.0), 0.0, 1, "t", "t"))
#: The key sets a compact array can stand for: plain, late, and either with ``expected``.
_COMPACT = frozenset({_PLAIN, _PLAIN | {"late"}, _PLAIN | {"expected"}, _PLAIN | {"late", "expected"}})


def _compact(event: Event, ladder: str) -> list[Any] | None:
    """The compact form of `event`, or None if it is not a plain rating-changed event of
    `ladder` (then rebuilding it from the array would not give it back)."""
    keys = frozenset(event)
    late = event.get("late", False)
    if keys not in _COMPACT or late is not ("late" in keys) or event["ladder"] != ladder:
        return None
    before, after = event["before"], event["after"]
    if before.keys() != after.keys() or len(before) != 2 or "mu" not in before or "sigma" not in before:
        return None
    match_id, player_id = event["match_id"], event["player_id"]
    if event["event_id"] != f"{match_id}:{player_id}" or event["delta"] != after["mu"] - before["mu"]:
        return None
    compact = [
        match_id,
        player_id,
        event["model"],
        before["mu"],
        before["sigma"],
        after["mu"],
        after["sigma"],
        event["rating"],
        event["games"],
        event["finished_at"],
        event["processed_at"],
        late,
    ]
    if "expected" in keys:
        expected = event["expected"]
        if not isinstance(expected, dict):
            return None
        compact.append(expected)
    return compact


def pack_event(event: Event, ladder: str) -> bytes:
    """`event` (of `ladder`) as the store keeps it: compact if it can be, else its map."""
    compact = _compact(event, ladder)
    packed: bytes = PACKER.pack(event if compact is None else compact)
    return packed


def pack_events(events: list[Event], ladder: str) -> bytes:
    """A marker's value: the msgpack array of `events` in their stored form."""
    header: bytes = PACKER.pack_array_header(len(events))
    return header + b"".join(pack_event(e, ladder) for e in events)


def stored_event(value: Any, ladder: str) -> Event:
    """The event of a stored value already decoded by msgpack (an array or a map)."""
    if not isinstance(value, list):
        event: Event = value
        return event
    match_id, player_id, model, b_mu, b_sigma, a_mu, a_sigma, rating, games, finished, processed, late = (
        value[:12]
    )
    return rating_changed(
        match_id,
        ladder,
        player_id,
        model,
        (b_mu, b_sigma),
        (a_mu, a_sigma),
        rating,
        games,
        finished,
        processed,
        late,
        expected=value[12] if len(value) > 12 else None,
    )
