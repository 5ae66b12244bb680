"""Working with the dead-letter topic: list what is there and why, and send selected dead
letters back to the matches topic after a fix (``stream-rater dlq list|redrive``).

Redrive is exactly once across runs: each re-published record carries the header
``sr-redriven-from: <dlq topic>[<partition>]@<offset>``, and a redrive first reads the matches
topic for those headers and skips every dead letter already sent back. A crash between two
sends is therefore safe to repeat. A redriven record that is still invalid is dead-lettered
again as a new dead letter (with the header, so `list` shows it was a redrive).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from stream_rater.config.settings import Settings
from stream_rater.contracts import DEFAULT_LADDER, match_key
from stream_rater.kafka import LogRecord, Record, read_log, send_records

REDRIVEN_FROM = "sr-redriven-from"
#: Characters of a dead letter's value `DeadLetter.line` shows.
PREVIEW = 80
#: The control characters (C0, DEL, C1): text with one is shown as bytes by `printable`.
_CONTROL = frozenset([*range(0x20), *range(0x7F, 0xA0)])


def printable(data: bytes) -> str:
    """`data` safe to show on a terminal: valid UTF-8 text without control characters as it
    is; anything else as ``bytes:`` and its bytes, printable ASCII kept and every other byte
    (and the backslash) hex-escaped, e.g. ``bytes:{\\x00\\xff`` — so no escape sequence or
    NUL reaches the terminal, and the prefix says the text is not the value itself."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        text = None
    if text is not None and not any(ord(c) in _CONTROL for c in text):
        return text
    return "bytes:" + "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in data)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record of the dead-letter topic and what its headers say."""

    record: LogRecord
    topic: str

    @property
    def headers(self) -> dict[str, str]:
        return {name: value.decode(errors="replace") for name, value in self.record.headers}

    @property
    def where(self) -> str:
        """This dead letter's own position: ``<dlq topic>[partition]@offset``."""
        return f"{self.topic}[{self.record.partition}]@{self.record.offset}"

    @property
    def reason(self) -> str:
        return self.headers.get("sr-reason", "")

    def line(self) -> str:
        """One line for a terminal: where, from where, why, the key and the value's start, each
        `printable` (a garbage record's bytes never reach the terminal raw)."""
        h = {name: printable(value) for name, value in self.record.headers}
        origin = f"{h.get('sr-origin-topic', '?')}[{h.get('sr-origin-partition', '?')}]@{h.get('sr-origin-offset', '?')}"
        key = "(none)" if self.record.key is None else printable(self.record.key)
        preview = printable(self.record.value)
        if len(preview) > PREVIEW:
            preview = preview[:PREVIEW] + "…"
        return f"{self.where} from {origin}: {h.get('sr-reason', '')} | key {key} | {preview}"

    def to_dict(self) -> dict[str, object]:
        """For ``dlq list --json``: the key and value `printable` (null: no key)."""
        return {
            "where": self.where,
            "headers": self.headers,
            "key": None if self.record.key is None else printable(self.record.key),
            "value": printable(self.record.value),
        }

    def redrive_record(self, matches_topic: str) -> Record:
        """The original bytes, keyed by the event's ladder when it names one (else its old key)."""
        key = self.record.key
        try:
            event = json.loads(self.record.value)
        except ValueError:
            event = None
        if isinstance(event, dict):
            ladder = event.get("ladder")
            key = match_key(ladder if isinstance(ladder, str) and ladder else DEFAULT_LADDER)
        return matches_topic, key, self.record.value, [(REDRIVEN_FROM, self.where.encode())]


async def dead_letters(settings: Settings, reason: str | None = None) -> list[DeadLetter]:
    """Every dead letter now in the topic, oldest first per partition; only those whose
    reason contains `reason` if given."""
    records, _ = await read_log(settings, settings.topic_dlq)
    found = [DeadLetter(r, settings.topic_dlq) for r in records]
    return [d for d in found if reason is None or reason in d.reason]


async def redriven(settings: Settings) -> set[str]:
    """Positions of the dead letters already sent back to the matches topic."""
    records, _ = await read_log(settings, settings.topic_matches)
    return {value.decode() for r in records for name, value in r.headers if name == REDRIVEN_FROM}


async def redrive(
    settings: Settings, selected: Iterable[DeadLetter], dry_run: bool = False
) -> tuple[int, int]:
    """Re-publish the `selected` dead letters not redriven before; (sent — or, with
    `dry_run`, that would be sent — and skipped as redriven already)."""
    done = await redriven(settings)
    selected = list(selected)
    todo = [d for d in selected if d.where not in done]
    if dry_run or not todo:
        return len(todo), len(selected) - len(todo)
    await send_records(settings, [d.redrive_record(settings.topic_matches) for d in todo])
    return len(todo), len(selected) - len(todo)
