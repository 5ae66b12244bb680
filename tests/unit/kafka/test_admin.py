"""Regression (found by ``bench chaos`` on a 3-broker Apache Kafka): a worker started while one
broker was down exited with ``TopicError: … NodeNotReadyError`` — the metadata still named the
dead node (as controller) and topic creation asked it once. A retriable broker error is now
tried again, with a fresh admin client, until the timeout; other errors are not."""

from __future__ import annotations

import pytest
from aiokafka.errors import NodeNotReadyError, TopicAuthorizationFailedError

from stream_rater.kafka import admin
from stream_rater.kafka.admin import TopicError, create_topics


class FlakyAdmin:
    """An admin client whose first `failures` create_topics calls raise `error`."""

    calls = 0
    failures = 0
    error: type[Exception] = NodeNotReadyError

    def __init__(self, **options) -> None:
        pass

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def create_topics(self, new, timeout_ms):
        type(self).calls += 1
        if type(self).calls <= type(self).failures:
            raise type(self).error("node 2 is not ready")
        return type("Response", (), {"topic_errors": [(t.name, 0, None) for t in new]})()

    async def describe_topics(self, names):
        return [{"topic": name, "partitions": [0, 1]} for name in names]


@pytest.fixture
def flaky(monkeypatch):
    monkeypatch.setattr(admin, "AIOKafkaAdminClient", FlakyAdmin)
    monkeypatch.setattr(admin, "RETRY_BACKOFF", 0.01, raising=False)
    FlakyAdmin.calls = 0
    return FlakyAdmin


async def test_a_broker_not_ready_is_tried_again_until_topics_exist(flaky):
    flaky.failures, flaky.error = 3, NodeNotReadyError
    await create_topics("kafka://a:1;kafka://b:2", {"matches": 2}, timeout=5)
    assert flaky.calls == 4


async def test_a_broker_that_stays_not_ready_fails_at_the_timeout(flaky):
    flaky.failures, flaky.error = 10**6, NodeNotReadyError
    with pytest.raises(TopicError, match="NodeNotReadyError"):
        await create_topics("kafka://a:1", {"matches": 2}, timeout=0.2)
    assert flaky.calls > 1


async def test_an_error_that_is_not_retriable_fails_at_once(flaky):
    flaky.failures, flaky.error = 1, TopicAuthorizationFailedError
    with pytest.raises(TopicError, match="TopicAuthorizationFailedError"):
        await create_topics("kafka://a:1", {"matches": 2}, timeout=5)
    assert flaky.calls == 1
