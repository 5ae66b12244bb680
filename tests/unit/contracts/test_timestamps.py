"""RFC 3339 timestamps: parsing to epoch seconds and formatting back (stream_rater.contracts.timestamps)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream_rater.contracts import (
    format_timestamp,
    parse_timestamp,
)


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("1970-01-01T00:00:00Z", 0.0),
        ("1970-01-01t01:00:00+01:00", 0.0),
        ("1970-01-01 00:00:00-00:30", 1800.0),
        ("1872-11-30T00:00:00Z", -3063744000.0),
        ("2004-08-06T18:13:50.123456789z", 1091816030.123456),
        ("0001-01-01T00:00:00Z", -62135596800.0),
        ("9999-12-31T23:59:59Z", 253402300799.0),
    ],
)
def test_rfc3339_strings_parse_to_epoch_seconds(text: str, epoch: float) -> None:
    """RFC 3339 date-times (Z or offsets, t/T/space, any fraction truncated to microseconds) parse to UTC epoch seconds."""
    assert parse_timestamp(text) == epoch


@pytest.mark.parametrize(
    ("epoch", "text"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (-3063744000, "1872-11-30T00:00:00Z"),
        (1091816030.25, "2004-08-06T18:13:50.25Z"),
        (1091816030.0000004, "2004-08-06T18:13:50Z"),
        (-62135596800, "0001-01-01T00:00:00Z"),
    ],
)
def test_format_timestamp_writes_utc_z_strings(epoch: float, text: str) -> None:
    """format_timestamp writes RFC 3339 UTC with four-digit years and the fraction only when non-zero."""
    assert format_timestamp(epoch) == text


def test_epoch_numbers_are_rounded_to_the_microsecond() -> None:
    """Epoch numbers are kept to the microsecond, like strings, so a match survives to_dict unchanged."""
    assert parse_timestamp(1.0000004) == 1.0
    assert parse_timestamp(1) == 1.0


def _reference_format(epoch: float) -> str:
    """format_timestamp as it was first written, through datetime (the reference)."""
    t = datetime(1970, 1, 1) + timedelta(seconds=epoch)
    text = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    if t.microsecond:
        text += f".{t.microsecond:06d}".rstrip("0")
    return text + "Z"


HALF_MICROSECONDS = st.builds(
    lambda us: (us + 0.5) / 1e6, st.integers(-62135596800 * 10**6, 253402300799 * 10**6)
)


@given(st.floats(min_value=-62135596800, max_value=253402300799.99) | HALF_MICROSECONDS)
def test_timestamps_round_to_the_microsecond_like_timedelta(epoch: float) -> None:
    """Epoch numbers are parsed and formatted with timedelta's rounding (half to even), ties included."""
    assert format_timestamp(epoch) == _reference_format(epoch)
    if epoch <= 253402300799:
        assert parse_timestamp(epoch) == timedelta(seconds=epoch) / timedelta(seconds=1)


@pytest.mark.parametrize("epoch", [1e12, -1e12, float("nan"), float("inf")])
def test_format_timestamp_fails_like_datetime_out_of_range(epoch: float) -> None:
    """Out of datetime's range (or not finite), format_timestamp raises what datetime raises."""
    with pytest.raises((OverflowError, ValueError)) as expected:
        _reference_format(epoch)
    with pytest.raises(expected.type, match=f"^{re.escape(str(expected.value))}$"):
        format_timestamp(epoch)


@given(st.floats(min_value=-62135596800, max_value=253402300799))
def test_timestamps_round_trip(epoch: float) -> None:
    """Any in-range epoch, once parsed, formats to a string that parses back to the same float."""
    parsed = parse_timestamp(epoch)
    assert parse_timestamp(format_timestamp(parsed)) == parsed
