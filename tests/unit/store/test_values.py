"""A state packs within Redis's 64-byte listpack limit and reads back bit for bit."""

from __future__ import annotations

import math

import pytest

from stream_rater.store.values import PACKED_LIMIT, PlayerState, RedisTimeouts, RedisTLS


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


def test_tls_files_go_to_a_rediss_client_and_are_refused_for_a_plain_url() -> None:
    """The files of `RedisTLS` as redis-py's ``ssl_*`` options; given with a redis:// URL they
    would be ignored, so they are an error; a key password on a cluster too (redis-py's cluster
    client takes none)."""
    timeouts = RedisTimeouts(password="pw", tls=RedisTLS("ca.pem", "c.pem", "c.key", "kp"))
    options = timeouts.client_options("rediss://h:6380/0")
    assert options["password"] == "pw" and options["ssl_ca_certs"] == "ca.pem"
    assert (options["ssl_certfile"], options["ssl_keyfile"], options["ssl_password"]) == (
        "c.pem",
        "c.key",
        "kp",
    )
    assert "pw" not in repr(timeouts) and "kp" not in repr(timeouts)
    with pytest.raises(ValueError, match="not rediss://"):
        timeouts.client_options("redis://h:6379/0")
    with pytest.raises(ValueError, match="KEY_PASSWORD"):
        timeouts.client_options("rediss+cluster://h:1,h:2")
    assert "ssl_ca_certs" not in RedisTimeouts().client_options("redis://h:6379/0")
