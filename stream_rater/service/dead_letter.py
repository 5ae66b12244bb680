"""A dead letter: a record the worker cannot rate, copied to the dead-letter topic with where
it came from and why, bounded so that it always fits."""

from __future__ import annotations

from collections.abc import Sequence

from stream_rater.contracts import Limits
from stream_rater.kafka import Record
from stream_rater.service.order_watch import Message


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
