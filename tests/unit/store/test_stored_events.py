"""The Redis store's stored form of events: compact for plain rating-changed events, the map
for anything else, and every event reads back equal to the one written (bytes included)."""

from __future__ import annotations

import math

import msgpack
from hypothesis import example, given
from hypothesis import strategies as st

from stream_rater.contracts import (
    ValidationError,
    correction_changed,
    format_timestamp,
    parse_timestamp,
    rating_changed,
    with_mode,
)
from stream_rater.contracts.codecs import encode_event
from stream_rater.contracts.timestamps import _MAX_EPOCH, _MIN_EPOCH
from stream_rater.store.stored_events import (
    _EXACT,
    StoredForms,
    _micros,
    _second_micros,
    pack_entry,
    pack_event,
    pack_events,
    stored_event,
    stored_time,
    unpack_entries,
)

LADDER = "duel"
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


def read_back(packed: bytes, ladder: str = LADDER):
    return stored_event(msgpack.unpackb(packed, raw=False), ladder)


@given(
    st.text(min_size=1, max_size=12),
    st.text(min_size=1, max_size=12),
    finite,
    st.none() | finite,
    finite,
    st.none() | finite,
    finite,
    st.integers(min_value=1, max_value=10**9),
    st.booleans(),
)
def test_plain_events_round_trip_exactly_and_smaller(
    match_id, player_id, b_mu, b_sigma, a_mu, a_sigma, rating, games, late
):
    event = rating_changed(
        match_id, LADDER, player_id, "trueskill", (b_mu, b_sigma), (a_mu, a_sigma), rating, games,
        "2004-08-06T18:13:50Z", "2026-11-26T09:00:00.123456Z", late,
    )  # fmt: skip
    packed = pack_event(event, LADDER)
    again = read_back(packed)
    assert again == event and list(again) == list(event)
    assert encode_event(again) == encode_event(event)
    assert isinstance(msgpack.unpackb(packed, raw=False), list)
    assert len(packed) < 0.7 * len(msgpack.packb(event, use_bin_type=True))


@given(finite, st.none() | finite, finite, st.booleans(), st.booleans(), st.booleans())
def test_before_rating_rides_in_the_compact_form_and_history_entries(
    before_rating, b_sigma, rating, late, provisional, expected
):
    """An event with ``before.rating`` and ``rating_delta`` (with or without ``expected`` and
    ``provisional``) is compact, in a marker and in a history entry, and reads back equal,
    field for field; ``rating_delta`` is rebuilt as rating - before.rating."""
    event = rating_changed(
        "m1", LADDER, "a", "trueskill", (25.0, b_sigma), (27.0, b_sigma), rating, 3, "2004-08-06T18:13:50Z",
        "2026-11-26T09:00:00.5Z", late, provisional if provisional else None,
        {"win": 0.25, "draw": 0.5} if expected else None, before_rating,
    )  # fmt: skip
    assert event["before"]["rating"] == before_rating and event["rating_delta"] == rating - before_rating
    packed = pack_event(event, LADDER)
    compact = msgpack.unpackb(packed, raw=False)
    assert isinstance(compact, list) and compact[14] == before_rating
    assert list(read_back(packed).items()) == list(event.items())
    [again] = unpack_entries(pack_entry(event, LADDER, "trueskill", "a"), LADDER, "a", "trueskill")
    assert list(again.items()) == list(event.items())


def test_expected_rides_in_the_compact_form_and_twelve_item_arrays_still_read():
    """An event with ``expected`` (either form, late or not) is compact and reads back equal;
    an array written before events carried it (12 items) reads back without it."""
    for expected, late in (({"win": 0.25, "draw": 0.5}, False), ({"ahead": 0.5, "rank": 2.0}, True)):
        event = rating_changed(
            "m1",
            LADDER,
            "a",
            "trueskill",
            (25.0, 8.3),
            (27.0, 7.0),
            6.0,
            1,
            "t",
            "t",
            late,
            expected=expected,
        )
        packed = pack_event(event, LADDER)
        assert isinstance(msgpack.unpackb(packed, raw=False), list)
        assert read_back(packed) == event
        assert list(read_back(packed)) == list(event)
    older = msgpack.unpackb(
        pack_event(
            rating_changed("m1", LADDER, "a", "elo", (1.0, None), (2.0, None), 2.0, 1, "t", "t"), LADDER
        )
    )
    assert len(older) == 12 and "expected" not in read_back(msgpack.packb(older))
    assert isinstance(msgpack.unpackb(pack_event({**event, "expected": None}, LADDER), raw=False), dict)


