"""The Redis store's connections pack commands as redis-py's hiredis serializer does, bytes
for bytes, whatever the arguments (`store.HiredisPacking`)."""

from __future__ import annotations

from typing import Any

import pytest
from redis.connection import HiredisRespSerializer
from redis.exceptions import DataError

from stream_rater.store.redis.resp import HiredisPacking


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "a" * 40, 2, "k1", "k2", b"\x93\x01\xff", "m1", 1.5, 7),
        ("HSET", "k", "", b"-" * 4096, "ü", b""),
        ("CONFIG GET", "maxmemory"),  # a command name of two words
        (b"PING",),
        ("SET", bytearray(b"k"), memoryview(b"v")),  # hiredis refuses these: the serializer's
    ],
)
def test_commands_pack_as_redis_pys_hiredis_serializer_packs_them(args: tuple[Any, ...]) -> None:
    assert HiredisPacking().pack_command(*args) == HiredisRespSerializer().pack(*args)


def test_an_argument_of_no_redis_type_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(DataError):
        HiredisPacking().pack_command("SET", "k", True)
