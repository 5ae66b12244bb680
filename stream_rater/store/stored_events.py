"""How the Redis store keeps rating-changed events (in "match applied" markers and player
histories): a plain rating-changed event of the key's ladder as a compact msgpack array, about
half the bytes of the event's map, which Redis then copies, stores and hands out the cheaper.

The array is ``[match_id, player_id, model, before_mu, before_sigma, after_mu, after_sigma,
rating, games, finished_at, processed_at, late, expected, flag, before_rating]``
(``expected``, the event's map of what was expected of the player's team, or nil; ``flag``
the value of `FLAG`, the field a ladder rule adds to its players' events, or nil;
``before_rating`` the display rating before the change, ``before.rating``; ``after.rating`` is
the event's ``rating``. An event without ``before.rating`` — stored before events carried it — leaves out the trailing items it lacks,
so it has 12 to 14 and reads back as it was); ``event_id``, ``ladder``, ``delta``,
``after.rating`` and ``rating_delta`` are rebuilt on reading by `contracts.rating_changed`, which made the event, so a stored event reads
back equal to the one written, field for field and in the same order. Any other event (a
correction event, one whose fields are not exactly a plain event's) is stored as its msgpack
map, and maps written before the compact form existed read back as they are.
"""

from __future__ import annotations

import functools
import itertools
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import msgpack

from stream_rater.config.rules import READ_FLAGS
from stream_rater.contracts import format_timestamp, parse_timestamp, rating_changed
from stream_rater.contracts.timestamps import _MAX_EPOCH, _MIN_EPOCH
from stream_rater.store.base import Event
from stream_rater.store.packing import pack, packing_with

#: The flag field a ladder rule adds to events (`config.rules.READ_FLAGS`, the first) that the
#: compact form keeps in its slot; an event with any other flag field is kept as its map.
FLAG = READ_FLAGS[0]

_PLAIN = frozenset(rating_changed("m", "l", "p", "model", (0.0, 0.0), (0.0, 0.0), 0.0, 1, "t", "t"))
_STATE = frozenset({"mu", "sigma"})
_RATED = _STATE | {"rating"}
#: The key sets a compact array can stand for: plain, with any of ``late``, `FLAG`,
#: ``expected`` and ``rating_delta`` (with ``before.rating``).
_COMPACT = frozenset(
    _PLAIN | {k for k, on in zip(("late", FLAG, "expected", "rating_delta"), bits) if on}
    for bits in itertools.product((False, True), repeat=4)
)


def _compact(event: Event, ladder: str) -> list[Any] | None:
    """The compact form of `event`, or None if it is not a plain rating-changed event of
    `ladder` (then rebuilding it from the array would not give it back)."""
    keys = frozenset(event)
    late = event.get("late", False)
    if keys not in _COMPACT or late is not ("late" in keys) or event["ladder"] != ladder:
        return None
    before, after = event["before"], event["after"]
    rated = "rating_delta" in keys
    if before.keys() != after.keys() or before.keys() != (_RATED if rated else _STATE):
        return None
    match_id, player_id = event["match_id"], event["player_id"]
    if (
        event["event_id"] != f"{match_id}:{player_id}"
        or event["delta"] != after["mu"] - before["mu"]
        or (
            rated
            and (
                event["rating_delta"] != event["rating"] - before["rating"]
                or after["rating"] != event["rating"]
            )
        )
    ):
        return None
    expected, flag = event.get("expected"), event.get(FLAG)
    if ("expected" in keys and expected is None) or (FLAG in keys and flag is None):
        return None
    fields = (
        match_id,
        ladder,
        player_id,
        event["model"],
        (before["mu"], before["sigma"]),
        (after["mu"], after["sigma"]),
        event["rating"],
        event["games"],
        event["finished_at"],
        event["processed_at"],
        late,
        flag,
        expected,
        before["rating"] if rated else None,
    )
    return compact_of(fields, ladder)


