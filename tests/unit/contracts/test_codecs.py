"""JSON and msgpack codecs: detection, limits, rejection of non-standard input (stream_rater.contracts.codecs)."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import Limits, MatchFinished, ValidationError, parse_match
from stream_rater.contracts.codecs import FORMATS, DecodeError, decode, decode_match, encode, encode_event

EVENT: dict[str, Any] = {
    "match_id": "m-ü",
    "finished_at": "2004-08-06T18:13:50Z",
    "teams": [{"rank": 1, "players": [{"id": "p1", "weight": 0.5}]}, {"rank": 2, "players": [{"id": "p2"}]}],
}


def decode_error(raw: bytes, limits: Limits = Limits()) -> str:
    with pytest.raises(DecodeError) as info:
        decode(raw, limits)
    return str(info.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_encode_then_decode_round_trips(fmt: str) -> None:
    """decode(encode(obj, fmt)) == obj in both formats, with the format detected from the bytes."""
    assert decode(encode(EVENT, fmt)) == EVENT


def test_json_encoding_is_compact_utf8() -> None:
    """JSON output has no spaces and keeps non-ASCII text as UTF-8."""
    raw = encode({"a": [1, 2], "b": "ü"})
    assert raw == '{"a":[1,2],"b":"ü"}'.encode()


def test_an_event_is_encoded_as_orjson_writes_it_in_bytes_of_its_own() -> None:
    event = {
        "event_id": "m1:ann",
        "player_id": "ann",
        "before": {"mu": 25.0, "sigma": 8.333333333333334},
        "é": [1, None],
    }
    encoded = encode_event(event)
    assert type(encoded) is bytes and encoded == orjson.dumps(event)
    assert json.loads(encoded) == event


def test_json_encoding_refuses_nan() -> None:
    """encode refuses NaN rather than write JSON other parsers reject."""
    with pytest.raises(ValueError):
        encode({"a": float("nan")})


def test_unknown_format_is_an_error() -> None:
    """encode names the known formats when given another."""
    with pytest.raises(ValueError, match="unknown format 'xml' \\(known: json, msgpack\\)"):
        encode(EVENT, "xml")


def test_json_may_start_with_whitespace() -> None:
    """A JSON object after leading whitespace is detected as JSON."""
    assert decode(b" \r\n\t" + encode(EVENT)) == EVENT


@pytest.mark.parametrize("size", [0, 1, 15, 16, 65535, 65536])
def test_msgpack_maps_of_every_header_are_detected(size: int) -> None:
    """msgpack maps with fixmap, map16 and map32 headers are all detected as msgpack."""
    obj = {f"k{i}": i for i in range(size)}
    raw = (
        msgpack.packb(obj)
        if size < 65536
        else b"\xdf\x00\x01\x00\x00"
        + b"".join(msgpack.packb(f"k{i}") + msgpack.packb(i) for i in range(size))
    )
    assert decode(raw, Limits(max_event_bytes=len(raw))) == obj


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "not JSON or msgpack: empty"),
        (
            b"[1, 2]",
            "not JSON or msgpack: starts with byte 0x5b, expected '{' (a JSON object) or a msgpack map",
        ),
        (
            msgpack.packb([1, 2]),
            "not JSON or msgpack: starts with byte 0x92, expected '{' (a JSON object) or a msgpack map",
        ),
        (
            b"\xef\xbb\xbf{}",
            "not JSON or msgpack: starts with byte 0xef, expected '{' (a JSON object) or a msgpack map",
        ),
        (b'{"a": NaN}', "invalid JSON: NaN is not a JSON number"),
        (b'{"a": -Infinity}', "invalid JSON: -Infinity is not a JSON number"),
        (b'{"a": 1', "invalid JSON: Expecting ',' delimiter: line 1 column 8 (char 7)"),
        (b'{"a": 1} x', "invalid JSON: Extra data: line 1 column 10 (char 9)"),
        (b'{"a": "\xff"}', "invalid JSON: not UTF-8 (byte 0xff at 7)"),
        (b"\x81\xa1a", "invalid msgpack: Unpack failed: incomplete input"),
        (msgpack.packb({"a": 1}) + b"\x00", "invalid msgpack: "),
        (b"\x81\x01\x02", "invalid msgpack: "),
        (b"\x81\xa1a\xa2\xff\xfe", "invalid msgpack: "),
    ],
    ids=[
        "empty",
        "json array",
        "msgpack array",
        "bom",
        "nan",
        "infinity",
        "truncated json",
        "trailing json",
        "bad utf-8 json",
        "truncated msgpack",
        "trailing msgpack",
        "integer key",
        "bad utf-8 msgpack",
    ],
)
def test_undecodable_bytes_are_rejected_with_a_reason(raw: bytes, message: str) -> None:
    """Bytes that are not one JSON object or msgpack map raise DecodeError saying why."""
    assert decode_error(raw).startswith(message)


def test_size_limit_is_checked_before_decoding() -> None:
    """An event over the byte limit is refused by size, before any parsing."""
    assert decode_error(b"x" * 70000) == "event is 70000 bytes, limit 65536"
    assert decode_error(encode(EVENT), Limits(max_event_bytes=10)).startswith("event is ")


def test_deep_nesting_is_a_decode_error() -> None:
    """Pathologically nested input is a DecodeError, not a RecursionError."""
    depth = 30000
    with pytest.raises(DecodeError):
        decode(b'{"a":' + b"[" * depth + b"]" * depth + b"}")
    assert decode_error(b"\x81\xa1a" + b"\x91" * depth + b"\xc0") == "invalid msgpack: StackError"


def test_huge_json_number_decodes_to_infinity_and_fails_validation() -> None:
    """A JSON number beyond float range is rejected by validation as non-finite."""
    event = json.loads(json.dumps(EVENT))
    raw = encode(event).replace(b'"rank":1', b'"rank":1e400')
    with pytest.raises(ValidationError, match=r"^teams\[0\].rank: must be a finite number$"):
        decode_match(raw, Ladders())


def test_msgpack_binary_is_not_a_string() -> None:
    """A msgpack bin value where a string belongs is a validation error naming the field."""
    raw = msgpack.packb({**EVENT, "match_id": b"m1"}, use_bin_type=True)
    with pytest.raises(ValidationError, match=r"^match_id: must be a string, got binary$"):
        decode_match(raw, Ladders())


def test_decode_match_is_format_independent() -> None:
    """The same event as JSON and as msgpack gives the same MatchFinished."""
    ladders = Ladders()
    assert decode_match(encode(EVENT, "json"), ladders) == decode_match(encode(EVENT, "msgpack"), ladders)


def test_decode_match_validates() -> None:
    """decode_match applies the same validation as parse_match."""
    with pytest.raises(ValidationError, match=r"^teams: needs at least 2 teams, got 1$"):
        decode_match(encode({**EVENT, "teams": EVENT["teams"][:1]}, "msgpack"), Ladders())


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_decode_error(raw: bytes) -> None:
    """Any bytes either decode or raise DecodeError; nothing else escapes."""
    try:
        decode(raw)
    except DecodeError:
        pass


@given(st.sampled_from(FORMATS), st.data())
def test_corrupted_events_raise_only_value_errors(fmt: str, data: st.DataObject) -> None:
    """An encoded event with any byte changed is decoded and validated or rejected with DecodeError/ValidationError."""
    raw = bytearray(encode(EVENT, fmt))
    position = data.draw(st.integers(0, len(raw) - 1))
    raw[position] = data.draw(st.integers(0, 255))
    try:
        decode_match(bytes(raw), Ladders())
    except (DecodeError, ValidationError):
        pass


def _outcome(call: Any, *args: Any) -> tuple[Any, ...]:
    try:
        return ("match", call(*args))
    except ValueError as e:
        return (type(e), str(e))


def _reference_decode_match(raw: bytes, ladders: Ladders) -> MatchFinished:
    """decode_match through the standard parser only, as it was first written."""
    return parse_match(decode(raw), ladders)


EDGE_VALUES = [
    b"-9223372036854775809",
    b"18446744073709551616",
    b"1" + b"0" * 30,
    b"1e400",
    b"NaN",
    b'"\\ud800"',
    b"[" * 990 + b"]" * 990,
    b"[" * 2000 + b"]" * 2000,
    b"12345678901234567890.5",
    b"1.5",
    b"true",
    b'"p1"',
]
EDGE_PLACES = [
    (b'"match_id":"m1"', b'"match_id":%s'),
    (b'"rank":1', b'"rank":%s'),
    (b'"weight":0.5', b'"weight":0.5,"rated":%s'),
    (b'"finished_at":"2004-08-06T18:13:50Z"', b'"finished_at":%s'),
    (b'"match_id":"m1"', b'"match_id":"m1","extra":%s'),
]


@pytest.mark.parametrize("value", EDGE_VALUES)
@pytest.mark.parametrize("place", EDGE_PLACES)
def test_decode_match_equals_the_standard_parser_on_edge_values(
    value: bytes, place: tuple[bytes, bytes]
) -> None:
    """Where orjson reads differently (integers beyond 64 bits, deep nesting) or refuses (lone surrogates,
    NaN, 1e400), decode_match still gives the standard parser's match or error."""
    raw = encode({**EVENT, "match_id": "m1"}).replace(place[0], place[1] % value)
    assert _outcome(decode_match, raw, Ladders()) == _outcome(_reference_decode_match, raw, Ladders())


