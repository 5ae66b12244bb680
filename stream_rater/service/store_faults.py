"""What the batch path does with a store or broker that fails: which errors are transient
(retried quietly with backoff) and `StoreRefusal`, the state of a Redis that refuses writes
(OOM, READONLY, MISCONF, …: `store.status.server_refusal`) that readiness reports. Neither is
ever a reason to dead-letter a match (deploy/README.md, "Failure model")."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from stream_rater.processor import TooManyConflicts
from stream_rater.service import metrics

log = logging.getLogger(__name__)


def _transient_errors() -> tuple[type[BaseException], ...]:
    import redis.exceptions
    from aiokafka.errors import KafkaError

    errors: list[type[BaseException]] = [
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.BusyLoadingError,
        KafkaError,
        ConnectionError,
        TimeoutError,
        TooManyConflicts,
    ]
    try:
        from faust.exceptions import ProducerSendError

        errors.append(ProducerSendError)
    except ImportError:  # pragma: no cover - faust is a runtime dependency
        pass
    return tuple(errors)


TRANSIENT_ERRORS = _transient_errors()


class StoreRefusal:
    """Whether Redis refuses the worker's writes now (`server_refusal`), what it said and
    since when: the handler notes each refusal and lifts it at the next store success;
    readiness reports `reason`. Logged once per outage (and again if the refusal changes)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.code: str | None = None
        self.message = ""
        self.since = 0.0

    def note(self, code: str, exc: BaseException) -> None:
        """Count a refusal with error code `code`; the first of an outage is logged."""
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