#: A rating-changed event's fields: the arguments `contracts.rating_changed` built it from, in
#: its order, ``(match_id, ladder, player_id, model, before, after, rating, games, finished_at,
#: processed_at, late, flag, expected, before_rating)`` (`Commit.event_fields`; ``flag`` is
#: the value of `FLAG`).
EventFields = tuple[Any, ...]


def compact_of(fields: EventFields, ladder: str, size: int | None = None) -> list[Any] | None:
    """The compact form of the event ``rating_changed(*fields)`` (`EventFields`), or None where
    the array would not read back as that event: one of another ladder than `ladder`, an
    ``expected`` not a map, a `FLAG` not a bool, or a change that is NaN (the event's
    ``delta`` or ``rating_delta`` would then differ from the one rebuilt); also None if `size`
    is given and is not the number of keys of that event (an event changed in place since)."""
    (match_id, of, player_id, model, before, after, rating, games, finished, processed, late, flag, expected,
     before_rating) = fields  # fmt: skip
    b_mu, a_mu = before[0], after[0]
    if of != ladder or a_mu - b_mu != a_mu - b_mu:
        return None
    if late is not False:
        late = bool(late)  # the event has ``late`` (true) only if it is
    keys = 12 if late is False else 13  # the event's, but for the optional ones below
    if expected is not None:
        if not isinstance(expected, dict):
            return None
        keys += 1
    if flag is not None:
        if not isinstance(flag, bool):
            return None
        keys += 1
    if before_rating is not None:
        if rating - before_rating != rating - before_rating or (size is not None and size != keys + 1):
            return None
        return [match_id, player_id, model, b_mu, before[1], a_mu, after[1], rating, games, finished,
                processed, late, expected, flag, before_rating]  # fmt: skip
    if size is not None and size != keys:
        return None
    compact = [match_id, player_id, model, b_mu, before[1], a_mu, after[1], rating, games, finished,
               processed, late]  # fmt: skip
    if expected is not None or flag is not None:
        compact.append(expected)
    if flag is not None:
        compact.append(flag)
    return compact


def pack_event(event: Event, ladder: str) -> bytes:
    """`event` (of `ladder`) as the store keeps it: compact if it can be, else its map."""
    compact = _compact(event, ladder)
    packed: bytes = pack(event if compact is None else compact)
    return packed


def pack_events(events: list[Event], ladder: str) -> bytes:
    """A marker's value: the msgpack array of `events` in their stored form."""
    return StoredForms(ladder).marker(events)


