"""The token bucket: a burst at once, then the rate; the wait until the next request."""

from __future__ import annotations

import pytest

from stream_rater.service.auth.limits import RateLimiter, retry_after


def test_a_burst_goes_through_then_requests_wait_for_the_rate():
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0, 0, 0]
    assert limiter.take("a") == pytest.approx(0.5) and retry_after(0.5) == "1"
    assert limiter.take("b") == 0  # each identity has its own bucket
    now[0] = 0.5
    assert limiter.take("a") == 0 and limiter.take("a") > 0


def test_an_own_rate_replaces_the_default():
    now = [0.0]
    limiter = RateLimiter(rate=100.0, burst=1, clock=lambda: now[0])
    assert limiter.take("slow", rate=0.1) == 0
    assert limiter.take("slow", rate=0.1) == pytest.approx(10.0) and retry_after(10.0) == "10"


def test_a_rate_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="STREAM_RATER_API_RATE"):
        RateLimiter(rate=0, burst=1)
