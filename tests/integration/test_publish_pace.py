"""`kafka.publish` at a rate takes each event from its source only when the pace lets it go,
so a source that stamps its events (the e2e bench's latency phase) stamps when each is sent."""

import asyncio
import time
import uuid

from stream_rater.kafka import create_topics, publish
from stream_rater.local.demo import tagged_settings
from tests.helpers import duel


def test_a_paced_publish_takes_each_event_at_its_turn(broker_url):
    rate, n = 20.0, 6  # one event every 50 ms
    settings = tagged_settings(uuid.uuid4().hex[:10], broker=broker_url, partitions=1)
    asyncio.run(create_topics(broker_url, settings.topics()))
    taken: list[float] = []

    def source():
        for i in range(n):
            taken.append(time.perf_counter())
            yield duel(f"m{i}", "a", "b")

    summary = asyncio.run(publish(source(), settings, rate=rate, linger=0.0))
    assert summary.sent == n
    # The pace is a schedule (event i at i / rate from the first): taken before its turn, an
    # event's stamp would run ahead. After a late one (a loaded machine) the next may come sooner.
    since_first = [at - taken[0] for at in taken]
    assert all(t >= i / rate - 0.005 for i, t in enumerate(since_first)), since_first
