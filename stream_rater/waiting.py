"""Waiting, the one way: poll until a condition holds, and back off between retries.

`wait_until` (and `wait_until_async`) call a condition every `interval` seconds until it
returns something truthy, which they return, or raise once `timeout` seconds have passed,
naming what was awaited. `backoff` yields the delays between retries of a failing action:
exponential, capped, jittered, so that competing retriers spread out.

The bottom layer: imports nothing of stream_rater, so every layer may use it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

__all__ = ["backoff", "wait_until", "wait_until_async"]

_T = TypeVar("_T")

#: What was awaited: a phrase, or a function giving one (called only on a timeout, so it may
#: describe the state the wait ended in).
What = str | Callable[[], str]


def _timed_out(what: What, timeout: float, error: Callable[[str], Exception]) -> Exception:
    described = what() if callable(what) else what
    return error(f"timed out after {timeout:g} s waiting for {described}")


def wait_until(
    condition: Callable[[], _T | None],
    what: What,
    timeout: float,
    *,
    interval: float = 0.05,
    retry_on: tuple[type[Exception], ...] = (),
    error: Callable[[str], Exception] = TimeoutError,
) -> _T:
    """Call `condition` every `interval` seconds until it returns a truthy value; return it.

    An exception of a type in `retry_on` counts as "not yet". After `timeout` seconds raises
    ``error("timed out after <timeout> s waiting for <what>")`` (a `TimeoutError` unless
    told otherwise), chained to the last `retry_on` exception if there was one.
    """
    deadline = time.monotonic() + timeout
    while True:
        last: Exception | None = None
        try:
            if value := condition():
                return value
        except retry_on as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, error) from last
        time.sleep(interval)


async def wait_until_async(
    condition: Callable[[], Awaitable[_T | None]],
    what: What,
    timeout: float,
    *,
    interval: float = 0.05,
    retry_on: tuple[type[Exception], ...] = (),
    error: Callable[[str], Exception] = TimeoutError,
) -> _T:
    """`wait_until` for the event loop: `condition` is a coroutine function, the sleeps are
    asyncio's."""
    deadline = time.monotonic() + timeout
    while True:
        last: Exception | None = None
        try:
            if value := await condition():
                return value
        except retry_on as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, error) from last
        await asyncio.sleep(interval)


def backoff(first: float, cap: float, *, jitter: float = 0.5, factor: float = 2.0) -> Iterator[float]:
    """Endless delays between retries: the n-th is drawn uniformly from
    ``[(1 - jitter) * d, d]`` where ``d = min(cap, first * factor**n)``.

    ``jitter=0.5`` ("equal jitter") keeps at least half of each step; ``jitter=1`` ("full
    jitter") spreads competing retriers the most; ``first == cap`` gives a jittered constant.
    """
    delay = min(first, cap)
    while True:
        yield random.uniform((1.0 - jitter) * delay, delay)
        delay = min(cap, delay * factor)
