"""Byte-identical outputs (issue #46): the golden replay (`tests.unit.perf.golden`) gives the
digest the code before the speed work gave."""

from __future__ import annotations

from tests.unit.perf.golden import DIGEST, golden_digest


def test_events_and_states_are_byte_identical_to_the_golden_digest() -> None:
    assert golden_digest() == DIGEST.read_text().strip()
