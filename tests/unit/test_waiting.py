"""The poll and backoff helpers every wait in the package uses."""

from __future__ import annotations

import itertools

import pytest

from stream_rater.waiting import backoff, wait_until, wait_until_async


def test_wait_until_returns_the_first_truthy_value_and_retries_the_errors_it_is_told_to():
    answers = iter([None, ConnectionError("not yet"), 0, "ready"])

    def condition() -> str | int | None:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_until(condition, "an answer", 5, interval=0, retry_on=(ConnectionError,)) == "ready"


def test_wait_until_names_what_it_awaited_and_chains_the_last_error():
    def refused() -> bool:
        raise ConnectionError("refused")

    with pytest.raises(TimeoutError, match=r"^timed out after 0\.05 s waiting for the port$") as caught:
        wait_until(refused, "the port", 0.05, interval=0.01, retry_on=(ConnectionError,))
    assert isinstance(caught.value.__cause__, ConnectionError)


def test_wait_until_describes_the_state_it_ended_in_and_raises_the_error_asked_for():
    seen: list[int] = []

    def never() -> bool:
        seen.append(len(seen))
        return False

    with pytest.raises(LookupError, match=r"waiting for the topic \(\d+ looks\)"):
        wait_until(never, lambda: f"the topic ({len(seen)} looks)", 0.02, interval=0.005, error=LookupError)


def test_an_error_not_retried_ends_the_wait_at_once():
    def broken() -> bool:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        wait_until(broken, "nothing", 5, retry_on=(ConnectionError,))


async def test_wait_until_async_awaits_the_condition():
    count = itertools.count()

    async def third() -> int | None:
        n = next(count)
        return n if n == 2 else None

    assert await wait_until_async(third, "the third look", 5, interval=0) == 2
    with pytest.raises(TimeoutError, match="waiting for nothing"):
        await wait_until_async(_never, "nothing", 0.02, interval=0.005)


async def _never() -> bool:
    return False


def test_backoff_grows_to_its_cap_with_the_jitter_asked_for():
    equal = list(itertools.islice(backoff(0.05, 0.4), 6))
    for delay, step in zip(equal, [0.05, 0.1, 0.2, 0.4, 0.4, 0.4]):
        assert step / 2 <= delay <= step
    full = list(itertools.islice(backoff(0.001, 0.05, jitter=1.0), 20))
    assert all(0 <= delay <= 0.05 for delay in full)
    assert list(itertools.islice(backoff(1.0, 1.0, jitter=0), 3)) == [1.0, 1.0, 1.0]
