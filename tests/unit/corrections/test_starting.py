"""Where a correction starts: the voids it leaves, ``--since`` read as a checkpoint id or a
time, and the refusal of what the topic and the checkpoints cannot serve."""

from __future__ import annotations

import pytest

from stream_rater.checkpoints import Checkpoint, LadderState
from stream_rater.corrections.planning import Correction
from stream_rater.corrections.starting import TooOld, _since, refuse_too_old, voids_after
from stream_rater.kafka import DeletedHead, HistoryTruncated

HEAD = DeletedHead("matches", 0, 250)


def test_the_voids_after_a_correction():
    current = {"a": {"reason": "r"}}
    assert set(voids_after(Correction("void", "l", ("b",)), current)) == {"a", "b"}
    assert voids_after(Correction("unvoid", "l", ("a",)), current) == {}
    assert voids_after(Correction("rerate", "l"), current) == current


def test_since_is_a_checkpoint_id_or_a_time():
    assert _since("ck-20260101T000000Z-abcdef") == ("ck-20260101T000000Z-abcdef", None)
    assert _since("2026-01-01T00:00:00Z") == (None, 1767225600.0)
    with pytest.raises(ValueError, match=r"^--since yesterday: expected a checkpoint id"):
        _since("yesterday")


def test_a_start_the_topic_still_holds_is_not_refused():
    start = Checkpoint("l", {0: 300}, LadderState())
    refuse_too_old(Correction("void", "l", ("m",)), [HEAD], start, files_supplied=False, checkpointed=True)


def test_a_start_the_topic_lost_is_refused_in_one_line():
    void = Correction("void", "l", ("m100",))
    with pytest.raises(TooOld) as refused:
        refuse_too_old(void, [HEAD], None, files_supplied=False, checkpointed=True)
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith(
        "ladder 'l': partition 0 of topic 'matches' starts at offset 250; offsets 0..249 were deleted "
        "(retention?), and no checkpoint kept is older than the void of 'm100'"
    )
    old = Checkpoint("l", {0: 100}, LadderState())
    with pytest.raises(TooOld, match=f"checkpoint {old.id} before it needs offsets"):
        refuse_too_old(void, [HEAD], old, files_supplied=False, checkpointed=True)
    with pytest.raises(HistoryTruncated, match=r"give the rest with --history FILE$"):
        refuse_too_old(void, [HEAD], None, files_supplied=False, checkpointed=False)
    refuse_too_old(void, [HEAD], None, files_supplied=True, checkpointed=True)
