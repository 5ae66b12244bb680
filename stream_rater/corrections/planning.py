"""What a re-rate is asked and what it reports, and the checks made before it builds.

`Correction` (void, un-void or re-rate a ladder), its pacing (`Tuning`), the ladder's
history it reads (`History` of `Entry`) and its `RerateReport`; `check_voids` and
`check_not_lost` refuse a correction the history or the store cannot support. The protocol
itself is in `stream_rater.corrections.rerate`.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stream_rater.config.rules import refuse_rule_overrides
from stream_rater.contracts import CorrectionRequest, MatchFinished
from stream_rater.contracts.correction_request import KINDS
from stream_rater.processor import StoreLost

#: One entry of a ladder's history: the match and where its record is in the matches topic
#: (None for a match read from a file).
Entry = tuple[MatchFinished, tuple[int, int] | None]


class History(Protocol):
    """A ladder's matches in log order; each `read` returns what was appended since the last."""

    async def read(self) -> list[Entry]:
        """The entries not returned before (all of them the first time)."""

    def reached(self) -> dict[int, int]:
        """Partition → offset up to which the topic was read."""

    def committed(self) -> dict[int, int]:
        """Partition → offset the workers' consumer group had committed before the re-rate
        began (read before it looks at the store; empty when unknown)."""


class UnknownMatches(ValueError):
    """Matches to void (or un-void) that are not in the ladder's history (or not voided)."""


@dataclass(slots=True)
class RerateReport:
    """What one re-rate did."""

    ladder: str
    generation: int = 0
    applied: int = 0
    voided: list[str] = field(default_factory=list)
    unvoided: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    corrections: int = 0
    seconds: float = 0.0
    #: From the freeze to the switch: how long live commits of the ladder were refused.
    blocked_seconds: float = 0.0
    #: Where that time went: step → seconds (freeze, read, apply, compare, unproduced, switch).
    blocked_steps: dict[str, float] = field(default_factory=dict)
    #: From the switch until every correction event was sent: the corrected players' hold
    #: (a live commit of one waits until its event is sent; the others go on).
    held_seconds: float = 0.0
    #: Live positions at the switch (partition → next offset).
    positions: dict[int, int] = field(default_factory=dict)
    nothing_to_do: bool = False
    #: A line per match of the history the model could not rate: skipped, as the worker
    #: dead-letters it.
    skipped: list[str] = field(default_factory=list)
    #: The checkpoint the re-rate started from (`checkpoints`), None: the ladder's beginning.
    checkpoint: str | None = None

    def steps_line(self) -> str:
        """Where the blocked time went, e.g. ``freeze 0.5 ms, read 0.0 ms, …``."""
        return ", ".join(f"{step} {seconds * 1000:.1f} ms" for step, seconds in self.blocked_steps.items())

    def line(self) -> str:
        """A one-line human summary."""
        if self.nothing_to_do:
            return f"ladder {self.ladder!r}: nothing to do (the voids are already as asked)"
        rate = self.applied / self.seconds if self.seconds > 0 else 0.0
        return (
            f"ladder {self.ladder!r}: re-rated {self.applied} matches into generation {self.generation} "
            f"in {self.seconds:.2f} s ({rate:,.0f} matches/s); {self.corrections} players corrected; "
            f"live ladder blocked {self.blocked_seconds * 1000:.1f} ms at the switch, its corrected players "
            f"held {self.held_seconds * 1000:.1f} ms while their events were sent"
            + (f"; started from checkpoint {self.checkpoint}" if self.checkpoint else "")
            + (
                f"; {len(self.skipped)} matches skipped (the model could not rate them)"
                if self.skipped
                else ""
            )
        )


#: Rounds of following the live generation after the comparison before freezing anyway (when
#: matches arrive faster than the re-rate applies them, it would never get closer).
FOLLOW_ROUNDS = 20

#: ``progress(done, known)``: entries of the history processed so far, and known so far.
Progress = Callable[[int, int], None]
Send = Callable[[Sequence[dict[str, Any]]], Awaitable[None]]


