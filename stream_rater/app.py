"""The faust-streaming application: topics, the rating agent, and the worker entry point.

One agent consumes ``matches`` with ``noack_take`` (faust's ``take`` would acknowledge a
batch in a ``finally`` block even when it failed) and concurrency 1 (faust's
``concurrency>1`` can lose messages on a crash), hands each batch to `BatchHandler`, and
acknowledges the events only after their Redis commit and their rating-changed events are
durable. On SIGTERM the batch in hand is finished before the agent stops.
"""

from __future__ import annotations

import asyncio
import os
import logging
import ssl
import tempfile
from typing import Any

import faust

from stream_rater.events import Limits
from stream_rater.kafka_io import client_options, create_topics
from stream_rater.ladders import Ladders
from stream_rater.processor import Processor
from stream_rater.settings import ENV_PREFIX, Settings
from stream_rater.store import StateStore, open_store
from stream_rater.web import register_web
from stream_rater.worker import BatchHandler, Topics, TimedStore, WorkerStopping

log = logging.getLogger(__name__)


def broker_credentials(settings: Settings) -> Any:
    """faust credentials for the configured Kafka security settings (None = plaintext)."""
    protocol = settings.kafka_security_protocol.upper()
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=settings.kafka_ssl_cafile or None)
    if protocol.startswith("SASL"):
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password,
            mechanism=settings.kafka_sasl_mechanism or "PLAIN",
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def create_app(settings: Settings, ladders: Ladders, store: StateStore | None = None) -> faust.App:
    """A configured worker app. `store` defaults to the Redis at ``settings.redis_url``."""
    app = faust.App(
        settings.consumer_group,
        broker=settings.broker,
        broker_credentials=broker_credentials(settings),
        env_prefix=ENV_PREFIX,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.partitions,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=min(3.0, settings.session_timeout / 3),
        broker_commit_interval=1.0,
        stream_buffer_maxsize=max(4096, settings.batch_size * 4),
        producer_linger=0.005,
        web_enabled=True,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_router_enabled=False,
        web_tables_enabled=False,
        loghandlers=[],
        datadir=os.path.join(tempfile.gettempdir(), f"stream-rater-{settings.consumer_group}"),
    )
    matches = app.topic(settings.topic_matches, partitions=settings.partitions)

    store = TimedStore(store or open_store(
        settings.redis_url, history_limit=settings.history_limit, marker_ttl=settings.marker_ttl
    ))
    stopping = asyncio.Event()

    async def send(topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]) -> Any:
        return await app.producer.send(topic, key, value, None, None, headers or None)

    recent = register_web(app, store, ladders, settings)
    handler = BatchHandler(
        Processor(ladders, store),
        ladders,
        send,
        topics=Topics(updates=settings.topic_updates, dlq=settings.topic_dlq),
        limits=Limits(max_event_bytes=settings.max_event_bytes),
        stopping=stopping.is_set,
        on_batch=recent.record,
    )
    app.rating_store = store  # type: ignore[attr-defined]
    app.rating_handler = handler  # type: ignore[attr-defined]
    app.rating_ladders = ladders  # type: ignore[attr-defined]

    @app.agent(matches, concurrency=1)
    async def rate(stream: faust.StreamT) -> None:
        async for events in stream.noack_take(settings.batch_size, within=settings.batch_seconds):
            task = asyncio.ensure_future(handler.handle([e.message for e in events]))
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                stopping.set()
                try:
                    await task
                except (WorkerStopping, asyncio.CancelledError):
                    raise
                for event in events:
                    await stream.ack(event)
                raise
            for event in events:
                await stream.ack(event)

    @app.on_before_shutdown.connect
    async def _flag_stopping(app: faust.App, **kwargs: Any) -> None:
        stopping.set()

    return app


def run_worker(settings: Settings, ladders: Ladders) -> None:
    """Create missing topics, then run a worker in the foreground until SIGTERM/SIGINT
    (faust handles the signals). faust itself only creates its internal topics, and a broker
    that auto-creates the input topic would pick its own partition count."""
    topics = {t: settings.partitions for t in (settings.topic_matches, settings.topic_updates, settings.topic_dlq)}
    asyncio.run(create_topics(settings.broker, topics, settings.replication_factor, options=client_options(settings)))
    app = create_app(settings, ladders)
    worker = faust.Worker(app, loglevel=settings.log_level.upper(), quiet=True)
    worker.execute_from_commandline()
