"""The rating states a processor keeps between batches, so that a batch reads from the store
only the players it does not already hold.

A ladder's states are held as of one point of its history: its generation and watermark
right after this processor's last commit to it. Every commit that writes states applies a
match and so moves the watermark (`store.base`). A read that shows the same generation and
watermark therefore proves that no state changed since, and the held states are exactly the
stored ones. A read that shows anything else — another worker committed, a re-rate switched
the generation, the store lost data — makes them worthless: they are dropped, and the batch
reads all of its players again.

Bounded: at most `limit` states in all. The ladders committed to least recently are dropped
first, and within a ladder the states written least recently.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from stream_rater.store.base import PlayerState, Snapshot


@dataclass(slots=True)
class Held:
    """One ladder's held states, valid at `generation` and `watermark`, and the parameter
    overrides of that generation (`Snapshot.params`)."""

    generation: int
    watermark: int
    players: dict[str, PlayerState]
    effects: dict[str, PlayerState]
    params: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.players) + len(self.effects)


class KnownStates:
    """Held states per ladder (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._ladders: dict[str, Held] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def held(self, ladder: str) -> Held | None:
        """What is held of `ladder`, or None."""
        return self._ladders.get(ladder)

    def missing(
        self, held: Held | None, players: Sequence[str], effects: Sequence[str]
    ) -> tuple[list[str], list[str]]:
        """The ids of `players` and `effects` that `held` (of their ladder) does not hold."""
        if held is None:
            return list(players), list(effects)
        return [p for p in players if p not in held.players], [e for e in effects if e not in held.effects]

    def complete(
        self,
        ladder: str,
        held: Held | None,
        snapshot: Snapshot,
        players: Iterable[str],
        effects: Iterable[str],
    ) -> Snapshot | None:
        """`snapshot`, read of `ladder` without the ids `held` holds, with their states added
        (those of `players` and `effects`); None if `held` is not valid at the snapshot's
        generation and watermark — then it is dropped, and the batch must read them all."""
        if held is None:
            return snapshot
        if (held.generation, held.watermark) != (snapshot.generation, snapshot.watermark):
            self.drop(ladder)
            return None
        found = {p: s for p in players if (s := held.players.get(p)) is not None}
        found_effects = {e: s for e in effects if (s := held.effects.get(e)) is not None}
        return replace(
            snapshot, players={**found, **snapshot.players}, effects={**found_effects, **snapshot.effects}
        )

    def unread(self, held: Held | None, players: Sequence[str], effects: Sequence[str]) -> Snapshot | None:
        """The snapshot a read of `players` and `effects` would give if nothing changed since
        `held` (their ladder's), or None unless it holds them all. What else a read tells —
        matches already applied or voided, another commit meanwhile — the commit then checks
        (`Commit.unread`)."""
        if held is None:
            return None
        try:
            found = {p: held.players[p] for p in players}
            found_effects = {e: held.effects[e] for e in effects}
        except KeyError:
            return None
        return Snapshot(found, found_effects, {}, held.watermark, held.generation, params=held.params)

    def committed(
        self,
        ladder: str,
        snapshot: Snapshot,
        players: dict[str, PlayerState],
        effects: dict[str, PlayerState],
        applied: int,
    ) -> None:
        """A commit of `ladder`, computed from the complete `snapshot`, applied `applied`
        matches and wrote `players` and `effects`: hold the snapshot's states with the written
        ones, as of the watermark right after it. (Had another commit come in between, the
        next read shows a later watermark and drops them.)"""
        held = self._ladders.pop(ladder, None)
        if held is not None:
            self._size -= len(held)
        if held is None or (held.generation, held.watermark) != (snapshot.generation, snapshot.watermark):
            held = Held(snapshot.generation, snapshot.watermark, {}, {}, snapshot.params)
        for into, read, written in (
            (held.players, snapshot.players, players),
            (held.effects, snapshot.effects, effects),
        ):
            into.update(read)
            for key, state in written.items():
                into.pop(key, None)  # re-inserted last: the most recently written
                into[key] = state
        held.watermark += applied
        self._ladders[ladder] = held
        self._size += len(held)
        self._trim(held)

    def drop(self, ladder: str) -> None:
        """Forget `ladder`'s states."""
        held = self._ladders.pop(ladder, None)
        if held is not None:
            self._size -= len(held)

    def _trim(self, newest: Held) -> None:
        """Drop the least recently committed ladders, then the oldest states of `newest`,
        until at most `limit` states are held."""
        for ladder in list(self._ladders):
            if self._size <= self.limit or self._ladders[ladder] is newest:
                break
            self.drop(ladder)
        excess = self._size - self.limit
        if excess > 0:
            for states in (newest.effects, newest.players):
                gone = list(itertools.islice(states, min(excess, len(states))))
                for key in gone:
                    del states[key]
                excess -= len(gone)
                self._size -= len(gone)