def test_the_provisional_flag_rides_in_the_compact_form_with_or_without_expected():
    """A ladder whose rules mark provisional players: its events stay compact (markers and
    histories alike) and read back equal, field for field and in order."""
    for expected in (None, {"win": 0.25, "draw": 0.5}):
        for provisional in (True, False):
            event = rating_changed(
                "m1",
                LADDER,
                "a",
                "trueskill",
                (25.0, 8.3),
                (27.0, 7.0),
                6.0,
                1,
                "t",
                "t",
                provisional=provisional,
                expected=expected,
            )
            packed = pack_event(event, LADDER)
            assert isinstance(msgpack.unpackb(packed, raw=False), list)
            assert list(read_back(packed).items()) == list(event.items())
            entry = pack_entry(event, LADDER, "trueskill", "a")
            assert isinstance(msgpack.unpackb(entry[2:], raw=False), list)
            assert unpack_entries(entry, LADDER, "a", "trueskill") == [event]
    assert isinstance(msgpack.unpackb(pack_event({**event, "provisional": None}, LADDER), raw=False), dict)


def test_anything_else_is_stored_as_its_map():
    plain = rating_changed("m1", LADDER, "a", "elo", (1500.0, None), (1516.0, None), 1516.0, 3, "t", "t")
    others = [
        correction_changed(
            "c1", LADDER, "a", "elo", (1500.0, None), (1510.0, None), 1510.0, 3, "t", {"void": ["m1"]}
        ),
        {**plain, "delta": 99.0},  # not what the compact form would rebuild
        {**plain, "event_id": "other"},
        {**plain, "extra": 1},
        {k: v for k, v in plain.items() if k != "rating"},
        {**plain, "late": False},  # a plain event carries late only when true
        {"event_id": "m1:b"},
    ]
    for event in others:
        packed = pack_event(event, LADDER)
        assert isinstance(msgpack.unpackb(packed, raw=False), dict)
        assert read_back(packed) == event
    assert isinstance(msgpack.unpackb(pack_event(plain, "another-ladder"), raw=False), dict)


def test_a_marker_is_the_array_of_its_events_and_old_maps_still_read():
    plain = rating_changed("m1", LADDER, "a", "elo", (1500.0, None), (1516.0, None), 1516.0, 3, "t", "t")
    marker = msgpack.unpackb(pack_events([plain, {"event_id": "x"}], LADDER), raw=False)
    assert [stored_event(e, LADDER) for e in marker] == [plain, {"event_id": "x"}]
    assert msgpack.unpackb(pack_events([], LADDER)) == []
    written_before = msgpack.packb(plain, use_bin_type=True)  # the map layout of older versions
    assert read_back(written_before) == plain


def test_a_history_entry_leaves_out_the_player_model_and_ladder_and_reads_back_equal() -> None:
    plain = rating_changed(
        "m1",
        "L",
        "p",
        "elo",
        (25.0, None),
        (26.5, None),
        1.5,
        1,
        "2026-01-02T03:04:05.25Z",
        "2026-01-02T03:04:06Z",
    )
    odd = rating_changed(
        "m2", "L", "p", "elo", (1.0, 2.0), (3.0, 4.0), 5.0, 2, "not a time", "1970-01-01T00:00:00Z"
    )
    foreign = {"event_id": "x", "kind": "correction"}
    entries = [pack_entry(e, "L", "elo", "p") for e in (plain, odd, foreign)]
    assert len(entries[0]) < len(pack_entry(plain, "L", "other", "p"))  # another model: its map
    assert b"elo" not in entries[0] and b"p" not in entries[0]  # leaves them out
    assert unpack_entries(b"".join(entries), "L", "p", "elo") == [plain, odd, foreign]
    assert pack_entry(plain, "L", "elo", "q") == pack_entry(plain, "L", "", "")  # not p's: its map


def test_a_history_entry_of_a_uuid_match_with_expectations_is_compact_and_reads_back_equal() -> None:
    match_id = "0b7c8a3e-2f4d-4c1a-9e2b-5d6f7a8b9c0d"
    times = ("2026-01-02T03:04:05.123Z", "2026-01-02T03:04:07.5Z")
    events = [
        rating_changed(match_id, "L", "p", "ts", (25.0, 8.3), (26.1, 7.9), 2.4, 7, *times, expected=expected)
        for expected in ({"win": 0.4, "draw": 0.1}, {"ahead": 0.5, "rank": 2.0}, {"draw": 0.1, "win": 0.4})
    ]
    entries = [pack_entry(e, "L", "ts", "p") for e in events]
    assert len(entries[0]) <= 102 and match_id.encode() not in entries[0]  # 36 characters: 16 bytes
    assert unpack_entries(b"".join(entries), "L", "p", "ts") == events
    assert [list(e["expected"]) for e in unpack_entries(entries[2], "L", "p", "ts")] == [["draw", "win"]]


