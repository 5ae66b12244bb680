"""What the worker does about each fault of a batch: one table from exception to `Reaction`.

The batch handler's retry loop (`BatchHandler._retry`) asks `classify` about every exception
an attempt raises and does what the answer says; nothing else in the worker sorts faults.
To give a new fault its own reaction, add a row to `FAULTS` (docs/pages/how-to/add-a-fault-reaction.md).

The rows are tried in order, so a subclass's row goes before its base class's. An exception
no row matches is retried loudly (`UNKNOWN`): a fault nobody foresaw may be a bug or an
infrastructure fault, and either way it is no reason to lose or dead-letter a match (the
promise: every match counts once), while stopping the worker would only move the batch to
another worker that meets it too. Held and retried, with its traceback logged at every
attempt and ``stream_rater_batch_retries_total`` counting, it is seen and never silent.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

import redis.exceptions
from aiokafka.errors import KafkaError
from faust.exceptions import ProducerSendError

from stream_rater.processor import StoreLost, TooManyConflicts, Unratable


class Reaction(enum.Enum):
    """What the retry loop does about a fault."""

    #: Wait it out: back off (jittered, capped) and try again, logging a warning.
    RETRY = "retry"
    #: Redis refuses writes (`server_refusal`): noted for readiness and the metrics (once per
    #: outage in the log), then backed off and tried again like `RETRY`.
    HOLD = "hold"
    #: The store lost a ladder: reported (readiness, metrics); a narrowed commit parks the
    #: ladder's partition, else the whole batch waits until the ladder is rebuilt.
    PARK = "park"
    #: The match itself cannot be rated: raised, for `process_skipping` to dead-letter it.
    DEAD_LETTER = "dead-letter"
    #: Not a fault of the batch (the task is cancelled, the process exits): raised at once.
    STOP = "stop"


@dataclass(frozen=True)
class Fault:
    """One row of the table: the exceptions it `matches`, the `reaction`, and `why`."""

    matches: Callable[[BaseException], bool]
    reaction: Reaction
    why: str
    #: Whether a retried fault's traceback is logged at every attempt (one nobody foresaw).
    traceback: bool = False


def kind(*classes: type[BaseException]) -> Callable[[BaseException], bool]:
    """A row's `Fault.matches`: the exception is an instance of one of `classes`."""
    return lambda exc: isinstance(exc, classes)


#: Error codes of Redis refusing a command it would run later (out of memory, a replica, a
#: failed save, too few replicas, no master, a slow script, loading, a cluster in transition).
SERVER_REFUSALS = (
    "OOM",
    "READONLY",
    "MISCONF",
    "NOREPLICAS",
    "MASTERDOWN",
    "BUSY",
    "LOADING",
    "TRYAGAIN",
    "CLUSTERDOWN",
)

#: redis-py's classes of refusals whose code it strips from the message; subclasses first.
_REFUSAL_CLASSES: tuple[tuple[type[Exception], str], ...] = (
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
)

#: A refusal's code at the start of an error message, or inside a script error that wraps it
#: (older Redis: ``Error running script (…): @user_script:1: -OOM command not allowed …``).
_REFUSAL_CODE = re.compile(rf"(?:^|[\s:]-)({'|'.join(SERVER_REFUSALS)})\b")


def server_refusal(exc: BaseException) -> str | None:
    """The code (e.g. ``OOM``) if `exc` is Redis refusing a command on a healthy connection —
    an infrastructure fault to wait out, never the request's — else None. Known by redis-py's
    exception class or by the code its message starts with or a script error wraps."""
    if not isinstance(exc, redis.exceptions.RedisError):
        return None
    for cls, code in _REFUSAL_CLASSES:
        if isinstance(exc, cls):
            return code
    if not isinstance(exc, redis.exceptions.ResponseError):
        return None
    found = _REFUSAL_CODE.search(str(exc))
    return found.group(1) if found else None


#: Errors that pass by themselves: a lost connection, a timeout, a broker error, commits that
#: kept conflicting. The corrections consumer retries the same ones (`service.corrections`).
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    KafkaError,
    ProducerSendError,
    ConnectionError,
    TimeoutError,
    TooManyConflicts,
)

#: The table, tried in order (a subclass's row before its base class's).
FAULTS: tuple[Fault, ...] = (
    Fault(kind(StoreLost), Reaction.PARK, "the store lost the ladder: nothing of it applies until rebuilt"),
    Fault(kind(Unratable), Reaction.DEAD_LETTER, "the model cannot rate the match: bad input, never retried"),
    Fault(
        lambda exc: server_refusal(exc) is not None,
        Reaction.HOLD,
        "Redis refuses writes on a healthy connection (OOM, READONLY, MISCONF, …): wait until it accepts",
    ),
    Fault(kind(*TRANSIENT_ERRORS), Reaction.RETRY, "a connection, a timeout or the broker: passes by itself"),
    Fault(
        lambda exc: not isinstance(exc, Exception),
        Reaction.STOP,
        "cancelled or exiting (CancelledError, KeyboardInterrupt, SystemExit): no fault of the batch",
    ),
)

#: The reaction to an exception no row matches (the module docstring says why).
UNKNOWN = Fault(
    lambda exc: True,
    Reaction.RETRY,
    "unforeseen: may be a bug; held and retried with its traceback logged, never dead-lettered",
    traceback=True,
)


def fault(exc: BaseException) -> Fault:
    """The row of `FAULTS` that `exc` matches first, else `UNKNOWN`."""
    return next((row for row in FAULTS if row.matches(exc)), UNKNOWN)


def classify(exc: BaseException) -> Reaction:
    """What the retry loop does about `exc` (`fault(exc).reaction`)."""
    return fault(exc).reaction
