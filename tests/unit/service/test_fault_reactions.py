"""The table of fault reactions (`service.fault_reactions`): each kind of exception the batch
path meets → its reaction, the unknown → retried loudly, and which Redis errors are refusals
(by redis-py's class or by the code the message carries)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
import redis.exceptions
from aiokafka.errors import KafkaConnectionError
from faust.exceptions import ProducerSendError

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.processor import Processor, StoreLost, TooManyConflicts, Unratable
from stream_rater.service import fault_reactions, metrics
from stream_rater.service.auto_rebuild import RebuildRunning
from stream_rater.service.batch_handler import BatchHandler, Retrying
from stream_rater.service.fault_reactions import (
    FAULTS,
    UNKNOWN,
    Fault,
    Reaction,
    classify,
    fault,
    kind,
    server_refusal,
)
from stream_rater.store import Commit, CommitConflict
from stream_rater.store.memory import MemoryStore
from tests.fault_support import REFUSALS
from tests.helpers import duel


@pytest.mark.parametrize(("error", "code"), REFUSALS)
def test_server_refusals_are_known_by_class_or_code(error, code):
    """Each refusal is classified with its code, whether redis-py gave it a class or only the
    message names it (at its start, or wrapped in a script error)."""
    assert server_refusal(error) == code


@pytest.mark.parametrize(
    "error",
    [
        redis.exceptions.ResponseError("ERR value is not an integer or out of range"),
        redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        redis.exceptions.ResponseError("BUSYKEY Target key name already exists."),
        redis.exceptions.ResponseError("ERR Error running script: @user_script:3: OOM in a user's message"),
        redis.exceptions.ConnectionError("Connection reset by peer"),
        ZeroDivisionError("OOM"),
    ],
)
def test_other_errors_are_no_server_refusals(error):
    """A request's own error, a lost connection or a model's exception is no refusal."""
    assert server_refusal(error) is None


LADDERS = Ladders([Ladder("default", "trueskill")])
LOST = StoreLost("default", "the store shows 0 matches applied, 10 were")


@pytest.mark.parametrize(
    ("error", "reaction"),
    [
        (LOST, Reaction.PARK),
        (RebuildRunning(LOST), Reaction.PARK),
        (Unratable("default", ZeroDivisionError("boom")), Reaction.DEAD_LETTER),
        *[(error, Reaction.HOLD) for error, _ in REFUSALS],
        (redis.exceptions.ConnectionError("Connection reset by peer"), Reaction.RETRY),
        (redis.exceptions.TimeoutError("Timeout reading from socket"), Reaction.RETRY),
        (KafkaConnectionError("no broker"), Reaction.RETRY),
        (ProducerSendError("not sent"), Reaction.RETRY),
        (ConnectionResetError("reset"), Reaction.RETRY),
        (TimeoutError(), Reaction.RETRY),
        (TooManyConflicts("kept conflicting"), Reaction.RETRY),
        (asyncio.CancelledError(), Reaction.STOP),
        (KeyboardInterrupt(), Reaction.STOP),
        (SystemExit(1), Reaction.STOP),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_each_fault_has_its_reaction(error, reaction):
    assert classify(error) is reaction
    assert fault(error) in FAULTS and not fault(error).traceback


@pytest.mark.parametrize(
    "error",
    [
        ZeroDivisionError("a bug"),
        KeyError("field"),
        redis.exceptions.ResponseError("ERR value is not an integer or out of range"),
    ],
)
def test_an_unforeseen_error_is_retried_with_its_traceback_never_dead_lettered(error):
    """A fault nobody foresaw may be a bug: held and retried loudly (`UNKNOWN`), since
    dead-lettering would lose the match and stopping would only hand the batch to another worker."""
    assert fault(error) is UNKNOWN
    assert (classify(error), UNKNOWN.traceback) == (Reaction.RETRY, True)
    assert "never dead-lettered" in UNKNOWN.why


def test_a_refusal_that_is_also_a_lost_connection_class_is_held():
    """redis-py's BusyLoadingError is a ConnectionError: the refusal row comes first."""
    assert issubclass(redis.exceptions.BusyLoadingError, redis.exceptions.ConnectionError)
    assert classify(redis.exceptions.BusyLoadingError("loading")) is Reaction.HOLD


class Glitch(Exception):
    """A fault no row of the table knows."""


class GlitchingStore(MemoryStore):
    """Raises `Glitch` at its first commit, then commits."""

    def __init__(self) -> None:
        super().__init__()
        self.glitches = 1

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if self.glitches:
            self.glitches -= 1
            raise Glitch("once")
        return await super().commit_many(commits)


@dataclass
class Message:
    """A consumed record of a duel, as faust's Message presents it."""

    value: bytes
    key: bytes | None = None
    topic: str = "matches"
    partition: int = 0
    offset: int = 0


async def glitched_batch(caplog: pytest.LogCaptureFixture) -> list[tuple[str, bool]]:
    """Handle one batch through a store that glitches once: the log's (level, traceback) of the retry."""
    caplog.clear()
    sent: list = []

    async def send(records: list) -> None:
        sent.extend(records)

    handler = BatchHandler(Processor(LADDERS, GlitchingStore()), send, retrying=Retrying(0.01))
    result = await handler.handle([Message(json.dumps(duel("m1", "a", "b")).encode())])
    assert [r.duplicate for r in result.results] == [False] and len(sent) == 2, (
        "applied once, not dead-lettered"
    )
    return [(r.levelname, r.exc_info is not None) for r in caplog.records if "store failed" in r.getMessage()]


async def test_the_retry_loop_does_what_the_table_says_and_a_row_is_the_only_change(caplog, monkeypatch):
    """An unknown fault is retried with its traceback logged; one row added to `FAULTS` (the
    only change a new fault reaction needs) makes the same fault a quiet retry."""
    caplog.set_level(logging.WARNING)
    retries = metrics.BATCH_RETRIES.labels("store")._value.get()
    assert await glitched_batch(caplog) == [("ERROR", True)]
    assert metrics.BATCH_RETRIES.labels("store")._value.get() - retries == 1
    row = Fault(kind(Glitch), Reaction.RETRY, "a glitch passes by itself")
    monkeypatch.setattr(fault_reactions, "FAULTS", (row, *fault_reactions.FAULTS))
    assert fault(Glitch()) is row
    assert await glitched_batch(caplog) == [("WARNING", False)]
