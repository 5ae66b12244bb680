"""`dlq list`'s lines: keys and values shown safely on a terminal."""

from __future__ import annotations

import json

from stream_rater.kafka import LogRecord
from stream_rater.offline.dead_letters import DeadLetter, printable

HEADERS = (
    (b"sr-reason", b"decode: not JSON"),
    (b"sr-origin-topic", b"matches"),
    (b"sr-origin-partition", b"3"),
    (b"sr-origin-offset", b"17"),
)


def letter(key: bytes | None, value: bytes) -> DeadLetter:
    headers = tuple((name.decode(), data) for name, data in HEADERS)
    return DeadLetter(LogRecord(3, 5, 0, key, value, headers), "matches-dlq")


def test_a_text_key_and_value_are_shown_as_text():
    """Not ``key b'default'``; UTF-8 text (accents included) as it is."""
    line = letter(b"default", '{"ladder": "Zürich"}'.encode()).line()
    assert line == (
        'matches-dlq[3]@5 from matches[3]@17: decode: not JSON | key default | {"ladder": "Zürich"}'
    )


def test_garbage_bytes_are_hex_escaped_and_never_reach_the_terminal_raw():
    """NULs, an escape sequence and bytes that are not UTF-8 are shown as escapes."""
    garbage = b"\x00\x00\x1b[2J\xff\xfe\\ok"
    line = letter(b"\x00k\xff", garbage).line()
    assert line.endswith("| key bytes:\\x00k\\xff | bytes:\\x00\\x00\\x1b[2J\\xff\\xfe\\x5cok")
    assert all(c.isprintable() for c in line)
    assert printable(b"line\nbreak") == "bytes:line\\x0abreak"


def test_the_json_listing_has_the_same_safe_key_and_value():
    listed = letter(None, b"\x00\x01").to_dict()
    assert listed["key"] is None and listed["value"] == "bytes:\\x00\\x01"
    assert json.loads(json.dumps(listed)) == listed


def test_a_long_value_is_cut_after_80_characters_not_inside_a_character():
    line = letter(b"k", ("é" * 100).encode()).line()
    assert line.endswith("| " + "é" * 80 + "…")