@given(st.data())
def test_decode_match_equals_the_standard_parser(data: st.DataObject) -> None:
    """A corrupted JSON event decodes to the same match, or fails with the same error, as through the
    standard parser."""
    plain = [{"rank": 1, "players": [{"id": "p1"}]}, {"rank": 2, "players": [{"id": "p2"}]}]
    raw = bytearray(encode({**EVENT, "teams": plain}))
    tokens = [
        b"1",
        b"-",
        b"9" * 20,
        b"e400",
        b"0",
        b'"',
        b"[",
        b"]",
        b"{",
        b"}",
        b",",
        b"null",
        b"\\ud800",
        b" ",
    ]
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(raw)))
        token = data.draw(st.sampled_from(tokens))
        raw[position : position + data.draw(st.integers(0, 2))] = token
    assert _outcome(decode_match, bytes(raw), Ladders()) == _outcome(
        _reference_decode_match, bytes(raw), Ladders()
    )


#: EVENT's finished_at in epoch seconds.
FINISHED = 1_091_816_030.0


@pytest.mark.parametrize("after", [-3600.0, 0.0, 299.0, 300.0])
def test_a_match_finished_up_to_max_clock_skew_after_its_record_is_accepted(after: float):
    raw = json.dumps(EVENT).encode()
    assert decode_match(raw, Ladders(), record_time=FINISHED - after).finished_at == FINISHED


def test_a_match_finished_beyond_max_clock_skew_after_its_record_names_both_times_and_the_setting():
    """7 hours after the record's (broker's) timestamp: refused, whatever the reader's clock."""
    with pytest.raises(ValidationError) as info:
        decode_match(json.dumps(EVENT).encode(), Ladders(), record_time=FINISHED - 7 * 3600)
    assert str(info.value) == (
        "finished_at: 2004-08-06T18:13:50Z is 25200 s after its record's timestamp 2004-08-06T11:13:50Z, "
        "more than max_clock_skew (300 s, STREAM_RATER_MAX_CLOCK_SKEW)"
    )


@pytest.mark.parametrize(
    ("record_time", "limits"),
    [(None, Limits()), (-0.001, Limits()), (0.0, Limits()), (FINISHED - 7 * 3600, Limits(max_clock_skew=0))],
    ids=["a file line", "a record without a timestamp", "a zero timestamp", "the check off"],
)
def test_no_record_timestamp_or_a_zero_skew_checks_nothing(record_time: float | None, limits: Limits):
    raw = json.dumps(EVENT).encode()
    assert decode_match(raw, Ladders(), limits, record_time=record_time).finished_at == FINISHED
