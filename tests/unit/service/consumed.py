"""A consumed record as faust's Message presents it, by partition and offset (the builder of
the stall-watch and wait-dump tests)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Record:
    partition: int
    offset: int
    topic: str = "matches"
    key: bytes | None = None
    value: bytes | None = None
