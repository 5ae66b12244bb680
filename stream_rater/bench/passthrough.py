"""A naive faust pass-through agent (consume → produce, one send per event, no Redis): the
yardstick `stream-rater bench e2e` runs beside the real worker on the same broker.

Run as ``python -m stream_rater.bench.passthrough`` with the worker's ``STREAM_RATER_*``
variables; it copies the matches topic to the updates topic.
"""

from __future__ import annotations

import tempfile
from typing import Any

import faust

from stream_rater.config.settings import ENV_PREFIX, Settings


def create_passthrough(settings: Settings) -> faust.App:
    """The pass-through app: every match event is sent on, unchanged, as it arrives."""
    app = faust.App(
        settings.consumer_group,
        broker=settings.broker,
        env_prefix=ENV_PREFIX,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.partitions,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.session_timeout,
        datadir=tempfile.mkdtemp(prefix="stream-rater-passthrough-"),
        web_port=settings.web_port,
        web_bind=settings.web_host,
    )
    matches = app.topic(settings.topic_matches, partitions=settings.partitions)
    updates = app.topic(settings.topic_updates, partitions=settings.partitions)

    @app.agent(matches)
    async def copy(stream: faust.StreamT[Any]) -> None:
        async for event in stream.events():
            await updates.send(key=event.key, value=event.value)

    return app


if __name__ == "__main__":
    faust.Worker(
        create_passthrough(Settings.from_env()), loglevel="WARNING", quiet=True
    ).execute_from_commandline()
