"""Timestamps on the wire: RFC 3339 strings or epoch seconds in, RFC 3339 ``Z`` strings out.

Strings are RFC 3339 date-times with ``Z`` or a numeric offset (``T``, ``t`` or a space between
date and time); digits past the microsecond are truncated; leap seconds (``:60``) are
rejected. Times are kept as float epoch seconds rounded to the microsecond and must lie in
years 0001–9999 (UTC).
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timedelta
from typing import Any

from stream_rater.contracts._checks import _fail, _finite, _kind, _show


def format_timestamp(epoch: float) -> str:
    """Epoch seconds as an RFC 3339 UTC string, to the microsecond, trailing zeros dropped
    (``2004-08-06T18:13:50Z``, ``2004-08-06T18:13:50.25Z``)."""
    if _MIN_EPOCH <= epoch <= _MAX_EPOCH:
        whole = int(epoch)
        if whole == epoch:  # whole seconds, the common case: `_microseconds` would add 0
            day, second = divmod(whole, 86400)  # `_time_text`, inlined
            minute, second = divmod(second, 60)
            return _day_text(day) + _HOUR_MINUTE[minute] + _SECONDS_Z[second]
        micros = whole * 1_000_000 + round((epoch - whole) * 1e6)  # `_microseconds`, inlined
    else:  # beyond the range validation allows: what datetime makes of it, or its error
        micros = (_EPOCH + timedelta(seconds=epoch) - _EPOCH) // _MICROSECOND
    seconds, micros = divmod(micros, 1_000_000)
    text = _time_text(seconds)
    if micros:
        text += f".{micros:06d}".rstrip("0")
    return text + "Z"


def parse_timestamp(value: Any, path: str = "finished_at") -> float:
    """An RFC 3339 string or epoch seconds → epoch seconds rounded to the microsecond;
    raises `ValidationError` (at `path`) for anything else."""
    return _timestamp(value, path)


_EPOCH = datetime(1970, 1, 1)


_SECOND = timedelta(seconds=1)


_MICROSECOND = timedelta(microseconds=1)


_TWO_DIGITS = tuple(f"{i:02d}" for i in range(60))


_SECONDS_Z = tuple(f"{i:02d}Z" for i in range(60))


#: ``HH:MM:`` of each minute of a day.
_HOUR_MINUTE = tuple(f"{hour:02d}:{minute:02d}:" for hour in range(24) for minute in range(60))


_MIN_EPOCH = (datetime.min - _EPOCH) / _SECOND


_MAX_EPOCH = (datetime(9999, 12, 31, 23, 59, 59) - _EPOCH) / _SECOND


#: RFC 3339 date-time; `datetime.fromisoformat` then checks the calendar.
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)\Z",
    re.ASCII,
)


def _timestamp(value: Any, path: str) -> float:
    kind = type(value)
    if kind is float and _MIN_EPOCH <= value <= _MAX_EPOCH:  # the common case (not NaN)
        return _microseconds(value) / 1_000_000
    if kind is str:
        return _parse_rfc3339(value, path)
    if kind is int or kind is float:
        epoch = _finite(value, "", path)
        if not _MIN_EPOCH <= epoch <= _MAX_EPOCH:
            _fail(path, "is out of range (years 0001-9999)")
        return _microseconds(epoch) / 1_000_000
    _fail(path, f"must be an RFC 3339 date-time string or epoch seconds, got {_kind(value)}")


def _microseconds(epoch: float) -> int:
    """``timedelta(seconds=epoch)`` in microseconds, computed as it does but without the
    object: the whole seconds exactly, plus the fraction times 10**6 rounded half to even
    (`round`, like timedelta, rounds ties to the even total: 10**6 is even)."""
    whole = int(epoch)  # truncated, like math.modf; epoch - whole is then exact
    return whole * 1_000_000 + round((epoch - whole) * 1e6)


def _time_text(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of the `seconds`-th second after 1970-01-01T00:00: the day's
    text (cached: events stream in roughly in time order) and the minute's and second's of
    the day (tables), without a cache of minutes (a new minute would miss it)."""
    day, second = divmod(seconds, 86400)
    minute, second = divmod(second, 60)
    return _day_text(day) + _HOUR_MINUTE[minute] + _TWO_DIGITS[second]


@functools.lru_cache(maxsize=1024)
def _day_text(day: int) -> str:
    """``YYYY-MM-DDT`` of the `day`-th day after 1970-01-01."""
    return (_EPOCH + timedelta(days=day)).isoformat()[:11]


def _parse_rfc3339(text: str, path: str) -> float:
    if _RFC3339.match(text) is None:
        _fail(path, f"{_show(text)} is not an RFC 3339 date-time (like 2004-08-06T18:13:50Z)")
    try:
        epoch = datetime.fromisoformat(text.upper()).timestamp()
    except ValueError as e:
        _fail(path, f"{_show(text)} is not a valid date-time: {e}")
    if not _MIN_EPOCH <= epoch <= _MAX_EPOCH:
        _fail(path, "is out of range (years 0001-9999)")
    return epoch
