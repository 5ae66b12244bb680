"""The compare and switch steps of a re-rate: the correction events (players whose state
differs between the generations) and the time each step of the freeze took."""

from __future__ import annotations

import time
from typing import Any

from stream_rater.contracts import correction_changed, format_timestamp
from stream_rater.corrections.planning import RerateReport
from stream_rater.rating.base import Rating, RatingModel
from stream_rater.store.base import PlayerState
from stream_rater.store.roles import BatchStore


class Clock:
    """Seconds per step, each measured from the end of the previous one."""

    def __init__(self, steps: dict[str, float]) -> None:
        self.steps, self.last = steps, time.perf_counter()

    def step(self, name: str) -> None:
        now = time.perf_counter()
        self.steps[name], self.last = now - self.last, now


class Compare:
    """The correction events: one per player whose state differs between the live generation
    and the staging one (a player the staging one lacks is back at the prior). `all` compares
    every player; `again` re-compares the given ones, whose states may have moved since, and
    says what changed since the events were `staged`."""

    def __init__(
        self,
        store: BatchStore,
        ladder: str,
        model: RatingModel,
        generation: int,
        report: RerateReport,
        at: float,
    ) -> None:
        self.store, self.ladder, self.model, self.generation = store, ladder, model, generation
        prior = model.initial()
        self.empty = PlayerState(prior.mu, prior.sigma)
        # The ladder is part of the id: two ladders' first re-rates are both generation 1, and a
        # player id on both would otherwise get one event_id with two payloads.
        self.id = f"rerate:{ladder}:{generation}"
        self.cause: dict[str, Any] = {
            "id": self.id,
            "reason": report.reason,
            "voided": report.voided,
            "unvoided": report.unvoided,
            "params": report.params,
        }
        self.stamp = format_timestamp(at)
        #: Player id → the correction event of a player whose state differs (made when
        #: compared: inside the freeze only those of the players compared `again`).
        self.events: dict[str, dict[str, Any]] = {}
        #: The players whose events went to the store before the freeze (`staged`).
        self.staged: set[str] = set()

    async def all(self) -> None:
        """Compare every player of both generations."""
        await self._compare(None)

    def stage(self) -> list[dict[str, Any]]:
        """The events so far, noted as staged in the store (`RerateStore.stage`)."""
        self.staged = set(self.events)
        return list(self.events.values())

    async def again(self, players: set[str] | None) -> tuple[list[dict[str, Any]], list[str]]:
        """Compare `players` (None: every player) again. Returns what changed for them since
        `stage`: the events of those with one, and the staged players without one now."""
        if players is None or players:
            await self._compare(players)
        compared = self.events.keys() | self.staged if players is None else players
        return (
            [self.events[p] for p in compared if p in self.events],
            [p for p in compared if p not in self.events and p in self.staged],
        )

    def sorted(self) -> list[dict[str, Any]]:
        """Every event, by player id."""
        return [self.events[player_id] for player_id in sorted(self.events)]

    async def _compare(self, only: set[str] | None) -> None:
        before = await self.store.players(self.ladder, only=only)
        after = await self.store.players(self.ladder, generation=self.generation, only=only)
        for player_id in before.keys() | after.keys() if only is None else only:
            old, new = before.get(player_id, self.empty), after.get(player_id, self.empty)
            if old[:4] == new[:4]:
                self.events.pop(player_id, None)
            else:
                self.events[player_id] = self._event(player_id, old, new)

    def _event(self, player_id: str, old: PlayerState, new: PlayerState) -> dict[str, Any]:
        return correction_changed(
            self.id,
            self.ladder,
            player_id,
            self.model.name,
            old[:2],
            new[:2],
            self.model.display(Rating(new.mu, new.sigma)),
            new.games,
            self.stamp,
            self.cause,
            self.model.display(Rating(old.mu, old.sigma)),
        )
