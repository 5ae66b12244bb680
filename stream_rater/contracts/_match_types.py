"""The match-finished event (topic ``matches``) as frozen dataclasses, and their canonical
wire form (`MatchFinished.to_dict`); validation is in `_match_parse` and `_match_fast`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stream_rater.contracts.timestamps import format_timestamp

#: The ladder of an event that names none.
DEFAULT_LADDER = "default"


@dataclass(frozen=True, slots=True)
class Player:
    """One player of a team; `score` and `seconds_played` feed SPH Elo, `weight` TrueSkill;
    `party` an opaque id shared by players who queued together (a premade party), which a
    ladder with the ``party_effects`` rule learns as a context effect (`config.rules`)."""

    id: str
    weight: float = 1.0
    score: float | None = None
    seconds_played: float | None = None
    rated: bool = True
    party: str | None = None


@dataclass(frozen=True, slots=True)
class Team:
    """One team: its players, its `rank` (lower is better) or `score`, and context effects."""

    players: tuple[Player, ...]
    rank: float | None = None
    score: float | None = None
    effects: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SeasonStart:
    """A season-start control record: from its place in the ladder's order on, a new season
    of the ladder runs, and every player's state is pulled toward the prior once
    (`config.rules`); `params` overrides the ladder's ``season_shrink`` / ``season_sigma``."""

    params: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class MatchFinished:
    """A validated match-finished event; `finished_at` in epoch seconds (UTC).

    `rated` False (``"rated": false`` on the wire) declares the match unrated: it is recorded
    once and changes nothing. `duration` (seconds) is optional and feeds the ladder's
    ``min_duration`` rule. A record of the matches topic that starts a season is read as a
    `MatchFinished` without teams whose `season` is set: it takes its place in the ladder's
    order like a match, and ``match_id`` is its idempotency key. `mode` is the ladder's mode
    the match was played in (`contracts.modes`)."""

    match_id: str
    ladder: str
    finished_at: float
    teams: tuple[Team, ...]
    rated: bool = True
    duration: float | None = None
    season: SeasonStart | None = None
    #: The ladder's mode the match was played in (None on a ladder without modes;
    #: `contracts.modes`): on a ladder with modes, always set (its default mode if the event
    #: named none).
    mode: str | None = None

    def ranks(self) -> list[float]:
        """One rank per team, lower is better, equal ranks are a draw.

        The teams' ranks if they give them; otherwise competition ranks from the team
        scores (higher is better; a team's score defaults to the sum of its players').
        """
        ranks: list[float | None] = []
        for team in self.teams:  # a loop, not a list comprehension (a frame of its own in 3.11)
            ranks.append(team.rank)
        if None not in ranks:
            return ranks  # type: ignore[return-value]  # (no None in it)
        scores = [_team_score(t) for t in self.teams]
        descending = sorted(scores, reverse=True)
        return [float(descending.index(s) + 1) for s in scores]

    def placings(self, ranks: Sequence[float] | None = None) -> list[list[Any]]:
        """``[player id, team rank]`` of the rated players, in the match's order: what a
        rated match's marker (`Commit.placings`) and the archive keep; `ranks` when the
        caller has computed `ranks` already."""
        placings: list[list[Any]] = []
        for team, rank in zip(self.teams, self.ranks() if ranks is None else ranks):
            for p in team.players:  # loops, not a list comprehension (a frame of its own in 3.11)
                if p.rated:
                    placings.append([p.id, rank])
        return placings

    def to_dict(self) -> dict[str, Any]:
        """The canonical wire form: defaults left out, integral numbers as ints,
        `finished_at` as an RFC 3339 ``Z`` string; `parse_match` turns it back into `self`."""
        if self.season is not None:
            wire: dict[str, Any] = {
                "kind": "season",
                "match_id": self.match_id,
                "ladder": self.ladder,
                "finished_at": format_timestamp(self.finished_at),
            }
            if self.season.params:
                wire["params"] = {k: _number(v) for k, v in self.season.params}
            return wire
        wire = {
            "match_id": self.match_id,
            "ladder": self.ladder,
            "finished_at": format_timestamp(self.finished_at),
            "teams": [_team_dict(t) for t in self.teams],
        }
        if not self.rated:
            wire["rated"] = False
        if self.duration is not None:
            wire["duration"] = _number(self.duration)
        if self.mode is not None:
            wire["mode"] = self.mode
        return wire


def _team_score(team: Team) -> float:
    """The team's own score, else the sum of its players' (validation ensures they have one)."""
    if team.score is not None:
        return team.score
    return sum(p.score for p in team.players if p.score is not None)


def _number(x: float) -> float | int:
    """Integral floats as ints in the wire form: ``"rank": 1``, not ``1.0``."""
    return int(x) if x.is_integer() and abs(x) < 2.0**53 else x


def _team_dict(team: Team) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if team.rank is not None:
        d["rank"] = _number(team.rank)
    if team.score is not None:
        d["score"] = _number(team.score)
    if team.effects:
        d["effects"] = list(team.effects)
    d["players"] = [_player_dict(p) for p in team.players]
    return d


def _player_dict(player: Player) -> dict[str, Any]:
    d: dict[str, Any] = {"id": player.id}
    if player.weight != 1.0:
        d["weight"] = _number(player.weight)
    if player.score is not None:
        d["score"] = _number(player.score)
    if player.seconds_played is not None:
        d["seconds_played"] = _number(player.seconds_played)
    if not player.rated:
        d["rated"] = False
    if player.party is not None:
        d["party"] = player.party
    return d
