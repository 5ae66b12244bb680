"""Which deployment a store belongs to, and in which stored format it is written.

Every key of a Redis store starts with its prefix (``STREAM_RATER_REDIS_PREFIX``, default
``sr``), so deployments sharing one Redis each use their own. The store keeps one record for
the whole prefix, ``<prefix>:deployment`` (a hash; see `StateStore.deployment_record`):

- ``format`` — the stored format its data is written in. Format 1 is the layout documented in
  `redis_store`; a store with no record is format 1 (its layout predates the record).
- ``topic`` — the matches topic its ladders were applied from. Each ladder's positions
  (``p:<partition>`` in its ``meta``) are offsets of that topic, so binding the whole prefix
  to one topic is what names their topic: no per-commit cost, and the stored form of the
  positions stays what it was.

A worker, and a tool that applies or rebuilds from the topic, `bind` the store with its matches
topic: the missing fields are written at first use, then the record is checked. A tool that only
reads the store checks the format alone. Either refuses, in one line, a store of another topic
or of a newer format (written by a newer release: this one could misread it).
"""

from __future__ import annotations

import re

from stream_rater.config.settings import env_name
from stream_rater.store.base import StateStore

#: The stored format this release writes and reads (README "Operations → Upgrading").
STORE_FORMAT = 1

#: A key prefix: letters, digits, ``_``, ``-`` and ``.``. No ``{`` or ``}`` (the ladder must
#: stay the cluster hash tag), no ``:`` (the separator) and no glob characters (the prefix is
#: part of the patterns the store scans by).
_PREFIX = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class StoreRefused(RuntimeError):
    """The store belongs to another deployment or to a newer release: nothing is written."""


def check_prefix(prefix: str) -> str:
    """`prefix` if it may start a Redis key of the store, else a `ValueError` naming the
    variable."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"{env_name('redis_prefix')}={prefix!r}: a key prefix is 1 to 64 letters, digits, '_', '-' or '.'"
        )
    return prefix


async def bind(store: StateStore, topic: str | None) -> dict[str, str]:
    """Check that `store` is of this release's format and, when `topic` is given, of the
    matches topic `topic` — recording both first if the store has no record of them — and
    return its record; `StoreRefused` in one line otherwise."""
    fields = {"format": str(STORE_FORMAT), "topic": topic} if topic else None
    record = await store.deployment_record(fields)
    found = int(record.get("format", 1))
    if found > STORE_FORMAT:
        raise StoreRefused(
            f"{store.namespace} is in stored format {found}, newer than format {STORE_FORMAT} "
            "that this release of stream-rater reads: run the newer release (README: Operations → Upgrading)"
        )
    bound = record.get("topic")
    if topic and bound and bound != topic:
        raise StoreRefused(
            f"{store.namespace} holds the ladders of matches topic {bound!r}, not {topic!r}: "
            f"give this deployment its own {env_name('redis_prefix')}, or use topic {bound!r}"
        )
    return record
