"""The store by role: one small protocol per kind of caller, each with the few methods it
calls, so that a caller declares what it needs and a wrapper (`service.timed_store`) or a test
double implements only that. `StateStore` (`store.base`) is all of them at once: the base the
memory and Redis stores implement.

- `BatchStore` — the batch path (`Processor`): read, commit, a whole ladder's states.
- `ReadStore` — the read side (`Queries`, the worker's pages, its loss guard).
- `RerateStore` — a re-rate (`corrections.Rerate`): generations, lock, freeze, switch, outbox,
  on top of the batch path (it rebuilds with a `Processor`) and the voids.
- `VoidStore` — the voided matches.
- `DeploymentStore` — what `store.deployment.bind` checks: stored format, ladders' topics.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

from stream_rater.store.values import (
    BoardAround,
    BoardRanks,
    BoardRow,
    Commit,
    CommitConflict,
    Event,
    Generations,
    Lookup,
    PlayerState,
    RatingTotals,
    ReadRequest,
    Snapshot,
    Void,
)


class BatchStore(Protocol):
    """What the batch path calls (`Processor`): one read and one commit per batch for every
    ladder of it, and a whole ladder's states when a season starts."""

    @property
    def round_trips(self) -> int:
        """Round trips to the backing service so far (reads + commits; counted alike in memory)."""
        ...

    @abstractmethod
    async def read_many(self, requests: Sequence[ReadRequest]) -> list[Snapshot]:
        """`read` of several ladders (one request each), in `requests`' order, in one round
        trip."""

    @abstractmethod
    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        """`commit` of several ladders (one commit each: two of one ladder would have no
        defined order, their calls may run concurrently) in one round trip, every one atomic
        on its own: for each, None if it was applied, or its refusal (a `CommitConflict`,
        `LadderFrozen` included). Any other error is raised, and then any of the commits may
        have been applied."""

    @abstractmethod
    async def players(
        self,
        ladder: str,
        effects: bool = False,
        generation: int | None = None,
        only: Collection[str] | None = None,
    ) -> dict[str, PlayerState]:
        """Every stored player (or effect) state of `ladder` (live, or the given generation);
        with `only`, just those of these ids that are stored."""

    @abstractmethod
    async def forget_produced(self, produced: Mapping[str, tuple[int, Collection[str]]]) -> None:
        """Drop the stored events of matches whose events are with the broker: for each
        ladder, (the generation they were committed to, their match ids). What a worker that
        stops or loses partitions calls, as no next commit of its names them (`Commit.produced`);
        each id is staged once, at its commit, so dropping it again is harmless."""


class GenerationsStore(Protocol):
    """A ladder's generations (see `StateStore`): the read side and a re-rate both need them."""

    @abstractmethod
    async def generations(self, ladder: str) -> Generations:
        """The ladder's live and staging generations, live position and lock holder."""


