"""The archive's parts that need no PostgreSQL: migration files, what counts as a poison
record, failure labels, and messages that name the URL without its password."""

from __future__ import annotations

import msgpack
import pytest

from stream_rater.archive import ArchiveSchemaError, PoisonRecord, archived_event, migrations
from stream_rater.archive.reader import one_line, safe_url
from stream_rater.contracts.codecs import encode_event
from stream_rater.service.archiver import _reason
from tests.archive_support import correction, events


def test_the_shipped_migrations_are_numbered_from_one_without_gaps():
    assert [m.version for m in migrations()] == list(range(1, len(migrations()) + 1))


@pytest.mark.parametrize("name", ["1_events.sql", "0002-events.sql", "0003_Events.sql"])
def test_a_misnamed_migration_is_refused(tmp_path, name):
    (tmp_path / name).write_text("SELECT 1")
    with pytest.raises(ArchiveSchemaError, match=r"NNNN_name\.sql"):
        migrations(tmp_path)


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


def test_failures_are_labelled_by_sqlstate_class_or_type():
    class Refused(Exception):
        sqlstate = "25006"

    assert (_reason(Refused()), _reason(OSError())) == ("sqlstate_25", "OSError")


def test_messages_name_the_url_without_its_password_on_one_line():
    assert safe_url("postgresql://u:secret@h:5/db") == "postgresql://u:***@h:5/db"
    assert safe_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert (
        one_line(OSError("connection failed\n\tIs the server running?"))
        == "connection failed Is the server running?"
    )
