"""Where checkpoints go: the `CheckpointSink` protocol, a compacted Kafka topic (`KafkaSink`,
the default: Kafka is always there) and a dict (`MemorySink`, tests and one-process tools).

Every record is keyed ``[ladder, checkpoint id, chunk number]`` (msgpack; -1 is the manifest):
keys are immutable per checkpoint, so log compaction keeps each one's last value — its bytes,
or a tombstone once the checkpoint is dropped. The chunks are written first and the manifest
last: a writer killed in between leaves chunks without a manifest, which no reader lists.
Dropping tombstones the manifest first, then the chunks.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Protocol

import msgpack

from stream_rater.checkpoints.format import CHUNK_BYTES, Checkpoint, Manifest, TornCheckpoint, decode, encode
from stream_rater.config.settings import Settings
from stream_rater.kafka import LogReader, create_topics
from stream_rater.kafka.produce import new_producer, send_batched
from stream_rater.kafka.security import client_options

#: Chunk number of a manifest's key.
MANIFEST = -1


class CheckpointSink(Protocol):
    """A durable place for checkpoints (see the module docstring)."""

    async def write(self, checkpoint: Checkpoint) -> Manifest:
        """Write `checkpoint`'s chunks, then its manifest; the manifest."""

    async def manifests(self, ladder: str) -> list[Manifest]:
        """`ladder`'s checkpoints that have a manifest, oldest first (by their positions)."""

    async def load(self, manifest: Manifest) -> Checkpoint:
        """The checkpoint `manifest` describes; `TornCheckpoint` if it cannot be used."""

    async def drop(self, manifest: Manifest) -> None:
        """Delete a checkpoint: its manifest first, then its chunks."""


def key(ladder: str, ident: str, chunk: int) -> bytes:
    return bytes(msgpack.packb([ladder, ident, chunk]))


class KeyedSink:
    """A sink over a key → value map (`_put`, `_read`): the chunk and manifest logic."""

    chunk_bytes: int = CHUNK_BYTES

    async def _put(self, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        raise NotImplementedError

    async def _read(self) -> dict[bytes, bytes]:
        """Every live key's value (tombstoned keys absent)."""
        raise NotImplementedError

    async def write(self, checkpoint: Checkpoint) -> Manifest:
        chunks, manifest = encode(checkpoint, self.chunk_bytes)
        await self.write_chunks(checkpoint, chunks)
        await self._put([(key(manifest.ladder, manifest.id, MANIFEST), manifest.pack())])
        return manifest

    async def write_chunks(self, checkpoint: Checkpoint, chunks: list[bytes]) -> None:
        """The first half of `write` (a fault test stops here)."""
        await self._put((key(checkpoint.ladder, checkpoint.id, n), c) for n, c in enumerate(chunks))

    async def manifests(self, ladder: str) -> list[Manifest]:
        found = []
        for raw_key, value in (await self._read()).items():
            name, _, chunk = msgpack.unpackb(raw_key)
            if name == ladder and chunk == MANIFEST:
                with contextlib.suppress(TornCheckpoint, ValueError):
                    found.append(Manifest.unpack(value))
        return sorted(found, key=lambda m: (sum(m.positions.values()), m.created))

    async def load(self, manifest: Manifest) -> Checkpoint:
        records = await self._read()
        chunks = {}
        for n in range(manifest.chunks):
            value = records.get(key(manifest.ladder, manifest.id, n))
            if value is not None:
                chunks[n] = value
        return decode(manifest, chunks)

    async def drop(self, manifest: Manifest) -> None:
        await self._put([(key(manifest.ladder, manifest.id, MANIFEST), None)])
        await self._put((key(manifest.ladder, manifest.id, n), None) for n in range(manifest.chunks))


class MemorySink(KeyedSink):
    """Checkpoints in a dict."""

    def __init__(self) -> None:
        self.records: dict[bytes, bytes] = {}

    async def _put(self, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        for k, v in items:
            if v is None:
                self.records.pop(k, None)
            else:
                self.records[k] = v

    async def _read(self) -> dict[bytes, bytes]:
        return dict(self.records)


class KafkaSink(KeyedSink):
    """Checkpoints on a compacted topic (`Settings.topic_checkpoints`, one partition: the
    manifest follows its chunks in one log). Use as ``async with``: the reader stays open,
    each read fetching only what was appended since."""

    def __init__(self, settings: Settings) -> None:
        self.settings, self.topic = settings, settings.topic_checkpoints
        self._reader: LogReader | None = None
        self._records: dict[bytes, bytes] = {}
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> KafkaSink:
        await create_checkpoint_topic(self.settings)
        self._producer = new_producer(self.settings, max_request_size=2 * self.chunk_bytes)
        await self._producer.start()
        self._stack.push_async_callback(self._producer.stop)
        self._reader = await self._stack.enter_async_context(LogReader(self.settings, self.topic))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _put(self, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        records: list[tuple[str, bytes, bytes | None, list[tuple[str, bytes]]]]
        records = [(self.topic, k, v, []) for k, v in items]
        await send_batched(self._producer, records)  # type: ignore[arg-type]  # None: a tombstone

    async def _read(self) -> dict[bytes, bytes]:
        assert self._reader is not None, "use KafkaSink as `async with`"
        for record in await self._reader.read():
            if record.key is None:
                continue
            if record.value:
                self._records[record.key] = record.value
            else:
                self._records.pop(record.key, None)
        return dict(self._records)


async def create_checkpoint_topic(settings: Settings) -> None:
    """The checkpoints topic: one partition, compacted, records up to twice a chunk."""
    await create_topics(
        settings.broker,
        {settings.topic_checkpoints: 1},
        settings.replication_factor,
        options=client_options(settings),
        configs={
            settings.topic_checkpoints: {
                "cleanup.policy": "compact",
                "max.message.bytes": str(2 * CHUNK_BYTES),
            }
        },
    )


@contextlib.asynccontextmanager
async def configured_sink(settings: Settings) -> AsyncIterator[CheckpointSink | None]:
    """The sink `settings` configure (`Settings.checkpoint_sink`), started; None: none."""
    if settings.checkpoint_sink == "none":
        yield None
        return
    async with KafkaSink(settings) as sink:
        yield sink
