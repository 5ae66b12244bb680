"""Request rates per token or JWT subject: a token bucket each, refilled at the caller's rate
and holding at most its burst. Per process: N processes behind a load balancer let a caller
make up to N times its rate (deploy/README.md "Rate limits" says how a shared limit in Redis
would replace this class)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

#: Buckets kept at most; the fullest (least recently used) are forgotten beyond it.
MAX_BUCKETS = 100_000


class RateLimiter:
    """Token buckets by identity: `rate` per second by default, `burst` at once."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(
                f"STREAM_RATER_API_RATE={rate:g}, STREAM_RATER_API_BURST={burst}: expected a positive "
                "rate and a burst of at least 1"
            )
        self.rate, self.burst, self.clock = rate, burst, clock
        #: Identity → (tokens left, when counted); insertion order is use order.
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, identity: str, rate: float | None = None) -> float:
        """Take one request from `identity`'s bucket (refilled at `rate`, else the default):
        0 if it may go ahead, else the seconds until it may (for ``Retry-After``)."""
        rate = rate or self.rate
        now = self.clock()
        tokens, then = self._buckets.pop(identity, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * rate)
        wait = 0.0 if tokens >= 1 else (1 - tokens) / rate
        self._buckets[identity] = (tokens - 1 if wait == 0 else tokens, now)
        if len(self._buckets) > MAX_BUCKETS:
            del self._buckets[next(iter(self._buckets))]
        return wait


def retry_after(wait: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait)))
