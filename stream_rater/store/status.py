"""Why a store refuses a request: one table from refusal status to exception.

The Redis scripts answer ``{status, detail…}`` (``{'ok'}`` when they did their work) and
`MemoryStore` refuses with the same statuses, so both stores raise the same exception with
the same message for the same refusal. Details arrive as the scripts send them (bytes for
strings, milliseconds for a lock's time left).

Redis itself refusing a command on a healthy connection (``OOM``, ``READONLY``, …) is the
other kind, no fault of the request: the worker's table of fault reactions knows it
(`service.fault_reactions.server_refusal`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from stream_rater.store.base import (
    CommitConflict,
    GenerationGone,
    HeldStale,
    LadderFrozen,
    LockLost,
    RerateRunning,
)


def text(value: bytes | str) -> str:
    """A reply item as text (Redis clients answer bytes unless told to decode)."""
    return value.decode() if isinstance(value, bytes) else value


#: Refusal status → the exception for it, from the ladder and the status's details.
REFUSALS: dict[str, Callable[..., Exception]] = {
    # commit: a marker of the batch exists (detail: the match id)
    "applied": lambda ladder, match_id: CommitConflict(f"match {text(match_id)!r} already applied"),
    # commit: a stored state is not at the version expected (detail: the player or effect id)
    "conflict": lambda ladder, player_id: CommitConflict(
        f"state of {text(player_id)!r} changed since it was read"
    ),
    # commit computed without a read: the store changed since the processor's last commit
    "stale": lambda ladder: HeldStale(f"ladder {ladder!r} changed since this worker's last commit"),
    # commit: a re-rate is switching the live generation
    "frozen": lambda ladder: LadderFrozen(f"ladder {ladder!r} is being switched to a re-rated generation"),
    # read, commit: the live generation is not the one the keys are of (detail: the live one)
    "generation": lambda ladder, live: CommitConflict(
        f"ladder {ladder!r}: a re-rate switched it to generation {int(live)}"
    ),
    # read, commit: a staging generation is no longer the staging one (detail: that generation)
    "gone": lambda ladder, generation: GenerationGone(
        f"ladder {ladder!r}: generation {int(generation)} is no longer being built"
    ),
    # re-rate steps: the lock is taken over or expired, or the freeze or staging generation is not ours
    "lost": lambda ladder: LockLost(
        f"ladder {ladder!r}: the re-rate lock or freeze expired or was taken over"
    ),
    # switch: the live generation is not the expected one or went further
    "moved": lambda ladder: CommitConflict(
        f"ladder {ladder!r}: the live generation moved on during the switch"
    ),
    # begin: another owner holds the lock (details: the holder, milliseconds left)
    "running": lambda ladder, holder, ms_left: RerateRunning(ladder, text(holder), float(ms_left) / 1000),
}


def refusal(status: str, ladder: str, *detail: Any) -> Exception:
    """The exception for a request on `ladder` refused with `status` (a key of `REFUSALS`)."""
    return REFUSALS[status](ladder, *detail)


def check_reply(ladder: str, reply: Sequence[Any]) -> None:
    """Return if a script's `reply` is ``{'ok', …}``; else raise the exception of its status."""
    status = text(reply[0])
    if status != "ok":
        raise refusal(status, ladder, *reply[1:])
