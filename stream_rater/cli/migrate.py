"""``migrate --to 2|3``: upgrade a Redis store in place to a stored format this release reads
(`store.deployment`; deploy/README.md "Operations → Upgrading")."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from stream_rater.cli.common import Subcommands, configured_ladders, store_flag, with_store
from stream_rater.config.ladders import Ladders

if TYPE_CHECKING:
    from stream_rater.store.redis import RedisStore


def register(sub: Subcommands) -> None:
    """Add ``migrate`` to the subcommands `sub`."""
    p = sub.add_parser(
        "migrate",
        help="upgrade a Redis store in place to a stored format this release reads (deploy/README.md "
        "'Upgrading')",
    )
    store_flag(p)
    p.add_argument(
        "--to",
        type=int,
        required=True,
        choices=[2, 3],
        help="the stored format to upgrade to: 2 from format 1, no worker running; 3 from 2 once every "
        "worker runs this release (no data changes)",
    )
    p.set_defaults(func=cmd_migrate, upgrading=True)


def cmd_migrate(args: argparse.Namespace) -> int:
    """``migrate --to 2``: rewrite a format-1 store into format 2 (`store.redis.upgrade_to_2`,
    which first moves the markers of the layout before the markers hash, and recounts the
    leaderboards' running sums), then trim the idle players off the leaderboards of the
    configured ladders with an activity rule. ``migrate --to 3``: raise the record of a format-2
    store to 3 (`store.redis.raise_format`: no data changes, workers may run)."""
    from stream_rater.store.redis import RedisStore

    ladders = configured_ladders(args)

    async def migrate(store: object) -> str:
        if not isinstance(store, RedisStore):
            raise ValueError("--store: only a Redis store has a stored format to upgrade (redis://…)")
        return await (_raise_to_3(store) if args.to == 3 else _upgrade_to_2(store, ladders))

    print(with_store(args, migrate))
    return 0


async def _upgrade_to_2(store: RedisStore, ladders: Ladders) -> str:
    """`cmd_migrate`'s ``--to 2``: its line."""
    from stream_rater.store.redis import upgrade_to_2

    moved = await upgrade_to_2(store)
    moved["idle players off the leaderboards"] = 0
    for ladder in ladders.values():
        since = ladder.rules.active_since(time.time())
        if since is not None:
            moved["idle players off the leaderboards"] += await store.trim_board(ladder.name, since)
    return "upgraded to stored format 2: " + ", ".join(f"{n} {kind}" for kind, n in moved.items())


async def _raise_to_3(store: RedisStore) -> str:
    """`cmd_migrate`'s ``--to 3``: its line; a format-1 store is refused (its upgrade rewrites
    data, with no worker running: ``--to 2`` first)."""
    from stream_rater.store.deployment import UPGRADE_COMMAND, StoreRefused, stored_format
    from stream_rater.store.redis import raise_format

    if await stored_format(store) == 1:
        raise StoreRefused(
            f"{store.namespace} is in stored format 1: upgrade it with `{UPGRADE_COMMAND}` first, "
            "no worker running (deploy/README.md: Operations → Upgrading)"
        )
    was = await raise_format(store, 3)
    if was >= 3:
        return f"{store.namespace} is in stored format {was} already: nothing changed"
    return (
        f"upgraded to stored format 3 (was {was or 'unrecorded'}): no data changed; workers started "
        "from now on move unproduced events aside, those of a release before refuse the store"
    )
