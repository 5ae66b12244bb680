"""A ladder's history read back from the matches topic, validated as the worker validates."""

from __future__ import annotations

import json

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import Limits
from stream_rater.kafka import LogRecord, ladder_history
from tests.helpers import duel

LADDERS = Ladders([Ladder("eu", "trueskill")])
AT = 1_700_000_000.0


def record(offset: int, finished_at: float, appended_at: float) -> LogRecord:
    value = json.dumps(duel(f"m{offset}", "a", "b", ladder="eu", at=finished_at)).encode()
    return LogRecord(0, offset, int(appended_at * 1000), b"eu", value)


def test_a_match_finished_beyond_max_clock_skew_after_its_record_is_skipped_as_the_worker_dead_letters_it():
    """Decided by the record's timestamp, not the reader's clock: a replay years later agrees."""
    records = [record(0, AT, AT), record(1, AT + 7 * 3600, AT + 1), record(2, AT + 250, AT + 2)]
    history = ladder_history(records, LADDERS, "eu", Limits(max_clock_skew=300))
    assert [m.match_id for m in history.matches] == ["m0", "m2"] and history.rejected == ["0@1"]
    assert len(ladder_history(records, LADDERS, "eu", Limits(max_clock_skew=0)).matches) == 3