class StoredForms:
    """The stored forms of one commit's events of `ladder`: each event's compact form is made
    once (by the event's identity, so the events must outlive this), from its fields where the
    planner handed them over (`fields`: `Commit.event_fields`) else from its map, and serves
    both its match's marker (`markers`, which makes them: a commit's markers hold all its
    events) and its player's history entry (`chunks`); the parts of an entry its match's other
    events share (match id, timestamps) are made once too, a
    ``finished_at`` from `times` (`Commit.stored_times`) where given."""

    __slots__ = ("_compacts", "_fields", "_heads", "_times", "ladder")

    def __init__(
        self,
        ladder: str,
        fields: Mapping[int, EventFields] | None = None,
        times: Mapping[str, int | str] | None = None,
    ) -> None:
        self.ladder = ladder
        self._fields = fields or {}
        self._times = times or {}  # `Commit.stored_times`
        self._compacts: dict[int, list[Any] | None] = {}
        #: Match id → its entries' head (match id, times as kept) and the times it is of.
        self._heads: dict[str, tuple[Any, Any, Any, str, str]] = {}

    def markers(self, markers: Mapping[str, list[Event]]) -> list[str | bytes]:
        """Each match of `markers` that has events, its id then its marker (`marker`), making
        its events' compact forms."""
        return packing_with(lambda packer: self._markers(markers, packer))

    def _markers(
        self, markers: Mapping[str, list[Event]], packer: Callable[[Any], bytes]
    ) -> list[str | bytes]:
        """`markers`, each packed by `packer`."""
        ladder, fields_of, compacts = self.ladder, self._fields, self._compacts
        out: list[str | bytes] = []
        for match_id, events in markers.items():
            if not events:
                continue
            forms = []
            for event in events:
                key = id(event)
                fields = fields_of.get(key)
                compact = (
                    None
                    if fields is None or event["player_id"] is not fields[2]
                    else compact_of(fields, ladder, len(event))
                )
                if compact is None:  # no fields, or changed in place since (`contracts.with_mode`)
                    compact = _compact(event, ladder)
                compacts[key] = compact
                forms.append(event if compact is None else compact)
            out += (match_id, packer(forms))
        return out

    def marker(self, events: list[Event]) -> bytes:
        """A marker's value: the msgpack array of `events` in their stored form."""
        return cast(bytes, self.markers({"": events})[1]) if events else pack([])

    def chunks(
        self, history: Mapping[str, list[Event]], versions: Iterable[int], cap: int, model: str
    ) -> list[bytes]:
        """Per player of `history`, whose state is at the version `versions` give in turn, the
        value of its history field (`keys.history_chunk`): that version as 4 bytes big-endian,
        then the player's newest `cap` changes, newest first, each its 2-byte length and its
        entry (`pack_entry`, by `model`)."""
        return packing_with(lambda packer: self._chunks(history, versions, cap, model, packer))

    def _chunks(
        self,
        history: Mapping[str, list[Event]],
        versions: Iterable[int],
        cap: int,
        model: str,
        packer: Callable[[Any], bytes],
    ) -> list[bytes]:
        """`chunks`, packed by `packer`: an event of `markers` from its compact form, with its
        match's part (`_head`) made once."""
        compacts, heads = self._compacts, self._heads
        chunks = []
        for (player, events), version in zip(history.items(), versions):
            parts = [(version & 0xFFFFFFFF).to_bytes(4, "big")]
            for event in events if len(events) == 1 else events[::-1][:cap]:
                key = id(event)
                if key not in compacts:  # an event of no marker of the commit's
                    self.markers({"": [event]})
                compact = compacts[key]
                if compact is None or compact[1] != player or compact[2] != model:
                    body = packer(event)
                else:
                    head = heads.get(compact[0])
                    if head is None or head[3] != compact[9] or head[4] != compact[10]:
                        head = self._head(compact)
                    entry = compact[2:]  # the compact form's slots from the model on: the entry's
                    entry[0], entry[7], entry[8] = head[0], head[1], head[2]
                    if len(entry) > 10 and (expected := entry[10]) is not None:
                        at = _EXPECTED_AT.get(tuple(expected))  # its keys' index, then its values
                        if at is not None:
                            entry[10] = [at, *expected.values()]
                    body = packer(entry)
                size = len(body)
                if size < 256:
                    parts += (_FRAMES[size], body)
                elif size <= ENTRY_LIMIT:
                    parts += (size.to_bytes(2, "big"), body)
            chunks.append(b"".join(parts))
        return chunks

    def entry(self, event: Event, model: str, player_id: str) -> bytes:
        """`pack_entry` of `event` (`chunks`, without the version)."""
        return self.chunks({player_id: [event]}, (0,), 1, model)[0][4:]

    def _head(self, compact: list[Any]) -> tuple[Any, Any, Any, str, str]:
        """The part of a history entry its match's events share (match id and timestamps as
        kept), and the times it is of, from an event's compact form."""
        times, finished_at, processed_at = self._times, compact[9], compact[10]
        finished = times[finished_at] if finished_at in times else _micros(finished_at)
        processed = _micros(processed_at)
        if type(finished) is int and type(processed) is int:
            processed -= finished  # exact: both are integers
        head = self._heads[compact[0]] = (_match(compact[0]), finished, processed, finished_at, processed_at)
        return head


_FRAMES = [n.to_bytes(2, "big") for n in range(256)]


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
        value[13] if len(value) > 13 else None,  # the flag
        value[12] if len(value) > 12 else None,  # expected
        value[14] if len(value) > 14 else None,  # before rating
    )


