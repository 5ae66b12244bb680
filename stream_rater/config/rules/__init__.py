"""Ladder rules: what a live ladder adds on top of its model's update — players not ranked
yet, leaderboard eligibility, rated-game rules, season soft resets and inactivity decay. Pure
functions of a state, a match or a read's clock; the processor, replay, re-rates and the read
API all ask these (through `Rules`), so that every path applies the same rules.

A rule written as a plug-in is one module of this package: a `Rule` subclass, listed in
`PLUGINS`, that says which parameters it takes and validates, whether a player is eligible for
the leaderboard (and why not), the flag it adds to a player's events and reads, and what it does
to a player's state before a rated match. `Rules` loops over the ladder's plug-ins; the planner,
the leaderboard writes and the reads ask `Rules` only (docs: concepts/rules.md, and the how-to
"Add a ladder rule").

Every rule is off by default (its parameter unset), so a ladder without them computes
exactly what it computed before the rules existed. The parameters sit in the ladder's table
beside the model's own (README "Ladder rules"):

- the plug-ins of `PLUGINS`, each described in its module: `newcomers` (a player not ranked
  yet while they have played few games or σ is high) and `decay` (inactivity decay).
- ``leaderboard_min_games``, ``leaderboard_active_days`` D — a player is ranked once they
  have that many games and every plug-in finds them eligible, and while their last match lies within D days
  of the read's clock. The leaderboard holds only such players: the first two are decided
  when a state is written, and each commit takes players idle for D days off it (the few who
  went idle since are skipped by the reads).
- ``min_duration`` (seconds), ``min_players`` (rated players in the match) — a match below
  either is valid but unrated, like one sent with ``"rated": false``.
- ``season_shrink`` k, ``season_sigma`` s — at a season start every player's rating is pulled
  toward the prior, ``μ ← μ0 + k·(μ − μ0)`` (k = 1 keeps it), and σ grows toward σ0,
  ``σ ← min(σ0, √(σ² + s²))`` (models with σ; s = 0 keeps it).
- ``party_effects`` (true/false) — each team with a premade party (two or more of its players
  sharing a ``party`` id) gets the context effect ``party:<size>``, learned like ``home``: one
  effect per distinct party size in the team (two pairs in one team add ``party:2`` once).
  Parties are counted within a team; unrated players count too (they queued together).
- ``rating_floor`` F — no player's display rating goes below F: after a match (and a season
  reset) a state whose display rating is below F has its μ raised until it equals F
  (`RatingModel.floored`). The raised points are created, not taken from anyone.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from stream_rater.config.rules.base import DAY, Rule, RuleError, Standing, real
from stream_rater.config.rules.decay import Decay
from stream_rater.config.rules.newcomers import Newcomers
from stream_rater.contracts.match import MatchFinished, Player, Team
from stream_rater.rating.base import Rating, RatingModel

__all__ = [
    "DAY",
    "PLUGINS",
    "READ_FLAGS",
    "RULE_PARAMS",
    "SEASON_PARAMS",
    "Rule",
    "RuleError",
    "Rules",
    "Standing",
]

#: The plug-in rules (one module each), in the order `Rules` asks them.
PLUGINS: tuple[type[Rule], ...] = (Newcomers, Decay)


@dataclass(frozen=True, slots=True)
class Rules:
    """A ladder's rules; None (or the neutral value) = the rule is off. `plugins` are the
    ladder's rules of `PLUGINS` (`Rules.of` builds them from the parameters)."""

    leaderboard_min_games: int | None = None
    leaderboard_active_days: float | None = None
    min_duration: float | None = None
    min_players: int | None = None
    season_shrink: float = 1.0
    season_sigma: float = 0.0
    party_effects: bool = False
    rating_floor: float | None = None
    plugins: tuple[Rule, ...] = ()

    def __post_init__(self) -> None:
        if type(self.party_effects) is not bool:
            raise RuleError(f"party_effects={self.party_effects}: must be true or false")
        if self.rating_floor is not None and not real(self.rating_floor):
            raise RuleError(f"rating_floor={self.rating_floor}: must be a finite number")
        for name in ("leaderboard_min_games", "min_players"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 0):
                raise RuleError(f"{name}={value}: must be an integer >= 0")
        for name in ("leaderboard_active_days", "min_duration", "season_sigma"):
            value = getattr(self, name)
            if value is not None and not (real(value) and value >= 0):
                raise RuleError(f"{name}={value}: must be a number >= 0")
        if not (real(self.season_shrink) and 0.0 <= self.season_shrink <= 1.0):
            raise RuleError(f"season_shrink={self.season_shrink}: must be a number from 0 to 1")

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Rules:
        """The rules among a ladder's parameters (the others are the model's)."""
        plugins = tuple(rule for kind in PLUGINS if (rule := kind.of(params)) is not None)
        return cls(**{k: v for k, v in params.items() if k in _OWN_PARAMS}, plugins=plugins)

    @property
    def flags(self) -> str | None:
        """The flag field a plug-in adds to rating-changed events and reads, or None."""
        return next((rule.FLAG for rule in self.plugins if rule.FLAG), None)

    @property
    def filters_leaderboard(self) -> bool:
        """True when the leaderboard leaves out players who do not qualify yet."""
        return bool(self._blockers) or self.leaderboard_min_games is not None

    @property
    def _blockers(self) -> list[Rule]:
        """The plug-ins that keep some players off the leaderboard (`Rule.blocks`)."""
        return [rule for rule in self.plugins if type(rule).blocks is not Rule.blocks]

    @property
    def adjusts_states(self) -> bool:
        """True when a plug-in changes players' states before a rated match (`adjusted`)."""
        return any(rule.ADJUSTS for rule in self.plugins)

    def flagged(self, games: int, sigma: float | None) -> bool:
        """The `flags` field of a player with `games` rated games and σ `sigma`."""
        return any(rule.flag(games, sigma) for rule in self.plugins if rule.FLAG)

    def flagger(self) -> Callable[[int, float | None], bool] | None:
        """`flagged` as the planner asks it for every event (the one flagging plug-in's own
        method when there is one), or None when no plug-in flags players."""
        flagging = [rule for rule in self.plugins if rule.FLAG]
        if not flagging:
            return None
        return flagging[0].flag if len(flagging) == 1 else self.flagged

    def read_flags(self, games: int, sigma: float | None) -> dict[str, bool]:
        """Each field of `READ_FLAGS` for a player with `games` rated games and σ `sigma`
        (false where the ladder does not use its rule): what a read row carries."""
        found = {rule.FLAG: rule.flag(games, sigma) for rule in self.plugins if rule.FLAG}
        return {name: found.get(name, False) for name in READ_FLAGS}

    def unranked(self, games: int, sigma: float | None) -> str | None:
        """Why such a player may not be ranked (activity aside), or None."""
        standing = Standing(games, sigma)
        for rule in self.plugins:
            reason = rule.unranked(standing)
            if reason is not None:
                return reason
        if self.leaderboard_min_games is not None and games < self.leaderboard_min_games:
            return (
                f"{games} games played (the ladder ranks players with at least {self.leaderboard_min_games})"
            )
        return None

    def qualifies(self, games: int, sigma: float | None) -> bool:
        """Whether such a player may be ranked (activity aside: see `active_since`)."""
        if self.leaderboard_min_games is not None and games < self.leaderboard_min_games:
            return False
        return not any(rule.blocks(games, sigma) for rule in self.plugins)

    def qualifier(self) -> Callable[[int, float | None], bool]:
        """`qualifies` as the planner asks it for every player a match writes: with one
        blocking plug-in, its own test beside the games rule."""
        blockers, least = self._blockers, self.leaderboard_min_games
        if len(blockers) != 1:
            return self.qualifies
        blocks = blockers[0].blocks
        if least is None:
            return lambda games, sigma: not blocks(games, sigma)
        return lambda games, sigma: games >= least and not blocks(games, sigma)

    def adjusted(self, model: RatingModel, rating: Rating, standing: Standing, at: float) -> Rating:
        """`rating` of a player in `standing` as a rated match at `at` (or a read then: the
        ``rating_now`` preview) starts from, after each plug-in's `Rule.adjusted`: only a
        ranked player's (`qualifies`) changes."""
        if not self.qualifies(standing.games, standing.sigma):
            return rating
        bound = model.display(model.initial())
        if self.rating_floor is not None:
            bound = max(bound, self.rating_floor)
        for rule in self.plugins:
            if rule.ADJUSTS:
                rating = rule.adjusted(model, rating, standing, at, bound)
        return rating

    def active_since(self, now: float) -> float | None:
        """The oldest last match that still counts as active at `now`, or None (no rule)."""
        if self.leaderboard_active_days is None:
            return None
        return now - self.leaderboard_active_days * DAY

    def active_within(self) -> float | None:
        """Seconds a player stays active after their last match, or None (no rule): the
        commits trim the players idle longer off the leaderboard."""
        return None if self.leaderboard_active_days is None else self.leaderboard_active_days * DAY

    def unrated_reason(self, match: MatchFinished) -> str | None:
        """Why `match` changes no rating — ``declared`` (``"rated": false``), ``min_duration``
        or ``min_players`` — or None when it is rated. A match without a duration passes the
        duration rule."""
        if not match.rated:
            return "declared"
        if (
            self.min_duration is not None
            and match.duration is not None
            and match.duration < self.min_duration
        ):
            return "min_duration"
        if self.min_players is not None:
            rated = sum(p.rated for team in match.teams for p in team.players)
            if rated < self.min_players:
                return "min_players"
        return None

    def with_parties(self, match: MatchFinished) -> MatchFinished:
        """`match` as the model sees it: with ``party_effects`` on, each team's ``party:<size>``
        effects (`party_effects`) appended to its own; otherwise `match` itself."""
        if not self.party_effects or match.season is not None:
            return match
        teams = []
        changed = False
        for team in match.teams:
            added = [e for e in party_effects(team.players) if e not in team.effects]
            if added:
                changed = True
                team = Team(team.players, team.rank, team.score, (*team.effects, *added))
            teams.append(team)
        return replace(match, teams=tuple(teams)) if changed else match

    def season_reset(self, model: RatingModel, rating: Rating, overrides: Mapping[str, Any]) -> Rating:
        """`rating` pulled toward the model's prior at a season start (module docstring), with
        the season record's `overrides` of ``season_shrink`` / ``season_sigma``, and raised to
        the ``rating_floor`` if it fell below."""
        rules = Rules.of({**_season_params(self), **overrides})
        prior = model.initial()
        mu = prior.mu + rules.season_shrink * (rating.mu - prior.mu)
        sigma = rating.sigma
        if sigma is not None and prior.sigma is not None and rules.season_sigma:
            sigma = min(prior.sigma, math.sqrt(sigma * sigma + rules.season_sigma**2))
        reset = Rating(mu, sigma, rating.extra)
        return reset if self.rating_floor is None else model.floored(reset, self.rating_floor)


