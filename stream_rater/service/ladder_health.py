"""`LadderHealth`: why ladders are not being applied, in one place — those the store lost
(`stopped`, with why), those the worker is rebuilding, and the store refusing writes
(`StoreRefusal`). The batch handler, the `LossGuard` and the automatic rebuilder report to
it, readiness reads `reasons`; each is built from it, so no wiring is patched afterwards.
Neither a loss nor a refusal is ever a reason to dead-letter a match
(docs/pages/operations/failure-model.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection

from stream_rater.config.settings import Settings
from stream_rater.processor import StoreLost
from stream_rater.service import metrics
from stream_rater.service.auto_rebuild import AutoRebuild
from stream_rater.service.fault_reactions import server_refusal

log = logging.getLogger(__name__)


class StoreRefusal:
    """Whether Redis refuses the worker's writes now (`fault_reactions.server_refusal`), what
    it said and since when: the handler notes each refusal and lifts it at the next store
    success; readiness reports `reason`. Logged once per outage (and again if the refusal changes)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.code: str | None = None
        self.message = ""
        self.since = 0.0

    def note(self, exc: BaseException) -> None:
        """Count a refusal by its error code (`server_refusal`; else the exception's class, for
        a row of the table that holds on something else); the first of an outage is logged."""
        code = server_refusal(exc) or type(exc).__name__
        metrics.STORE_REFUSALS.labels(code.lower()).inc()
        message = str(exc) if str(exc).startswith(code) else f"{code} {exc}"
        if self.code != code:
            log.error(
                "the store refuses writes (%s); the batch is held and retried until it accepts them", message
            )
        if self.code is None:
            self.since = self.clock()
            metrics.STORE_REFUSING.set(1)
        self.code, self.message = code, message

    def lift(self) -> None:
        """The store accepted a batch: the outage, if any, is over."""
        if self.code is None:
            return
        log.warning("the store accepts writes again after %.0f s of %s", self.clock() - self.since, self.code)
        self.code = None
        metrics.STORE_REFUSING.set(0)

    def reason(self) -> str | None:
        """Why the worker is not ready, while the store refuses; else None."""
        if self.code is None:
            return None
        return f"the store refuses writes: {self.message} (for {self.clock() - self.since:.0f} s)"


class LadderHealth:
    """The ladders not being applied and why, and the store's refusal (module docstring).

    With `rebuild` (``on_store_loss = rebuild``: `auto_rebuild.TopicRebuild`, or any
    ``rebuild(ladder)``), each reported loss starts an `AutoRebuild` (`rebuilder`), which holds
    the ladder in `rebuilding` while it runs and reports here how its attempt ended."""

    def __init__(
        self,
        settings: Settings | None = None,
        rebuild: Callable[[str], Awaitable[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: Ladder → why it is not being applied (a lost store); readiness reports it.
        self.stopped: dict[str, str] = {}
        self.refusal = StoreRefusal(clock)
        #: Ladder → what to raise while the worker rebuilds it (`LossGuard.hold`).
        self.rebuilding: dict[str, StoreLost] = {}
        self.rebuilder = (
            None
            if rebuild is None
            else AutoRebuild(rebuild, settings or Settings(), holds=self.rebuilding, report=self.report_loss)
        )

    def report_loss(self, exc: StoreLost) -> None:
        """Note a ladder not applied because the store lost it: readiness, metrics, the log
        (counted and logged once per loss), and the automatic rebuild if there is one."""
        if exc.ladder not in self.stopped:
            log.error("%s", exc)
            metrics.STORE_LOSSES.labels(exc.ladder).inc()
        note = self.rebuilder.lost(exc) if self.rebuilder is not None else None
        self.stopped[exc.ladder] = str(exc) if note is None else f"{exc}; {note}"
        metrics.LADDERS_STOPPED.set(len(self.stopped))

    def recovered(self, ladder: str) -> None:
        """The store has `ladder` again (rebuilt): readiness no longer names it."""
        self.stopped.pop(ladder, None)
        metrics.LADDERS_STOPPED.set(len(self.stopped))

    def applied(self, ladders: Collection[str], lost: Collection[str] = ()) -> None:
        """A store action on `ladders` succeeded: a refusal is over, and those of them that
        were stopped are applied again, but not those still `lost` or being rebuilt (a ladder
        held on a parked partition stays stopped while other partitions' batches go through)."""
        self.refusal.lift()
        back = sorted(
            ladder
            for ladder in self.stopped
            if ladder in ladders and ladder not in lost and ladder not in self.rebuilding
        )
        if back:
            log.warning("ladders %s are applied again", ", ".join(back))
            for ladder in back:
                self.recovered(ladder)

    def reasons(self) -> list[str]:
        """Why readiness fails on this account: the store refusing writes, each ladder stopped."""
        refused = self.refusal.reason()
        reasons = [] if refused is None else [refused]
        return reasons + [f"not applying: {reason}" for _, reason in sorted(self.stopped.items())]
