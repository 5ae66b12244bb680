"""A dead letter: a record the worker cannot rate, copied to the dead-letter topic with where
it came from and why, bounded so that it always fits; and the worker's log of them, one line
each, rate-limited (`DeadLetterLog`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import orjson

from stream_rater.contracts import Limits
from stream_rater.kafka import Record
from stream_rater.service.order_watch import Message

log = logging.getLogger(__name__)


class DeadLetter(NamedTuple):
    """A dead letter on its way: the consumed record, the reason, extra headers, and — for a
    match the model could not rate — its ladder, the error, and `sent`: it is with the broker
    already (sent before any later match of its ladder committed)."""

    message: Message
    reason: str
    headers: list[tuple[str, bytes]]
    ladder: str | None = None
    error: BaseException | None = None
    sent: bool = False


class DeadLetterLog:
    """Logs each dead letter once, with where it came from, its ladder if known and why — at
    most `burst` lines per `interval` seconds; the ones beyond are counted and summed up in one
    line (``… and K more dead letters in the last T s``) once the interval is over, so that a
    flood of bad records cannot flood the log (``stream_rater_dead_letters_total`` counts all)."""

    def __init__(
        self, *, burst: int = 10, interval: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst, self.interval, self.clock = burst, interval, clock
        self.started = clock()
        self.logged = 0
        self.held = 0

    def note(self, letters: Iterable[DeadLetter]) -> None:
        """Log `letters` (produced to the dead-letter topic just now), within the rate."""
        self.tick()
        for letter in letters:
            if self.logged >= self.burst:
                self.held += 1
                continue
            self.logged += 1
            m = letter.message
            ladder = letter.ladder or _ladder_in(m.value or b"")
            log.warning(
                "dead letter %s[%d]@%d%s: %s",
                m.topic,
                m.partition,
                m.offset,
                "" if ladder is None else f" (ladder {ladder!r})",
                letter.reason,
                exc_info=letter.error,
            )

    def tick(self) -> None:
        """End the interval if it is over: sum up the dead letters it did not log."""
        now = self.clock()
        if now - self.started < self.interval:
            return
        if self.held:
            log.warning("… and %d more dead letters in the last %.0f s", self.held, now - self.started)
        self.started, self.logged, self.held = now, 0, 0


def _ladder_in(value: bytes) -> str | None:
    """The ladder an invalid record names, if it is a JSON object with a short string there."""
    try:
        event = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    ladder = event.get("ladder") if isinstance(event, dict) else None
    return ladder if isinstance(ladder, str) and len(ladder) <= 128 else None


def dead_letter(
    topic: str,
    message: Message,
    reason: str,
    extra: Sequence[tuple[str, bytes]] = (),
    *,
    limit: int = Limits().max_event_bytes,
) -> Record:
    """The original record with its key, value and headers, plus where it came from and why.

    The key, the value and the original headers (together) are each cut to `limit` bytes
    (``max_event_bytes``), so that a record near the broker's size limit still fits as a dead
    letter (a ``MessageSizeTooLargeError`` would be retried forever and wedge the worker).
    ``sr-truncated`` then gives the original value's length, ``sr-key-truncated`` the key's,
    and ``sr-headers-dropped`` how many original headers were left out.
    """
    value, key = message.value or b"", message.key
    original = list(getattr(message, "headers", None) or [])
    kept = _headers_within(original, limit)
    headers = [
        *kept,
        ("sr-reason", reason.encode()[:limit]),
        ("sr-origin-topic", str(message.topic).encode()),
        ("sr-origin-partition", str(message.partition).encode()),
        ("sr-origin-offset", str(message.offset).encode()),
        *extra,
    ]
    timestamp = getattr(message, "timestamp", None)
    if timestamp is not None:
        headers.append(("sr-origin-timestamp", repr(timestamp).encode()))
    if len(value) > limit:
        headers.append(("sr-truncated", str(len(value)).encode()))
    if key is not None and len(key) > limit:
        headers.append(("sr-key-truncated", str(len(key)).encode()))
    if len(kept) < len(original):
        headers.append(("sr-headers-dropped", str(len(original) - len(kept)).encode()))
    return topic, None if key is None else key[:limit], value[:limit], headers


def _headers_within(headers: Sequence[tuple[str, bytes]], limit: int) -> list[tuple[str, bytes]]:
    """The leading `headers` whose names and values add up to at most `limit` bytes."""
    kept, size = [], 0
    for name, data in headers:
        size += len(name.encode()) + len(data or b"")
        if size > limit:
            break
        kept.append((name, data))
    return kept
