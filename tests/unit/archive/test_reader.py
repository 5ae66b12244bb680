"""The archive reader's messages: the URL without its password, on one line."""

from __future__ import annotations

from stream_rater.archive.reader import one_line, safe_url


def test_messages_name_the_url_without_its_password_on_one_line():
    assert safe_url("postgresql://u:secret@h:5/db") == "postgresql://u:***@h:5/db"
    assert safe_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert (
        one_line(OSError("connection failed\n\tIs the server running?"))
        == "connection failed Is the server running?"
    )
