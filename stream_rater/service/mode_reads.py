"""The read API's ``?mode=`` (issue 48): a question about a ladder with modes is asked of one
of its modes, through a view of the store and the ladders that is that mode alone, so that every
read (`queries.Queries`, `explain`) answers it unchanged.

`ModeView` is the store as one mode of one ladder sees it: player ids are the players' own
(the store's are ``<mode>@<player id>``, `contracts.modes`), the leaderboard reads are the
mode's board; the ladder is `Ladder.mode_ladder` (same name, the mode's model and parameters).

The rule (`mode_of`): on a ladder with modes, ``mode`` names one of them, or the ladder's
``default_mode`` stands for it; a read of a moded ladder naming no mode without a default is a
400 (which mode is meant is not for the server to guess). A mode that is not a plain word is a
400; a mode on a ladder without modes, or one the ladder does not declare, is a 404. Live
quality without a mode is the whole ladder's; with one, that mode's (scorer ``live@<mode>``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stream_rater.config.ladders import Ladders
from stream_rater.contracts.modes import board_name, mode_problem, split_stored, stored_id
from stream_rater.queries import Queries, QueryError
from stream_rater.store import BoardAround, BoardRanks, BoardRow, Lookup, PlayerState, RatingTotals, ReadStore
from stream_rater.store.base import Event, Snapshot


class UnknownMode(QueryError):
    """A mode the ladder does not have."""

    status = 404


def mode_of(ladders: Ladders, ladder_name: str, raw: str | None, *, default: bool = True) -> str | None:
    """The mode a read of `ladder_name` with ``?mode=`` `raw` is about (None: the ladder has no
    modes, or — `default` False — none named); an unknown ladder is left to the read itself."""
    ladder = ladders.get(ladder_name, None)
    if raw is None:
        if ladder is None or not ladder.modes or not default:
            return None
        if ladder.default_mode is None:
            raise QueryError(
                f"mode: ladder {ladder_name!r} has modes ({', '.join(ladder.modes)}): name one with ?mode="
            )
        return ladder.default_mode
    problem = mode_problem(raw)
    if problem is not None:
        raise QueryError(f"mode: {problem}, got {raw!r}")
    if ladder is None:
        return None
    if not ladder.modes:
        raise UnknownMode(f"mode: ladder {ladder_name!r} has no modes")
    if raw not in ladder.modes:
        raise UnknownMode(
            f"mode: ladder {ladder_name!r} has no mode {raw!r} (its modes: {', '.join(ladder.modes)})"
        )
    return raw


def mode_queries(
    queries: Queries, ladder_name: str, query: Mapping[str, str], *, default: bool = True
) -> Queries:
    """`queries` as the request's mode sees them (`mode_of`), or `queries` itself."""
    mode = mode_of(queries.ladders, ladder_name, query.get("mode"), default=default)
    if mode is None:
        return queries
    ladder = queries.ladders[ladder_name]
    view = copy.copy(queries)
    view.store = ModeView(queries.store, mode)
    view.ladders = Ladders([ladder.mode_ladder(mode)], source=queries.ladders.source)
    return view


def queries_mode(queries: Queries) -> str | None:
    """The mode `queries` are of (`mode_queries`), or None."""
    return queries.store.mode if isinstance(queries.store, ModeView) else None


class ModeView:
    """The reads of `store` (a `ReadStore`) as one mode of a moded ladder sees them."""

    def __init__(self, store: ReadStore, mode: str) -> None:
        self.store, self.mode = store, mode

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _ids(self, ids: Iterable[str]) -> list[str]:
        return [stored_id(self.mode, p) for p in ids]

    def _own(self, states: Mapping[str, PlayerState]) -> dict[str, PlayerState]:
        """`states` by stored id → this mode's, by player id."""
        found = {}
        for sid, state in states.items():
            mode, player_id = split_stored(sid)
            if mode == self.mode:
                found[player_id] = state
        return found

    async def read(
        self,
        ladder: str,
        player_ids: Iterable[str],
        effect_ids: Iterable[str],
        match_ids: Iterable[str],
        generation: int | None = None,
    ) -> Snapshot:
        found = await self.store.read(ladder, self._ids(player_ids), effect_ids, match_ids, generation)
        return dataclasses.replace(found, players=self._own(found.players))

    async def lookup(self, ladder: str, player_ids: Sequence[str], since: float | None = None) -> Lookup:
        states = (await self.read(ladder, player_ids, [], [])).players
        ranks = await self.board_ranks(ladder, player_ids, since)
        return Lookup(states, {p: r - 1 for p, r in ranks.ranks.items()}, ranks.total)

    async def season_states(
        self, ladder: str, season: int, player_ids: Sequence[str]
    ) -> dict[str, PlayerState]:
        return self._own(await self.store.season_states(ladder, season, self._ids(player_ids)))

    async def board_ranks(self, ladder: str, player_ids: Sequence[str], since: float | None) -> BoardRanks:
        return await self.store.board_ranks(board_name(ladder, self.mode), player_ids, since)

    async def board_top(
        self, ladder: str, top: int, since: float | None, season: int | None = None
    ) -> list[BoardRow]:
        return await self.store.board_top(board_name(ladder, self.mode), top, since, season)

    async def board_around(
        self, ladder: str, player_id: str, n: int, since: float | None
    ) -> BoardAround | None:
        return await self.store.board_around(board_name(ladder, self.mode), player_id, n, since)

    async def board_arounds(
        self, ladder: str, player_ids: Sequence[str], n: int, since: float | None
    ) -> dict[str, BoardAround | None]:
        return await self.store.board_arounds(board_name(ladder, self.mode), player_ids, n, since)

    async def rating_totals(self, ladder: str, since: float | None) -> RatingTotals:
        return await self.store.rating_totals(board_name(ladder, self.mode), since)

    async def history(self, ladder: str, player_id: str, limit: int) -> list[Event]:
        return await self.store.history(ladder, stored_id(self.mode, player_id), limit)

    async def placings(self, ladder: str, match_id: str) -> list[tuple[str, int]] | None:
        """The match's players of this mode (None if it has none: another mode's match)."""
        found = await self.store.placings(ladder, match_id)
        own = [(split_stored(sid)[1], rank) for sid, rank in found or () if split_stored(sid)[0] == self.mode]
        return own or None