class ReadStore(GenerationsStore, Protocol):
    """What the read side calls: the read API (`Queries`), the worker's pages and its loss
    guard. Everything of the live generation."""

    async def read(
        self,
        ladder: str,
        player_ids: Iterable[str],
        effect_ids: Iterable[str],
        match_ids: Iterable[str],
        generation: int | None = None,
    ) -> Snapshot:
        """States of the given players/effects and the stored events of applied matches, of
        the live generation (or the staging `generation`; `GenerationGone` if it is not)."""

    @abstractmethod
    async def lookup(self, ladder: str, player_ids: Sequence[str], since: float | None = None) -> Lookup:
        """States and leaderboard places of many players, in one round trip: each ranked
        player's place is its rank less one (`board_ranks`: tied players share it; players
        idle since `since` are not ranked), ``ranked`` how many players the board ranks."""

    @abstractmethod
    async def leaderboard(
        self, ladder: str, top: int, start: int = 0, season: int | None = None
    ) -> list[tuple[str, float]]:
        """The `top` players of `ladder` by display rating from place `start` (0-based) on,
        best first; of the live leaderboard, or the final one of an ended `season` (1-based,
        see `seasons`; `KeyError` if it has not ended)."""

    @abstractmethod
    async def season_states(
        self, ladder: str, season: int, player_ids: Sequence[str]
    ) -> dict[str, PlayerState]:
        """The states of `player_ids` (those it has) as the ended `season` (1-based) left them:
        μ, σ, games, last match and peak at the season start that ended it, kept for each
        player that season start wrote (every one whose rating its reset moved; a player it
        left as it was is absent: the caller reads the live state); `KeyError` if it has not
        ended."""

    @abstractmethod
    async def seasons(self, ladder: str) -> list[str]:
        """The ids of the season-start records applied to the live generation, in order:
        season n + 1 began with the n-th; the current season is ``len(...) + 1``."""

    @abstractmethod
    async def board_ranks(self, ladder: str, player_ids: Sequence[str], since: float | None) -> BoardRanks:
        """The rank of each of `player_ids` on the live eligible leaderboard (`BoardRow`: tied
        players share one; absent: not ranked, or idle since `since`, the read's activity
        cutoff, None without an activity rule) and how many players it ranks. O(log N) per
        player (`BoardBehind` when too many went idle since the last trim)."""

    @abstractmethod
    async def board_top(
        self, ladder: str, top: int, since: float | None, season: int | None = None
    ) -> list[BoardRow]:
        """The first `top` rows of the live eligible leaderboard (players idle since `since`
        left out), or of the final one of an ended `season` (1-based, activity not applied;
        `KeyError` if it has not ended), best first, ranked. O(log N + top)."""

    @abstractmethod
    async def board_around(
        self, ladder: str, player_id: str, n: int, since: float | None
    ) -> BoardAround | None:
        """The rows of the live eligible leaderboard from `n` above `player_id` to `n` below,
        ranked, and the player's rank; None when the player is not on it. O(log N + n)."""

    async def board_arounds(
        self, ladder: str, player_ids: Sequence[str], n: int, since: float | None
    ) -> dict[str, BoardAround | None]:
        """`board_around` of each of `player_ids` (a store may answer them in one round trip)."""
        return {p: await self.board_around(ladder, p, n, since) for p in player_ids}

    @abstractmethod
    async def rating_totals(self, ladder: str, since: float | None) -> RatingTotals:
        """The live eligible leaderboard's player count and display-rating sum (players idle
        since `since` left out): the running sum the commits keep, read in O(1)."""

    @abstractmethod
    async def recount_totals(self, ladder: str, since: float | None) -> RatingTotals:
        """`rating_totals` counted again from every entry of the leaderboard, in bounded steps
        (not one snapshot while the ladder moves): the check of the running sum."""

    @abstractmethod
    async def trim_board(self, ladder: str, since: float) -> int:
        """Take every player idle since `since` off the live leaderboard, in bounded steps, as
        the commits do a few at a time; how many it took off (the worker calls it on a ladder
        whose commits stopped)."""

    @abstractmethod
    async def board_entries(self, ladder: str, since: float | None) -> tuple[dict[str, float], float | None]:
        """The whole live eligible leaderboard (player → score, players idle since `since` left
        out) and the running sum of its scores (None: not kept), for `verify`. O(N)."""

    @abstractmethod
    async def history(self, ladder: str, player_id: str, limit: int) -> list[Event]:
        """The player's most recent rating-changed events, newest first: at most `limit` and
        the store's history limit (``STREAM_RATER_HISTORY_LIMIT``)."""

    @abstractmethod
    async def quality(self, ladder: str, scorer: str, last: int) -> tuple[dict[str, float], list[list[Any]]]:
        """The live generation's cumulative prediction-quality sums of `scorer` on `ladder`
        and its newest `last` match scores, newest first (`processor.quality`)."""

    @abstractmethod
    async def placings(self, ladder: str, match_id: str) -> list[tuple[str, int]] | None:
        """The rated players of an applied match of the live generation with their team's
        rank (`Commit.placings`), in the match's order; None when the match has no marker
        (never applied, or its marker expired); empty for a marker with none (a match with no
        rated players' events, or one applied before the store kept them)."""

    async def ping(self) -> bool:
        """True when the store answers."""


class VoidStore(Protocol):
    """The voided matches of a ladder."""

    @abstractmethod
    async def voids(self, ladder: str) -> dict[str, Void]:
        """Voided match ids of the ladder and why (``{"reason", "at"}``)."""

    @abstractmethod
    async def set_voids(
        self, ladder: str, add: Mapping[str, Void], remove: Iterable[str], generation: int
    ) -> None:
        """Record voids (match id → why), lift others, and note that the staging `generation`
        is built with the voids as they now are."""


