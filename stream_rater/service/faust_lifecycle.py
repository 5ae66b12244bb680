"""How faust and mode start and stop a worker, with the steps of theirs the service changes:
two fixed one-second waits, and what SIGUSR1 does. With `faust_transport`, the only module
that touches faust's or mode's private parts (tests/unit/project/test_faust_private_api.py
pins each).

A worker took about 3.5 s from its start to ready and 1.07 s to stop, on an idle Apache Kafka
or Tansu; one second of each was a fixed sleep:

- faust's table manager sleeps 1 s before it starts recovery, so that tables declared just
  after the start are registered first. The worker declares no tables (its states live in
  Redis), so `TableManager` starts recovery at once.
- mode turns the event loop for 1 s after the stop, before it closes the loop, so that what
  is still scheduled (cancelled tasks, transports closing) runs. That needs a few turns of
  the loop: `Worker` turns it `LAST_TURNS_SECONDS`.
"""

from __future__ import annotations

import asyncio

import faust
from faust.tables import TableManager as FaustTableManager

#: How long the event loop turns after the stop, before it closes.
LAST_TURNS_SECONDS = 0.05


class TableManager(FaustTableManager):
    """faust's table manager; where no table is declared, recovery starts at once."""

    async def on_start(self) -> None:
        """faust's start of the table manager, without its 1 s wait where no table is declared."""
        if self:  # a table: faust's own start, wait included
            await super().on_start()
        elif not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


class Worker(faust.Worker):
    """faust's worker: SIGUSR1 calls `on_sigusr1` (instead of mode's dump of every frame's
    locals), and the loop closes `LAST_TURNS_SECONDS` after the stop."""

    def on_sigusr1(self) -> None:
        """What SIGUSR1 does; a subclass says."""

    def _on_sigusr1(self) -> None:
        self.on_sigusr1()

    async def _sentinel_task(self) -> None:
        await asyncio.sleep(LAST_TURNS_SECONDS)
