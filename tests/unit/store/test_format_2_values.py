"""Stored format 2's compact values: a state packs within Redis's 64-byte listpack limit and
reads back bit for bit; a history entry leaves out what its key says and reads back equal."""

from __future__ import annotations

import math

import pytest

from stream_rater.contracts import rating_changed
from stream_rater.store.stored_events import pack_entry, unpack_entries
from stream_rater.store.values import PACKED_LIMIT, PlayerState


def _bits(state: PlayerState) -> tuple[object, ...]:
    """`state` with each float as its type and bits (so -0.0, nan, 1.0 vs 1 differ)."""
    return tuple((type(v), v.hex()) if isinstance(v, float) else (type(v), v) for v in state)


STATES = [
    PlayerState(25.0, 8.333, 0, None, 1),
    PlayerState(1500.0, None, 3, None, 1),
    PlayerState(-0.0, -0.0, 0, -0.0, 0, -0.0, -0.0, -0.0),
    PlayerState(math.inf, math.nan, 1, 2.0**62, 1, None, -math.inf, 2.0**62),
    PlayerState(2.0**63, -(2.0**63), 5, 1e300, 7, 1e-300, 5e-324, 1.0),
    PlayerState(
        1812.123456789, 62.5, 65_535, 1_764_000_000.123456, 65_535, 0.0599912, 2000.5, 1_700_000_000.25
    ),
    PlayerState(
        1812.123456789, 62.5, 2**32 - 1, 1_764_000_000.0, 2**32 - 1, 0.0599912, 2000.5, 1_700_000_000.0
    ),
    PlayerState(1.1, 2.2, 2**32 - 1, 1_764_000_000.5, 2**32 - 1, 0.3, 4.4, 1_764_000_000.5),
]


@pytest.mark.parametrize("state", STATES)
def test_a_state_packs_within_the_listpack_limit_and_reads_back_bit_for_bit(state: PlayerState) -> None:
    packed = state.pack()
    assert len(packed) <= PACKED_LIMIT
    assert _bits(PlayerState.unpack(packed)) == _bits(state)


def test_the_one_state_over_the_limit_is_the_extreme_the_docstring_names() -> None:
    """Only a Glicko-2 state with 65,536+ games and versions, non-integral times and a peak
    at another time than the last match packs to 65 bytes (a listpack then becomes a hash
    table: memory only); it still reads back bit for bit."""
    state = PlayerState(1.1, 2.2, 2**16, 1_764_000_000.5, 2**16, 0.3, 4.4, 1_700_000_000.5)
    assert len(state.pack()) == PACKED_LIMIT + 1
    assert _bits(PlayerState.unpack(state.pack())) == _bits(state)


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