class RerateStore(BatchStore, VoidStore, GenerationsStore, Protocol):
    """What a re-rate calls (`corrections.Rerate`): the batch path (it rebuilds the staging
    generation with a `Processor`), the voids, and the steps of its protocol.

    Each step (`begin_rerate`, `renew`, `freeze`, `stage`, `switch`, `release`,
    `finish_rerate`, `abort_rerate`) may run twice in a row: a store's client sends a step
    again when its reply was lost after the store ran it (a connection cut, Redis restarted),
    and the second run answers as the first did and changes nothing more, so the re-rate's
    outcome and report are those of one run. A caller calling a step twice gets the same."""

    @abstractmethod
    async def begin_rerate(
        self,
        ladder: str,
        owner: str,
        lease: float,
        params: Mapping[str, Any] | None,
        request: str | None = None,
    ) -> tuple[int, int | None]:
        """Take the ladder's re-rate lock for `lease` seconds and open a new, empty staging
        generation with parameter overrides `params`. Returns it and the staging generation
        of an abandoned re-rate (None if none) for the caller to drop. `RerateRunning` if
        another owner holds the lock. `request` names this begin (None: a new name): sent again
        with it while the generation it opened is staging, it answers the same, opening no
        other (the owner's begin without it, e.g. its next attempt, opens a new one)."""

    @abstractmethod
    async def restore_params(self, ladder: str, generation: int, params: Mapping[str, Any] | None) -> None:
        """Make `params` the parameter overrides of `generation` (a store rebuilt from a
        checkpoint made with them: `offline.recovery`)."""

    @abstractmethod
    async def renew(self, ladder: str, owner: str, lease: float) -> None:
        """Extend the lock (and a freeze `owner` set) by `lease` seconds; `LockLost` if it
        is no longer `owner`'s."""

    @abstractmethod
    async def freeze(self, ladder: str, owner: str, ttl: float) -> None:
        """Refuse live commits of the ladder (`LadderFrozen`) for `ttl` seconds at most."""

    @abstractmethod
    async def stage(
        self, ladder: str, owner: str, staging: int, events: Sequence[Event], dropped: Iterable[str] = ()
    ) -> None:
        """Stage correction `events` of the `staging` generation (replacing a staged event of
        the same player) and withdraw those of the `dropped` players, ahead of the switch
        that makes them the outbox, so that the switch's cost does not grow with them.
        `LockLost` if `owner` no longer holds the lock or `staging` is no longer staging."""

    @abstractmethod
    async def switch(
        self,
        ladder: str,
        owner: str,
        staging: int,
        live: Generations,
        outbox: Sequence[Event] = (),
        dropped: Iterable[str] = (),
    ) -> None:
        """Atomically stage `outbox` and withdraw `dropped` as `stage` does, make `staging` the
        live generation and its staged events the outbox (the correction events still to
        send), if `owner` holds the lock and the freeze, and the live generation is still
        `live` at the same positions; else `LockLost` or `CommitConflict`, having changed
        nothing. The freeze then becomes a hold of the outbox's players: live commits writing
        one of them are refused (`LadderFrozen`) until `release`, the others go on. Sent again
        once `staging` is live (its reply lost, the client retried), it does nothing."""

    @abstractmethod
    async def copy_seasons(self, ladder: str, source: int, target: int, seasons: Sequence[str]) -> None:
        """Copy the ended `seasons` (season-start ids, in order) of generation `source` into
        generation `target`: their leaderboards, archived states and places in its seasons
        list (appended)."""

    @abstractmethod
    async def release(self, ladder: str, owner: str, players: Iterable[str]) -> None:
        """End the hold of `players` (their correction events are with the broker)."""

    @abstractmethod
    async def finish_rerate(self, ladder: str, owner: str) -> None:
        """Drop the sent outbox, lift the freeze (or hold), release the lock. `LockLost` if
        `owner` no longer holds it, unless nobody does and no outbox, freeze or hold is left
        (sent again after it took effect)."""

    @abstractmethod
    async def abort_rerate(self, ladder: str, owner: str) -> int | None:
        """Give up: lift the freeze, forget the staging generation (returned, to drop),
        release the lock. A hold stays (a switch took effect whose replies were lost: its
        players wait for the next re-rate to send their events, or for the hold's expiry).
        A no-op if `owner` no longer holds it (None), except sent again after it took effect:
        the generation it forgot (the last handed out, neither staging nor live) is returned
        again, to drop."""

    @abstractmethod
    async def drop_generation(self, ladder: str, generation: int) -> None:
        """Delete every key of a generation that is not live."""

    @abstractmethod
    async def outbox(self, ladder: str) -> list[Event]:
        """Correction events a switch stored and nobody has sent yet, by player id."""

    @abstractmethod
    async def unproduced(
        self, ladder: str, generation: int, match_ids: Sequence[str]
    ) -> dict[str, list[Event]]:
        """Of `match_ids`, those whose markers in `generation` still hold their events (not
        known to be with the broker: a worker died between its commit and its produce, or
        is producing them now), with those events, in the order of `match_ids`."""


class DeploymentStore(Protocol):
    """What `store.deployment.bind` checks: the stored format and the ladders' matches topics."""

    #: What the store's keys are, for messages (a Redis store: its key prefix).
    namespace: str

    async def deployment_record(self, fields: Mapping[str, str] | None = None) -> dict[str, str]:
        """The store's deployment record (``format``: see `store.deployment`),
        after first writing each of `fields` the record does not have yet (in one step: two
        processes binding at once cannot both write). Kept in the store object itself here,
        as a memory store's data is."""

    async def ladder_topics(self, ladders: Sequence[str], topic: str | None) -> dict[str, str]:
        """The matches topic recorded for each of `ladders` that has one, after recording
        `topic` (if given) for those that had none (`store.deployment`)."""

    async def unrecorded_format(self) -> int | None:
        """The earlier stored format of a store without a deployment record, told by its
        layout, or None (new, or of this release's format)."""

    @abstractmethod
    async def ladders(self) -> list[str]:
        """Names of the ladders that have stored players."""
