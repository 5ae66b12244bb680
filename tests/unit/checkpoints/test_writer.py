"""Which checkpoints the writer drops once a new one is verified: those older than the
correction window but the newest of those."""

from __future__ import annotations

from stream_rater.checkpoints.format import Manifest
from stream_rater.checkpoints.writer import expired


def manifest(ident: str, created: float) -> Manifest:
    return Manifest("l", ident, 1, "", {0: int(created)}, created, 0)


def test_the_newest_checkpoint_older_than_the_window_is_kept():
    kept = [manifest("a", 10), manifest("b", 20), manifest("c", 30), manifest("d", 40)]
    assert [m.id for m in expired(kept, since=25)] == ["a"]
    assert expired(kept, since=5) == []
    assert [m.id for m in expired(kept, since=50)] == ["a", "b", "c"]
