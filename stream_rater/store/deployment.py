"""Which deployment a store belongs to, and in which stored format it is written.

Every key of a Redis store starts with its prefix (``STREAM_RATER_REDIS_PREFIX``, default
``sr``), so deployments sharing one Redis each use their own.

- **The stored format** is one record for the whole prefix, ``<prefix>:deployment`` (a hash,
  field ``format``; `StateStore.deployment_record`). Format 3 is the layout documented in
  `store.redis.keys`; format 2 the same without ``unproduced:older`` (a commit copies the
  staged events in where events of an earlier commit are still unproduced, rather than moving
  those aside) and without the field '' of a quality sums hash: what a release of format 2
  reads. Format 1 is the layout before the compact buckets. A store with no record is format 1
  if it has a key of format 1's layout (which predates the record), else new (a release of
  format 2 records its format when its first worker starts): it gets the record at first use,
  of format 2 — a store found empty may have lost its data, record included, while workers of
  the release before still run on it — except where a worker finds it new (no ladder, and no
  offsets committed by its consumer group: `service.app.store_looks_lost`), which records this
  release's format. This release reads formats 2 and 3, and writes a format-2
  store as format 2 (`RedisStore.stored_format`), so that workers of both releases share it
  during a rolling upgrade; ``stream-rater migrate --to 3`` raises the record once every
  worker runs this release (`store.redis.migrations.raise_format`), and older workers then
  refuse the store. A format-1 store is refused, naming the upgrade: ``stream-rater migrate
  --to 2`` with no worker running (`store.redis.migrations.upgrade_to_2`; deploy/README.md
  "Operations → Upgrading"). The record never goes down.
- **The matches topic** is recorded per ladder, in the ladder's ``control`` hash (field
  ``topic``; `StateStore.ladder_topics`): a ladder's positions (``p:<partition>`` in its
  ``meta``) are offsets of the one topic its matches come from, so that field names their topic.
  Recording it per ladder rather than once per prefix costs the same (written once at start,
  never per commit) and leaves the stored positions as they were; and it binds exactly what
  would be ambiguous — one prefix may hold ladders of several topics (the test suites share one
  Redis that way), but no ladder is applied from two.

A worker binds the ladders it is configured with at start, and a tool that reads a ladder's
matches from the topic (rebuild, verify, void, rerate, season) binds that ladder: the missing
fields are written (a ladder's topic once the store holds the ladder), then the records are
checked. Any other tool checks the format alone. Each
refuses, in one line, a ladder recorded with another topic or a store of a newer format (written
by a newer release: this one could misread it), and writes nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from stream_rater.config.settings import env_name
from stream_rater.store.base import StateStore

#: The stored format of this release's layout (deploy/README.md "Operations → Upgrading").
STORE_FORMAT = 3
#: The earliest stored format this release reads (and writes as it is: see the docstring).
EARLIEST_FORMAT = 2

#: The command that upgrades a store of format 1 in place, with no worker running.
UPGRADE_COMMAND = f"stream-rater migrate --to {EARLIEST_FORMAT}"

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


async def stored_format(store: StateStore, new: int = EARLIEST_FORMAT) -> int:
    """The stored format `store` is in: its record's, else told by its layout (1), else `new`
    (a store with neither: new, or emptied)."""
    record = await store.deployment_record()
    return int(record["format"]) if "format" in record else (await store.unrecorded_format() or new)


async def bind(
    store: StateStore,
    topic: str | None = None,
    ladders: Sequence[str] = (),
    upgrading: bool = False,
    new: int = EARLIEST_FORMAT,
) -> int:
    """Check that `store` is of a format this release reads and that each of `ladders` is of
    the matches `topic`; record the format where the store has none (`new`, with a `topic` only), and
    `topic` for each of `ladders` the store holds without one (a ladder not applied yet has no
    positions to name, and a worker is configured with ladders it may never see: each is bound
    by the first worker or tool started once it exists). `StoreRefused` in one line otherwise.
    `upgrading` (the upgrade command) lets format 1 pass. Returns the store's format."""
    found = await stored_format(store, new)
    if found < EARLIEST_FORMAT and not upgrading:
        raise StoreRefused(
            f"{store.namespace} is in stored format {found}: upgrade it to format {EARLIEST_FORMAT} "
            f"with `{UPGRADE_COMMAND}`, no worker running (deploy/README.md: Operations → Upgrading)"
        )
    if topic:  # what is recorded once written: another process may have recorded first
        found = int((await store.deployment_record({"format": str(found)}))["format"])
    if found > STORE_FORMAT:
        raise StoreRefused(
            f"{store.namespace} is in stored format {found}, newer than format {STORE_FORMAT} "
            "that this release of stream-rater reads: run the newer release (deploy/README.md: Operations → Upgrading)"
        )
    if not (topic and ladders):
        return found
    recorded = await store.ladder_topics(ladders, None)
    held = sorted(set(ladders) & set(await store.ladders()) - set(recorded))
    if held:
        recorded.update(await store.ladder_topics(held, topic))
    other = {ladder: bound for ladder, bound in recorded.items() if bound != topic}
    if other:
        ladder, bound = sorted(other.items())[0]
        raise StoreRefused(
            f"ladder {ladder!r} of {store.namespace} holds matches of topic {bound!r}, not {topic!r}"
            f"{f' (and {len(other) - 1} more ladders)' if len(other) > 1 else ''}: give this deployment "
            f"its own {env_name('redis_prefix')}, or use topic {bound!r}"
        )
    return found