def new_owner() -> str:
    """A lock owner name that says who holds it: host, process id and a random tag."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class Correction:
    """One correction of one ladder, whoever asked for it (the CLI's flags, a worker's
    `CorrectionRequest`): void or un-void `match_ids`, or re-rate with `params` overriding the
    model's parameters from now on. `reason` goes with the correction events."""

    kind: str
    ladder: str
    match_ids: tuple[str, ...] = ()
    reason: str = ""
    params: Mapping[str, bool | int | float | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"correction kind must be one of {', '.join(map(repr, KINDS))}, got {self.kind!r}"
            )
        refuse_rule_overrides(self.params)

    @classmethod
    def from_request(cls, request: CorrectionRequest) -> Correction:
        """The correction a (validated) request from the corrections topic asks for."""
        return cls(request.kind, request.ladder, request.match_ids, request.reason, dict(request.params))

    def request(self, request_id: str | None = None) -> CorrectionRequest:
        """The request that asks a worker for this correction."""
        return CorrectionRequest(
            self.kind, self.ladder, self.match_ids, self.reason, dict(self.params), request_id
        )


@dataclass(frozen=True)
class Tuning:
    """How a re-rate paces itself. `lease` (s): how long the lock and the freeze outlive a
    crashed re-rate. `batch_size`: matches per processor batch at most (fewer when a batch
    would take more than a sixth of the lease: see `corrections.building.Build`). `catch_up`: compare the
    generations once a round of reading the topic found fewer new matches than this; `close`:
    freeze once a round found fewer than this (or after `FOLLOW_ROUNDS`), so that few matches
    are left to apply inside the freeze. `recent`: how many of the last matches applied are
    checked for events the live worker has not produced (at least twice the worker's batch
    size: a worker's last batch, and its predecessor's). `send_chunk`: correction events sent
    (and their players released) at a time after the switch: a held player's match waits
    about two chunks' sends at most."""

    lease: float = 10.0
    batch_size: int = 1000
    catch_up: int = 1000
    close: int = 20
    recent: int = 1000
    send_chunk: int = 250


#: The pacing a re-rate uses unless told otherwise.
DEFAULT_TUNING = Tuning()


@dataclass(frozen=True)
class RerateOptions:
    """How a re-rate runs, whatever it corrects: its pacing (`tuning`), what follows its build
    (`progress`, told the matches done and in all) and the name it holds the ladder's lock
    under (`owner`; None: a new one, `new_owner`)."""

    tuning: Tuning = DEFAULT_TUNING
    progress: Progress | None = None
    owner: str | None = None


#: How a re-rate runs unless told otherwise.
DEFAULT_OPTIONS = RerateOptions()


def check_voids(
    ladder: str,
    entries: list[Entry],
    current: Mapping[str, dict[str, Any]],
    void: list[str],
    unvoid: list[str],
    pending: bool,
) -> None:
    """Refuse to void a match the history lacks, or to un-void one that is not voided
    (unless an interrupted re-rate already lifted it: then this one completes it)."""
    known = {match.match_id for match, _ in entries}
    unknown = [m for m in void if m not in known]
    if unknown:
        raise UnknownMatches(
            f"ladder {ladder!r} has no match {', '.join(map(repr, unknown))} in its history "
            f"({len(known)} matches read)"
        )
    not_voided = [m for m in unvoid if m not in current]
    if not_voided and not pending:
        raise UnknownMatches(f"ladder {ladder!r}: match {', '.join(map(repr, not_voided))} is not voided")


def check_not_lost(
    ladder: str,
    entries: list[Entry],
    positions: Mapping[int, int],
    committed: Mapping[int, int],
    voids: Mapping[str, dict[str, Any]],
) -> None:
    """Refuse to re-rate a ladder whose live generation lacks a match the workers committed
    the offset of: the store lost data (a failover to a replica that missed writes). A new
    generation built up to the store's positions would hide the loss from the workers'
    watermark check, and the matches after them would never be rated. A worker commits its
    offsets only after the store, so a healthy store is never behind them. Voided matches
    and repeats of a match id are skipped by the worker, not applied: they prove nothing."""
    seen: set[str] = set()
    for match, where in entries:
        repeat = match.match_id in seen
        seen.add(match.match_id)
        if where is None or repeat or match.match_id in voids or where[0] not in positions:
            continue
        partition, offset = where
        if positions[partition] <= offset < committed.get(partition, 0):
            raise StoreLost(
                ladder,
                f"the workers committed matches[{partition}]@{offset} (match "
                f"{match.match_id!r}) but the store's ladder goes only up to offset "
                f"{positions[partition]}: the store lost data",
            )