#: Longest history entry kept (its length is framed in 2 bytes: `pack_entry`).
ENTRY_LIMIT = 0xFFFF


@functools.lru_cache(maxsize=4096)
def _micros(text: str) -> int | str:
    """A timestamp as integer microseconds when `format_timestamp` gives `text` back from them
    (then it reads back identical), else `text` itself. A time with a fraction, as most are, is
    read from its second (parsed once: `_second_micros`) and its digits; any other text as
    `_parsed_micros` reads it."""
    digits = text[20:-1]
    if text[19:20] == "." and text[-1:] == "Z" and 0 < len(digits) <= 6 and digits[-1] != "0":
        start = _second_micros(text[:19]) if digits.isascii() and digits.isdigit() else None
        if start is not None:
            exact = start + int(digits.ljust(6, "0"))
            micros = round(exact / 1_000_000 * 1e6)  # what parse_timestamp's float gives
            if micros == exact and -_EXACT < exact < _EXACT:
                return micros  # formats back to `text`: see `_EXACT`
            if _MIN_EPOCH <= micros / 1e6 <= _MAX_EPOCH:
                return micros if _formats_back(micros / 1e6) == exact else text
    return _parsed_micros(text)


def stored_time(epoch: float, text: str) -> int | str:
    """``_micros(text)`` of `text`, ``format_timestamp(epoch)``, without reading the text back
    where `epoch` is the float of whole microseconds within `_EXACT`, as a parsed time is: then
    `format_timestamp` wrote those microseconds and `_micros` reads them back (see `_EXACT`)."""
    if -_EXACT_SECONDS < epoch < _EXACT_SECONDS:
        micros = round(epoch * 1e6)
        if micros / 1e6 == epoch:
            return micros
    return _micros(text)


#: Below 2^32 seconds from the epoch (years 1834-2106) a float time is within a quarter of a
#: microsecond of the time it stands for, so `format_timestamp` writes the float of ``exact``
#: microseconds back as ``exact`` (`_formats_back` would say so).
_EXACT_SECONDS = 2**32
_EXACT = _EXACT_SECONDS * 1_000_000


@functools.lru_cache(maxsize=1024)
def _second_micros(second: str) -> int | None:
    """The epoch microseconds of `second` (``YYYY-MM-DDTHH:MM:SS``, the second below 60, before
    the year 9999), exactly; None if it is not one."""
    if _SECOND.fullmatch(second) is None or second[17:] >= "60" or second >= "9999":
        return None
    try:
        return _minute_micros(second[:17]) + int(second[17:]) * 1_000_000
    except Exception:  # not a valid time
        return None


def _parsed_micros(text: str) -> int | str:
    """`_micros` of any text: text in `format_timestamp`'s form read digit by digit, its minute
    parsed once (`_minute_micros`), the same number as parsing it whole at a fraction of the
    cost; and whether it formats back told without formatting where the text is
    `format_timestamp`'s own (`_formats_back`)."""
    try:
        found = _FORMATTED.fullmatch(text)
        if found is not None and text < "9999":  # parsing a time past the last second fails
            minute, second, fraction = found.groups()
            exact = _minute_micros(minute) + int(second) * 1_000_000 + int((fraction or "").ljust(6, "0"))
            micros = round(exact / 1_000_000 * 1e6)  # what parse_timestamp's float gives
            # `format_timestamp`'s own text of `exact` (a second below 60, no trailing zero)
            canonical = second < "60" and (fraction is None or fraction[-1] != "0")
            if canonical and _MIN_EPOCH <= micros / 1e6 <= _MAX_EPOCH:
                return micros if _formats_back(micros / 1e6) == exact else text
        else:
            micros = round(parse_timestamp(text) * 1e6)
    except Exception:  # not a timestamp of ours: kept as it is
        return text
    return micros if format_timestamp(micros / 1e6) == text else text


def _formats_back(epoch: float) -> int:
    """The microseconds `format_timestamp` writes `epoch` (within its range) as: its own
    rounding, without the text (`_micros` compares them with the text's)."""
    whole = int(epoch)
    return whole * 1_000_000 if whole == epoch else whole * 1_000_000 + round((epoch - whole) * 1e6)