@given(
    st.one_of(
        st.floats(min_value=-62135596800.0, max_value=253402300799.0),
        st.integers(min_value=-62135596800, max_value=253402300799).map(float),
    ),
    st.sampled_from(["", "+00:00", "0Z", " ", "60Z", "60.5Z", ".\u0663Z", ".5Z", ".1234567Z"]),
)
def test_a_timestamp_is_read_digit_by_digit_as_parsing_it_whole_reads_it(epoch, mutation):
    """`_micros`'s fast path gives what parsing the whole text gives, at any time of years
    1-9999 (float rounding included) and for text that is not `format_timestamp`'s."""
    text = format_timestamp(epoch)
    if mutation == "+00:00":
        text = text[:-1] + mutation
    elif mutation == " ":
        text = text.replace("T", " ")
    elif mutation.startswith("."):  # another fraction: a non-ASCII digit, 7 digits
        text = text[:19] + mutation
    elif mutation:
        text = text[:-1] + mutation if mutation == "0Z" else text[:17] + mutation
    whole = round(parse_timestamp(text) * 1e6) if _parses(text) else None
    expected = whole if whole is not None and format_timestamp(whole / 1e6) == text else text
    _micros.cache_clear()
    _second_micros.cache_clear()
    assert _micros(text) == expected and type(_micros(text)) is type(expected)


@given(
    st.one_of(
        st.floats(min_value=_MIN_EPOCH, max_value=_MAX_EPOCH),  # any time, far past and future
        st.integers(min_value=int(_MIN_EPOCH), max_value=int(_MAX_EPOCH)).map(float),  # whole seconds
        st.builds(  # microseconds as parsing gives them, with trailing zeros
            lambda micros, zeros: micros // 10**zeros * 10**zeros / 1e6,
            st.integers(min_value=int(_MIN_EPOCH) * 10**6, max_value=int(_MAX_EPOCH) * 10**6),
            st.integers(min_value=0, max_value=6),
        ),
        st.builds(  # about the `_EXACT` boundary, both sides of the epoch
            lambda micros, sign: sign * micros / 1e6,
            st.integers(min_value=_EXACT - 10**7, max_value=_EXACT + 10**7),
            st.sampled_from([1, -1]),
        ),
        st.floats(min_value=2**32 - 2, max_value=2**32 + 2)
        | st.floats(min_value=-(2**32) - 2, max_value=-(2**32) + 2),
    )
)
@example(0.0)
@example(-0.0)
@example(2.0**32)
@example(-(2.0**32))
@example(math.nextafter(2.0**32, 0))
@example(math.nextafter(-(2.0**32), 0))
@example(_MIN_EPOCH)
@example(_MAX_EPOCH)
@example(1_700_000_000.1)
@example(1_700_000_000.9999996)
@example(-1.5)
def test_a_time_stored_from_its_float_is_the_one_read_from_its_text(epoch):
    """`stored_time` (the planner's float time) gives what `_micros` reads from its
    `format_timestamp` text: the same integer microseconds, or the text itself."""
    text = format_timestamp(epoch)
    stored = stored_time(epoch, text)
    assert stored == _micros(text) and type(stored) is type(_micros(text))


def _parses(text: str) -> bool:
    try:
        parse_timestamp(text)
    except ValidationError:
        return False
    return True


@given(
    st.sampled_from([LADDER, "other"]),
    st.floats(width=64) | st.integers(-3, 3),
    st.none() | st.floats(width=64),
    st.booleans() | st.just(1),
    st.none() | st.booleans() | st.just(0),
    st.none() | st.just({"win": 0.5, "draw": 0.1}) | st.just([0.5]),
)
@example(LADDER, float("nan"), None, False, None, None)
@example(LADDER, 26.0, float("nan"), True, True, {"win": 0.5, "draw": 0.1})
def test_an_events_fields_pack_as_its_map_does(ladder, mu, before_rating, late, provisional, expected):
    """The planner hands the store each event's fields (`Commit.event_fields`): packed from
    them, a marker and a history entry are the bytes packing the event itself gives, NaN,
    odd values and another ladder's events included."""
    fields = (
        "m-1", ladder, "a", "trueskill", (25.0, 8.3), (mu, 7.9), 12.5, 3,
        "2024-01-02T03:04:05Z", "2024-01-02T03:04:06.5Z", late, provisional, expected, before_rating,
    )  # fmt: skip
    event = rating_changed(*fields)
    from_fields = StoredForms(LADDER, {id(event): fields})
    from_map = StoredForms(LADDER)
    assert from_fields.marker([event]) == from_map.marker([event])
    assert from_fields.entry(event, "trueskill", "a") == from_map.entry(event, "trueskill", "a")


def test_an_event_changed_after_it_was_built_packs_as_its_map() -> None:
    """A moded ladder's events are turned into the player's own in place (`with_mode`) after
    the planner recorded their fields: those fields no longer describe them, so their map is
    packed."""
    fields = (
        "m-1", LADDER, "mode@a", "trueskill", (25.0, 8.3), (26.0, 7.9), 12.5, 3,
        "2024-01-02T03:04:05Z", "2024-01-02T03:04:06Z", False, None, {"win": 0.5, "draw": 0.1}, 12.0,
    )  # fmt: skip
    event = with_mode(rating_changed(*fields), "mode", "a")
    assert StoredForms(LADDER, {id(event): fields}).marker([event]) == msgpack.packb(
        [event], use_bin_type=True
    )
