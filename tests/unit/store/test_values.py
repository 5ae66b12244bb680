"""A state packs within Redis's 64-byte listpack limit and reads back bit for bit."""

from __future__ import annotations

import math

import pytest

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
