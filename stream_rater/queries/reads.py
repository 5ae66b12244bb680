"""The `Queries`: questions about a ladder's live ratings — batch lookup, leaderboard, predictions, balanced
teams — as the functions that the HTTP API (worker and ``stream-rater serve``), the CLI and
Python callers share. Read-only: nothing here writes a state.

Reads are time-aware: a ladder with time-scaled dynamics shows each player's σ as it is now,
``σ² + γ²·Δt`` since the player's last match (`RatingModel.as_of`), without storing it. A player
the ladder has never seen gets the model's prior and is flagged ``"new": true``.

Ladder rules (`config.rules`) apply here too: each player carries the rules' flags
(`READ_FLAGS`, always false on a ladder without that rule) and their ``peak``; the rating as of
now includes what the rules do to a state before the player's next match (inactivity decay);
the leaderboard and the ranks and percentiles count eligible players only. The store keeps a
leaderboard of exactly those (eligibility by games decided when a state is written, idle players trimmed off
by the commits), so that every rank read — rank, around-me, top-N, the player lookup, an ended
season's board — is O(log N) whatever the rules; activity is counted against the read's own
clock (the few players who went idle since the last trim are skipped).

Ranks are standard competition ranking ("1224"): 1 + the players rated strictly higher, so tied
players share a rank (and a percentile); inside a tie rows come by player id, descending
(byte order), the same in every read (`store.BoardRow`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from stream_rater.archive import ArchiveReader, ArchiveUnavailable
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.rules import DAY, READ_FLAGS, Standing
from stream_rater.config.settings import DEFAULT_HISTORY, Settings
from stream_rater.queries.arguments import (
    NotRanked,
    QueryError,
    TooManyPlayers,
    UnknownPlayer,
    ladder_of,
    limit_of,
    n_of,
    parties_of,
    party_effect_names,
    player_ids,
    season_of,
    teams_of,
    top_of,
)
from stream_rater.rating.base import Rating
from stream_rater.rating.predict import MAX_RANKED_TEAMS, predict, ranking_probabilities
from stream_rater.store import BoardRow, Lookup, PlayerState, ReadStore

#: Most events one history page from the archive gives.
ARCHIVE_PAGE = 1000


class Queries:
    """The read API over one store and the configured ladders."""

    def __init__(
        self,
        store: ReadStore,
        ladders: Ladders,
        max_players: int = Settings.max_query_players,
        history_limit: int = DEFAULT_HISTORY,
        archive: ArchiveReader | None = None,
    ) -> None:
        """`max_players`: most players one query may name (``STREAM_RATER_MAX_QUERY_PLAYERS``);
        `history_limit`: most rating changes a player's history gives from the store
        (``STREAM_RATER_HISTORY_LIMIT``, what the store keeps); `archive`: the PostgreSQL archive
        (``STREAM_RATER_ARCHIVE_URL``), which a history reads from, page by page, when given."""
        self.store = store
        self.ladders = ladders
        self.max_players = max_players
        self.history_limit = history_limit
        self.archive = archive

    def ladder_list(self) -> dict[str, Any]:
        """The configured ladders: name, model and parameters, typed as configured (numbers as
        numbers, booleans as booleans), and each one's shadow models."""
        return {
            "ladders": [
                {
                    "name": ladder.name,
                    "model": ladder.model,
                    "params": dict(ladder.params),
                    "shadows": [{"name": s.name, "model": s.model} for s in ladder.shadows],
                }
                for ladder in self.ladders.values()
            ]
        }

    async def board_version(self, ladder_name: str, season: bool) -> tuple[Any, ...] | None:
        """What a leaderboard answer of the ladder (of an ended season: `season`) depends on
        besides the request: the live generation, the matches applied to it (the read
        script's watermark, which every commit moves) and the re-rate lock; None when a live
        board's answer also depends on the clock (time-aware σ, an activity rule), which no
        version covers."""
        ladder = ladder_of(self.ladders, ladder_name)
        if not season and (ladder.rating_model.ages or ladder.rules.active_since(0.0) is not None):
            return None
        snapshot = await self.store.read(ladder.name, [], [], [])
        generations = await self.store.generations(ladder.name)
        return (snapshot.generation, snapshot.watermark, generations.live, generations.lock_owner)

    async def history(
        self, ladder_name: str, player_id: str, limit: Any = None, before: Any = None
    ) -> dict[str, Any]:
        """One player's stored state and rating-changed events, newest first, and how far back
        they reach: ``source`` (``archive``, or ``redis``: the newest `history_limit` only),
        ``complete`` (the answer reaches the player's first event) and ``next_before`` (the
        archive's cursor of the next older page, given back as `before`). At most `limit`
        events (default `history_limit`; capped at `history_limit` from Redis, at
        `ARCHIVE_PAGE` from the archive). Without a reachable archive, Redis answers and says
        so (``archive_error``). A player the ladder has no trace of is `UnknownPlayer`."""
        ladder = ladder_of(self.ladders, ladder_name)
        cursor = None if before is None else limit_of(before, "before", 1, 2**62)
        snapshot = await self.store.read(ladder.name, [player_id], [], [])
        state = snapshot.players.get(player_id)
        answer: dict[str, Any] = {"ladder": ladder.name, "model": ladder.model, "player_id": player_id}
        answer["state"] = None if state is None else _state_json(ladder, state)
        reach = await self._archived_history(ladder, player_id, limit, cursor)
        if reach is None:
            if cursor is not None:
                raise QueryError(
                    "before: pages only the archive's history, and no archive is configured or reachable"
                )
            limit = limit_of(limit, "limit", self.history_limit, self.history_limit)
            history = await self.store.history(ladder.name, player_id, limit)
            reach = {
                "history": history,
                "source": "redis",
                "complete": len(history) < limit,
                "next_before": None,
            }
            if self.archive is not None:
                reach["archive_error"] = "the archive did not answer"
        if state is None and not reach["history"] and cursor is None:
            raise UnknownPlayer(f"no player {player_id!r} on ladder {ladder.name!r}")
        oldest = reach["history"][-1]["finished_at"] if reach["history"] else None
        return {**answer, **reach, "oldest": oldest}

    async def _archived_history(
        self, ladder: Ladder, player_id: str, limit: Any, before: int | None
    ) -> dict[str, Any] | None:
        """The history page from the archive; None without an archive or when it fails."""
        if self.archive is None:
            return None
        limit = limit_of(limit, "limit", self.history_limit, ARCHIVE_PAGE)
        try:
            page = await self.archive.history(ladder.name, player_id, limit, before)
        except ArchiveUnavailable:
            return None
        complete = page.next_before is None
        return {
            "history": page.events,
            "source": "archive",
            "complete": complete,
            "next_before": page.next_before,
        }

    async def players(self, ladder_name: str, ids: Any, now: float) -> dict[str, Any]:
        """State, display rating, leaderboard rank (shared by tied players) and percentile, games
        and last match of each player (one store round trip: `ReadStore.lookup`)."""
        ladder = ladder_of(self.ladders, ladder_name)
        ids = player_ids(ids, "players", self.max_players)
        found = await self.store.lookup(ladder.name, ids, ladder.rules.active_since(now))
        return {
            "ladder": ladder.name,
            "model": ladder.model,
            "players": [self._player(ladder, found, p, now) for p in ids],
        }

    async def leaderboard(self, ladder_name: str, top: Any, now: float, season: Any = None) -> dict[str, Any]:
        """The `top` eligible players by display rating, best first, ranked (tied players share
        a rank); of an ended `season` (1-based), its final leaderboard as it was (activity is
        not applied to it), every field of a row the player's state as that season left it.

        Each row has the stored state (``mu``, ``sigma``) and the stored display rating the
        board is ordered by (``rating``), beside the time-aware view the other reads give:
        ``sigma_now`` (``σ² + γ²·Δt`` since the player's last match) and ``rating_now``, its
        display rating. A player whose σ grew while idle keeps their place until they play.
        An ended season's rows are frozen: ``sigma_now`` and ``rating_now`` are its own.
        """
        ladder = ladder_of(self.ladders, ladder_name)
        top = top_of(top)
        ended = await self.store.seasons(ladder.name)
        if season is not None:
            season = season_of(season, len(ended))
        board = await self.store.board_top(ladder.name, top, ladder.rules.active_since(now), season)
        rows = await self._rows(ladder, board, None if season else now, season)
        generations = await self.store.generations(ladder.name)
        return {
            "ladder": ladder.name,
            "model": ladder.model,
            "season": len(ended) + 1 if season is None else season,
            "generation": generations.live,
            "params": dict(generations.params or {}),
            "rerate": generations.lock_owner,
            "rows": rows,
        }

    async def around(self, ladder_name: str, player_id: Any, n: Any, now: float) -> dict[str, Any]:
        """The leaderboard from `n` eligible players above `player_id` to `n` below, ranked as
        `leaderboard` ranks them; `UnknownPlayer` for a player the ladder has never seen,
        `NotRanked` (saying which rule) for one it does not rank. One store round trip, O(log N
        + n) (two more for the rows' states)."""
        ladder = ladder_of(self.ladders, ladder_name)
        if not isinstance(player_id, str) or not player_id:
            raise QueryError("around: must be a non-empty player id")
        player = player_id
        n = n_of(n)
        since = ladder.rules.active_since(now)
        around = await self.store.board_around(ladder.name, player, n, since)
        if around is None:
            state = (await self.store.lookup(ladder.name, [player])).players.get(player)
            if state is None:
                raise UnknownPlayer(f"{player} has not played on ladder {ladder.name!r}")
            raise NotRanked(f"{player} is not ranked: {_unranked_reason(ladder, state, now)}")
        rows = await self._rows(ladder, around.rows, now)
        ranked = around.total
        return {
            "ladder": ladder.name,
            "model": ladder.model,
            "player_id": player,
            "rank": around.rank,
            "ranked": ranked,
            "rows": rows,
        }

    async def _rows(
        self, ladder: Ladder, board: Sequence[BoardRow], now: float | None, season: int | None = None
    ) -> list[dict[str, Any]]:
        """Leaderboard rows of `board`: time-aware as of `now`, or frozen as the ended `season`
        left them (`now` None)."""
        states = await self._board_states(ladder, [row.player_id for row in board], season)
        return [
            self._row(ladder, rank, player_id, score, states[player_id], now)
            for player_id, score, rank in board
            if player_id in states
        ]

    async def _board_states(
        self, ladder: Ladder, ids: list[str], season: int | None
    ) -> dict[str, PlayerState]:
        """The states of a board's players: live, or as the ended `season` left them (a season
        archived before the store kept its states: the live ones)."""
        if season is None:
            return (await self.store.read(ladder.name, ids, [], [])).players
        states = await self.store.season_states(ladder.name, season, ids)
        missing = [p for p in ids if p not in states]
        if missing:
            states.update((await self.store.read(ladder.name, missing, [], [])).players)
        return states

    def _row(
        self, ladder: Ladder, rank: int, player_id: str, score: float, state: PlayerState, now: float | None
    ) -> dict[str, Any]:
        """A leaderboard row; time-aware as of `now`, or frozen (``now`` None: an ended season)."""
        current = self._rating(ladder, state, now) if now is not None else Rating(state.mu, state.sigma)
        return {
            "rank": rank,
            "player_id": player_id,
            "rating": score,
            "mu": state.mu,
            "sigma": state.sigma,
            "sigma_now": current.sigma,
            "rating_now": ladder.rating_model.display(current),
            "games": state.games,
            "last_played": state.last_played,
            **self._flags(ladder, state),
            "peak": state.peak,
            "peak_at": state.peak_at,
        }

    async def predict(
        self, ladder_name: str, teams: Any, now: float, rankings: Any = False, parties: Any = None
    ) -> dict[str, Any]:
        """Each team's probability of finishing first, the draw probability (two teams) and
        the match quality, by the ladder's model (`rating.predict`); with `rankings`, the
        probability of each full ranking too (up to four teams). `parties` (groups of the
        players who queued together) add each team's ``party:<size>`` effects on a ladder
        with the ``party_effects`` rule, as rating the match would."""
        ladder = ladder_of(self.ladders, ladder_name)
        teams = teams_of(teams, self.max_players)
        names = party_effect_names(
            ladder, teams, parties_of(parties, [p for team in teams for p in team], self.max_players)
        )
        found = await self.store.read(ladder.name, [p for team in teams for p in team], [], [])
        effects = await self._effects(ladder, [e for team in names for e in team])
        ratings = [
            [self._rating(ladder, found.players.get(p), now) for p in team]
            + [effects[e] for e in team_effects]
            for team, team_effects in zip(teams, names)
        ]
        answer = predict(ladder.rating_model, ratings)
        extra: dict[str, Any] = {}
        if rankings is not False:
            if rankings is not True:
                raise QueryError("rankings: must be true or false")
            if len(teams) > MAX_RANKED_TEAMS:
                raise QueryError(f"rankings: given for at most {MAX_RANKED_TEAMS} teams")
            ranked = ranking_probabilities(ladder.rating_model, ratings)
            extra["rankings"] = [
                {"order": list(order), "probability": p}
                for order, p in sorted(ranked.items(), key=lambda item: -item[1])
            ]
        flags = {p: self._flags(ladder, found.players.get(p)) for team in teams for p in team}
        return extra | {
            "ladder": ladder.name,
            "teams": [
                {
                    "players": team,
                    "win_probability": p,
                    "new": [x for x in team if x not in found.players],
                    **{name: [x for x in team if flags[x][name]] for name in READ_FLAGS},
                    "effects": team_effects,
                }
                for team, p, team_effects in zip(teams, answer.win_probabilities, names)
            ],
            "draw_probability": answer.draw_probability,
            "quality": answer.quality,
        }

    async def balance(
        self, ladder_name: str, pool: Any, team_sizes: Any, now: float, parties: Any = None
    ) -> dict[str, Any]:
        """The split of `pool` into teams of `team_sizes` with the highest match quality;
        each of `parties` (groups of the pool who queued together) stays on one team and, on
        a ladder with the ``party_effects`` rule, brings its ``party:<size>`` effect. How it
        searched is in ``search`` (`rating.balance.balance`); a search too slow for the
        ladder's model is `TooManyPlayers` (413), saying so."""
        ladder = ladder_of(self.ladders, ladder_name)
        ids = player_ids(pool, "players", self.max_players)
        groups = parties_of(parties, ids, self.max_players)
        if (
            not isinstance(team_sizes, list)
            or len(team_sizes) < 2
            or not all(type(s) is int and s >= 1 for s in team_sizes)
        ):
            raise QueryError("team_sizes: must be an array of at least two positive integers")
        if sum(team_sizes) != len(ids):
            raise QueryError(f"team_sizes: add up to {sum(team_sizes)}, but {len(ids)} players were given")
        found = await self.store.read(ladder.name, ids, [], [])
        sizes = range(2, max(team_sizes) + 1) if ladder.rules.party_effects and groups else ()
        effects = await self._effects(ladder, [f"party:{n}" for n in sizes])
        index = {p: i for i, p in enumerate(ids)}
        # only here: numpy (about 0.45 CPU-s) loads on the first search, not at every worker's
        # start; `serve` loads it at its own
        from stream_rater.rating import balance as fairest

        try:
            best = fairest.balance(
                ladder.rating_model,
                [self._rating(ladder, found.players.get(p), now) for p in ids],
                team_sizes,
                parties=[[index[p] for p in party] for party in groups],
                party_effect=(lambda n: effects[f"party:{n}"]) if effects else None,
            )
        except fairest.SlowBalance as exc:
            raise TooManyPlayers(str(exc)) from None
        except ValueError as exc:
            raise QueryError(str(exc)) from None
        return {
            "ladder": ladder.name,
            "teams": [[ids[i] for i in team] for team in best.teams],
            "quality": best.quality,
            "seconds": best.seconds,
            "exhaustive": best.exhaustive,
            "search": best.search,
        }

    async def _effects(self, ladder: Ladder, names: Sequence[str]) -> dict[str, Rating]:
        """The stored ratings of the context effects `names` (the prior for one never learned)."""
        if not names:
            return {}
        stored = (await self.store.read(ladder.name, [], names, [])).effects
        model = ladder.rating_model
        return {
            n: model.initial_effect() if (s := stored.get(n)) is None else Rating(s.mu, s.sigma, s.extra)
            for n in names
        }

    @staticmethod
    def _flags(ladder: Ladder, state: PlayerState | None) -> dict[str, bool]:
        """The ladder's rules' flags on a stored state (a player never seen: the prior)."""
        if not ladder.rules.plugins:  # no rule flags anyone: every flag false, without asking
            return dict.fromkeys(READ_FLAGS, False)
        if state is None:
            return ladder.rules.read_flags(0, ladder.rating_model.initial().sigma)
        return ladder.rules.read_flags(state.games, state.sigma)

    @staticmethod
    def _rating(ladder: Ladder, state: PlayerState | None, now: float) -> Rating:
        model = ladder.rating_model
        if state is None:
            return model.initial()
        rating = Rating(state.mu, state.sigma)
        if state.last_played is None:
            return rating
        if ladder.rules.plugins and ladder.rules.adjusts_states:
            standing = Standing(state.games, state.sigma, state.last_played)
            rating = ladder.rules.adjusted(model, rating, standing, now)
        return model.as_of(rating, now - state.last_played)

    def _player(self, ladder: Ladder, found: Lookup, player_id: str, now: float) -> dict[str, Any]:
        state = found.players.get(player_id)
        rating = self._rating(ladder, state, now)
        place = found.places.get(player_id)
        return {
            "player_id": player_id,
            "new": state is None,
            "mu": rating.mu,
            "sigma": rating.sigma,
            "rating": ladder.rating_model.display(rating),
            "games": 0 if state is None else state.games,
            "last_played": None if state is None else state.last_played,
            **self._flags(ladder, state),
            "peak": None if state is None else state.peak,
            "peak_at": None if state is None else state.peak_at,
            "rank": None if place is None else place + 1,
            "percentile": None if place is None else _percentile(place, found.ranked),
        }


def _state_json(ladder: Ladder, state: PlayerState) -> dict[str, Any]:
    """A stored state as the history answer gives it: display rating, μ, σ, games, last match."""
    return {
        "rating": ladder.rating_model.display(Rating(state.mu, state.sigma)),
        "mu": state.mu,
        "sigma": state.sigma,
        "games": state.games,
        "last_played": state.last_played,
    }


def _unranked_reason(ladder: Ladder, state: PlayerState, now: float) -> str:
    """Why the ladder's rules leave a known player off its leaderboard (README "Ladder rules")."""
    rules = ladder.rules
    reason = rules.unranked(state.games, state.sigma)
    if reason is not None:
        return reason
    days = rules.leaderboard_active_days
    if days is not None:
        idle = (
            "never played"
            if state.last_played is None
            else f"inactive for {(now - state.last_played) / DAY:.0f} days"
        )
        return f"{idle} (the ladder ranks players active within {days:g} days)"
    return "not on the leaderboard"


def _percentile(place: int, ranked: int) -> float:
    """Share of the leaderboard at or below this place, in percent (the best player: 100)."""
    return 100.0 * (ranked - place) / ranked if ranked else math.nan
