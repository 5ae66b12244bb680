"""What the archive takes from a record: events of every kind in JSON or msgpack; anything else is poison, saying why."""

from __future__ import annotations

import msgpack
import pytest

from stream_rater.archive import PoisonRecord, archived_event
from stream_rater.contracts.codecs import encode_event
from tests.archive_support import correction, events


def test_events_of_every_kind_in_json_or_msgpack_are_archived_as_they_came():
    match_event, fix = events("lad", 1)[0], correction("lad", "p1")
    for event in (match_event, fix):
        for raw in (encode_event(event), msgpack.packb(event)):
            got = archived_event(raw, "t", 3, 9)
            assert (got.wire, got.partition, got.offset) == (event, 3, 9)
            assert got.row()[:3] == ("lad", event.get("kind", "match"), event["event_id"])


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (None, "tombstone"),
        (b"", "empty"),
        (b"\x00garbage", "not JSON or msgpack"),
        (b'{"event_id": "x"}', "required"),
        (b"[1, 2]", "not JSON or msgpack"),
    ],
)
def test_a_record_that_is_not_an_event_is_poison_saying_why(raw, says):
    with pytest.raises(PoisonRecord, match=says):
        archived_event(raw, "t", 0, 0)
