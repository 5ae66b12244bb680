"""The worker's side of the corrections topic: each correction request (void, un-void,
re-rate; `contracts.CorrectionRequest`) is carried out as the CLI's ``stream-rater void`` /
``unvoid`` / ``rerate`` would, from the matches topic, while the rating agent goes on.

The topic is read by a consumer of its own group (``<consumer group>-corrections``), not by
a faust agent: faust holds every rebalance of the worker until its agents' events are
acknowledged, and a re-rate may take minutes. A request's offset is committed only after its
re-rate switched (or found nothing to do): a worker that dies meanwhile leaves it to the
group's next owner of the partition, whose re-rate starts over once the dead one's lock
expires (the live ladder was never touched). A request for a ladder whose re-rate is running
waits for it. One that cannot be carried out — not decodable, breaking the contract, an
unconfigured ladder, a match the ladder's history lacks, a parameter the model refuses, a
history whose head retention deleted (`kafka.retention`) — goes
to the dead-letter topic with the reason; the worker never stops on one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from stream_rater.config.ladders import Ladders, UnknownLadderError, check_params
from stream_rater.config.rules import refuse_rule_overrides
from stream_rater.config.settings import Settings
from stream_rater.contracts import CorrectionRequest, ValidationError
from stream_rater.contracts.codecs import DecodeError, decode
from stream_rater.corrections.history import apply_correction
from stream_rater.corrections.rerate import (
    Correction,
    RerateOptions,
    RerateReport,
    Tuning,
    UnknownMatches,
    new_owner,
)
from stream_rater.kafka import ISOLATION_LEVEL, HistoryTruncated, client_options, group_options, update_record
from stream_rater.processor import StoreLost
from stream_rater.service import metrics
from stream_rater.service.batch_handler import Send
from stream_rater.service.dead_letter import dead_letter
from stream_rater.service.fault_reactions import TRANSIENT_ERRORS
from stream_rater.service.order_watch import Message
from stream_rater.store import StateStore
from stream_rater.store.base import LockLost, RerateRunning
from stream_rater.waiting import backoff

log = logging.getLogger(__name__)

#: What makes a request wait and try again: the re-rate lost its lock, or a service failed.
RETRIED: tuple[type[BaseException], ...] = (LockLost, *TRANSIENT_ERRORS)

#: The longest a request may take before the group gives it to another worker as well (that
#: one waits for the lock, then finds the work done or does it again): Kafka's poll interval.
MAX_REQUEST_SECONDS = 3600


class Refused(ValueError):
    """A correction request that cannot be carried out; the reason goes with its dead letter."""


class CorrectionHandler:
    """Carries out one correction request at a time; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        ladders: Ladders,
        send: Send,
        open_store: Callable[[], StateStore],
        *,
        max_backoff: float = 5.0,
        lease: float = 10.0,
    ) -> None:
        """`send(records)` produces records and returns when the broker has them;
        `open_store()` a store for one re-rate (closed after it)."""
        self.settings, self.ladders, self.send, self.open_store = settings, ladders, send, open_store
        self.max_backoff, self.lease = max_backoff, lease
        self.limits = settings.limits()

    async def consume(self) -> None:
        """Carry out the requests of the corrections topic one at a time, committing each
        one's offset after it, until cancelled (the worker stops)."""
        consumer = AIOKafkaConsumer(
            self.settings.topic_corrections,
            **client_options(self.settings),
            **group_options(self.settings),
            group_id=f"{self.settings.consumer_group}-corrections",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=ISOLATION_LEVEL,
            max_poll_interval_ms=MAX_REQUEST_SECONDS * 1000,
            fetch_max_wait_ms=int(1000 * self.settings.fetch_max_wait),
        )
        try:
            await consumer.start()  # inside: a stop during the start stops its tasks too
            while True:
                for tp, records in (await consumer.getmany(timeout_ms=1000, max_records=1)).items():
                    for record in records:
                        await self.handle(record)
                        await self._commit(consumer, tp, record.offset + 1)
        finally:
            await consumer.stop()

    @staticmethod
    async def _commit(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> None:
        """Commit a done request; if the group moved the partition meanwhile, its new owner
        gets the request again and finds it done (a void: nothing to do) — log, go on."""
        try:
            await consumer.commit({tp: offset})
        except KafkaError as exc:
            log.warning("correction request %s@%d done, its offset not committed: %r", tp, offset - 1, exc)

    async def handle(self, message: Message) -> RerateReport | None:
        """Carry out the request in `message`; returns its report, or None when it was
        dead-lettered."""
        kind = "invalid"
        try:
            request = self._request(message)
            kind = request.kind
            report = await self._carry_out(request)
        except Refused as exc:
            log.warning(
                "correction request %s[%d]@%d refused: %s",
                message.topic,
                message.partition,
                message.offset,
                exc,
            )
            await self._dead_letter(message, kind, "rejected", str(exc))
            return None
        except Exception as exc:  # a bug, not the request: dead-lettered, as a match would be
            log.exception(
                "correction request %s[%d]@%d failed", message.topic, message.partition, message.offset
            )
            await self._dead_letter(
                message, kind, "failed", f"correction failed: {type(exc).__name__}: {exc}"
            )
            return None
        self._count(request, report)
        return report

    async def _dead_letter(self, message: Message, kind: str, outcome: str, reason: str) -> None:
        metrics.CORRECTIONS.labels(kind, outcome).inc()
        await self.send(
            [dead_letter(self.settings.topic_dlq, message, reason, limit=self.settings.max_event_bytes)]
        )
        metrics.DEAD_LETTERS.inc()

    def _request(self, message: Message) -> CorrectionRequest:
        """The decoded, checked request; `Refused` says why not."""
        try:
            request = CorrectionRequest.from_dict(
                decode(message.value or b"", self.limits), self.limits.max_id_length
            )
            ladder = self.ladders.get(request.ladder)
            check_params(ladder.model, {**ladder.params, **request.params})
            refuse_rule_overrides(request.params, "")
        except (DecodeError, ValidationError) as exc:
            raise Refused(f"correction request: {exc}") from None
        except UnknownLadderError as exc:
            raise Refused(f"ladder: {exc.args[0] if exc.args else exc}") from None
        except ValueError as exc:
            raise Refused(f"params: {exc}") from None
        return request

    async def _carry_out(self, request: CorrectionRequest) -> RerateReport:
        """The re-rate, retried while another one holds the ladder's lock or a service fails."""
        delays = backoff(0.05, self.max_backoff, jitter=0.0)
        owner = new_owner()
        while True:
            try:
                return await self._rerate(request, owner)
            except UnknownMatches as exc:
                raise Refused(f"match_ids: {exc}") from None
            except StoreLost as exc:
                raise Refused(f"store: {exc}") from None
            except HistoryTruncated as exc:
                raise Refused(f"history: {exc}") from None
            except RerateRunning as exc:
                wait, why = max(0.1, exc.seconds_left), str(exc)
            except RETRIED as exc:
                wait, why = next(delays), repr(exc)
            log.info("correction %s of %r waits %.1f s: %s", request.kind, request.ladder, wait, why)
            await asyncio.sleep(wait)

    async def _rerate(self, request: CorrectionRequest, owner: str) -> RerateReport:
        store = self.open_store()
        metrics.RERATE_RUNNING.labels(request.ladder).set(1)
        try:
            return await apply_correction(
                Correction.from_request(request),
                self.settings,
                self.ladders,
                store,
                send=self._send_events,
                options=RerateOptions(Tuning(lease=self.lease), owner=owner),
            )
        finally:
            metrics.RERATE_RUNNING.labels(request.ladder).set(0)
            await store.close()

    async def _send_events(self, events: Sequence[dict[str, Any]]) -> None:
        await self.send([update_record(self.settings.topic_updates, e) for e in events])

    @staticmethod
    def _count(request: CorrectionRequest, report: RerateReport) -> None:
        """Metrics and a log line for a request carried out."""
        ladder = request.ladder
        if report.nothing_to_do:
            metrics.CORRECTIONS.labels(request.kind, "nothing_to_do").inc()
            log.info(
                "correction %s of %r (request %s): %s",
                request.kind,
                ladder,
                request.request_id,
                report.line(),
            )
            return
        metrics.CORRECTIONS.labels(request.kind, "switched").inc()
        for line in report.skipped:
            log.warning("correction %s of %r: %s", request.kind, ladder, line)
        metrics.MATCHES_VOIDED.labels(ladder, "void").inc(len(report.voided))
        metrics.MATCHES_VOIDED.labels(ladder, "unvoid").inc(len(report.unvoided))
        metrics.RERATE_MATCHES.labels(ladder).inc(report.applied)
        metrics.RERATE_CORRECTION_EVENTS.labels(ladder).inc(report.corrections)
        metrics.RERATE_LAST_SWITCH.labels(ladder).set(time.time())
        metrics.RERATE_LAST_BLOCKED.labels(ladder).set(report.blocked_seconds)
        log.info(
            "correction %s of %r (request %s): %s", request.kind, ladder, request.request_id, report.line()
        )
