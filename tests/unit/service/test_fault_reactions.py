"""The table of fault reactions (`service.fault_reactions`): each kind of exception the batch
path meets → its reaction, the unknown → retried loudly, and which Redis errors are refusals
(by redis-py's class or by the code the message carries)."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions
from aiokafka.errors import KafkaConnectionError
from faust.exceptions import ProducerSendError

from stream_rater.processor import StoreLost, TooManyConflicts, Unratable
from stream_rater.service.auto_rebuild import RebuildRunning
from stream_rater.service.fault_reactions import FAULTS, UNKNOWN, Reaction, classify, fault, server_refusal
from tests.fault_support import REFUSALS


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