#: The flag fields every read row carries, one per plug-in with a `Rule.FLAG`.
READ_FLAGS: tuple[str, ...] = tuple(kind.FLAG for kind in PLUGINS if kind.FLAG)

#: The parameters `Rules` keeps itself (the rules not yet plug-ins), with their defaults.
_OWN_PARAMS: dict[str, Any] = {f.name: f.default for f in fields(Rules) if f.name != "plugins"}

#: The parameter names of the rules, with their defaults.
RULE_PARAMS: dict[str, Any] = {**_OWN_PARAMS, **{k: v for kind in PLUGINS for k, v in kind.PARAMS.items()}}

#: The rule parameters a season record may override.
SEASON_PARAMS = ("season_shrink", "season_sigma")


def refuse_rule_overrides(params: Mapping[str, Any], where: str = "params.") -> None:
    """A re-rate's parameter overrides may not set rules: the read API takes a ladder's rules
    from its configuration, so a rule changed for the writes alone would make reads and
    writes disagree. `ValueError` naming the first rule (after `where`)."""
    named = sorted(set(params) & set(RULE_PARAMS))
    if named:
        raise ValueError(
            f"{where}{named[0]}: a ladder rule is set in the ladders configuration (file or "
            "STREAM_RATER_LADDER_<NAME>__<PARAM>), where reads find it too; change it there and "
            "re-rate without it"
        )


def party_effects(players: Iterable[Player]) -> list[str]:
    """The ``party:<size>`` effects of one team's `players`: one per distinct size (>= 2) of
    the parties among them, smallest first."""
    sizes = Counter(p.party for p in players if p.party is not None)
    return [f"party:{n}" for n in sorted({n for n in sizes.values() if n >= 2})]


def _season_params(rules: Rules) -> dict[str, Any]:
    return {name: getattr(rules, name) for name in SEASON_PARAMS}