#: `format_timestamp`'s text: the minute (``YYYY-MM-DDTHH:MM:``), the second, the fraction.
_FORMATTED = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:)(\d\d)(?:\.(\d{1,6}))?Z", re.ASCII)
#: Its minute and second (`_second_micros`).
_SECOND = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", re.ASCII)
_UTC_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@functools.lru_cache(maxsize=1024)
def _minute_micros(minute: str) -> int:
    """The epoch microseconds of the start of `minute` (``YYYY-MM-DDTHH:MM:``), exactly;
    `parse_timestamp`'s error if it is not a valid time."""
    start = minute + "00Z"
    parse_timestamp(start)
    return (datetime.fromisoformat(start.replace("Z", "+00:00")) - _UTC_EPOCH) // timedelta(microseconds=1)


def _text(value: Any) -> Any:
    """Inverse of `_micros`."""
    return format_timestamp(value / 1e6) if type(value) is int else value


#: The key lists of an ``expected`` a history entry keeps as its values alone (`pack_entry`).
_EXPECTED = (("win", "draw"), ("ahead", "rank"))
_EXPECTED_AT: dict[tuple[str, ...], int] = {keys: at for at, keys in enumerate(_EXPECTED)}


#: A UUID in its canonical text, `str(uuid.UUID(...))`'s: lower-case 8-4-4-4-12 hex digits.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _match(match_id: str) -> str | bytes:
    """A match id as its 16 bytes if it is a canonical UUID (reads back identical), else itself."""
    if len(match_id) == 36 and _CANONICAL_UUID.fullmatch(match_id):
        return bytes.fromhex(match_id.replace("-", ""))
    return match_id


def _event_fields(entry: list[Any], player_id: str, model: str | None) -> list[Any]:
    """Inverse of `_entry`: the compact form `stored_event` reads."""
    match_id, b_mu, b_sigma, a_mu, a_sigma, rating, games, finished, processed, late, *rest = entry
    if type(finished) is int and type(processed) is int:
        processed += finished
    if isinstance(match_id, bytes):
        match_id = str(uuid.UUID(bytes=match_id))
    fields = [match_id, player_id, model, b_mu, b_sigma, a_mu, a_sigma, rating, games]
    fields += [_text(finished), _text(processed), late]
    if rest:
        expected = rest[0]
        fields.append(
            dict(zip(_EXPECTED[expected[0]], expected[1:])) if isinstance(expected, list) else expected
        )
        fields += rest[1:]  # flag, before rating
    return fields


def pack_entry(event: Event, ladder: str, model: str, player_id: str) -> bytes:
    """`event`, a change of `player_id` of `ladder`, as a history entry (``h:<b>``, see
    `store.redis.keys`): its 2-byte big-endian length, then msgpack ``[match_id, before_mu,
    before_sigma, after_mu, after_sigma, rating, games, finished_at, processed_at, late(,
    expected, flag, before_rating)]`` — the player, the model (`model`) and the ladder are the history's, not
    repeated; a UUID match id as its 16 bytes; the timestamps as microseconds where that reads
    back identical, ``processed_at`` then after ``finished_at``; an ``expected`` of the usual
    keys as their index in `_EXPECTED` then its values — or, for any other event, its msgpack
    map. Empty (not kept) if longer than `ENTRY_LIMIT`."""
    return StoredForms(ladder).entry(event, model, player_id)


def unpack_entries(blob: bytes, ladder: str, player_id: str, model: str | None) -> list[Event]:
    """The events of a history value (`pack_entry`'s entries, newest first)."""
    events: list[Event] = []
    at = 0
    while at < len(blob):
        size = int.from_bytes(blob[at : at + 2], "big")
        value = msgpack.unpackb(blob[at + 2 : at + 2 + size], raw=False)
        at += 2 + size
        events.append(
            stored_event(_event_fields(value, player_id, model) if isinstance(value, list) else value, ladder)
        )
    return events
