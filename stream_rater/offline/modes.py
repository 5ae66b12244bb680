"""A ladder with modes, replayed offline (issue 48). Pure: it replays a list of
``(mode, match)`` through the rating models and scores every match before it is rated, per
mode and over all, as `offline.evaluate` does for a ladder without modes. Three forms of
sharing (`FORMS`):

``prior`` (`ModedReplay`, the rule a worker follows today):

- A player's state in mode ``m`` is keyed by (player, ``m``). A context effect (``home``) is
  one for the ladder, shared by its modes, as in the worker (`processor.modes` renames players
  only); new ones start from the model's `initial_effect`.
- A player with no state in ``m`` starts from ``first_in_mode(model_m, others, coupling)``,
  ``others`` being their states in the other modes **in sorted mode order**, each as read at
  the match's time (`RatingModel.as_of` with its idle time, as the read API sees it). The new
  state has no last-played time: the first match in a mode has no idle time in it.
- After a match, each member's state is the model's posterior, its games count + 1 and its
  last-played time the match's (never earlier than before).

``cross`` (`CrossReplay`): ``prior`` plus a cross-update of each player's other modes after
every match (`rating.modes.cross_update`), per-(player, mode) states as the worker keeps them.

``shared`` (`SharedReplay`): a shared skill plus per-mode offsets (`rating.modes.Joint`),
updated by every mode; effects as above.

Ladder rules (floors, minimum durations, seasons, voids) are not replayed here: the studies it
serves have none. ``experience`` (off unless given) is TrueSkill 2's experience effect, tried
here only: after each of a player's early matches their μ moves up by
``experience · exp(−games / EXPERIENCE_GAMES)`` (``bench modes --experience`` measures it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stream_rater.config.ladders import Ladder
from stream_rater.contracts import MatchFinished
from stream_rater.offline.evaluate import Scorer, Summary
from stream_rater.rating.base import Outcome, Rating, RatingModel
from stream_rater.rating.modes import (
    Joint,
    aged,
    cross_update,
    first_in_mode,
    in_mode,
    joint_prior,
    updated,
    with_mode,
)
from stream_rater.rating.scoring import predicts_draws

#: The experience effect's scale in games (module docs).
EXPERIENCE_GAMES = 10.0
#: One labelled match: its mode and the match.
Moded = tuple[str, MatchFinished]


@dataclass(slots=True)
class _State:
    rating: Rating
    last_played: float | None = None
    games: int = 0


@dataclass(frozen=True, slots=True)
class ModesScore:
    """The metrics of one replay, per part: over every mode (`whole`) and per mode (`modes`);
    with ``keep_raw``, per part and mode the raw pairs a calibration is fitted on."""

    whole: list[Summary]
    modes: list[dict[str, Summary]]
    raw: list[dict[str, list[tuple[float, float, int]]]] = field(default_factory=list)


class ModedReplay:
    """The states of one ladder with modes; `models` has one `RatingModel` per mode (a mode's
    parameter overrides applied), `coupling` is the ladder's ρ in [0, 1]."""

    def __init__(self, models: Mapping[str, RatingModel], coupling: float, experience: float = 0.0) -> None:
        if not 0.0 <= coupling <= 1.0:
            raise ValueError(f"coupling must be in [0, 1], got {coupling}")
        self.models, self.coupling, self.experience = dict(models), coupling, experience
        self.draws = {mode: predicts_draws(model) for mode, model in self.models.items()}
        #: Player id → mode → state.
        self.players: dict[str, dict[str, _State]] = {}
        #: Effect name → state (one for all modes).
        self.effects: dict[str, _State] = {}

    def prior(self, player: str, mode: str, at: float) -> _State:
        """The player's state in `mode` before a match at `at` (module docs: a first match in
        the mode starts from their other modes)."""
        known = self.players.setdefault(player, {})
        state = known.get(mode)
        if state is None:
            others = [
                _read(self.models[m], known[m], at) for m in sorted(known) if m != mode and m in self.models
            ]
            state = _State(first_in_mode(self.models[mode], self._pool(others), self.coupling))
        return state

    def _pool(self, others: list[Rating]) -> list[Rating]:
        """The other modes' states a first match in a mode starts from: all of them."""
        return others

    def apply(self, mode: str, match: MatchFinished) -> tuple[list[list[Rating]], Outcome]:
        """Rate `match` in `mode`; the prior teams (players, then effects) and the outcome the
        model was given — what `Scorer.observe_with` scores."""
        model, at = self.models[mode], match.finished_at
        members: list[list[tuple[str, str, _State]]] = []
        for team in match.teams:
            row = [("player", p.id, self.prior(p.id, mode, at)) for p in team.players]
            row += [
                ("effect", e, self.effects.get(e) or _State(model.initial_effect())) for e in team.effects
            ]
            members.append(row)
        teams = [[state.rating for _, _, state in row] for row in members]
        elapsed = [
            [None if s.last_played is None else max(0.0, at - s.last_played) for _, _, s in row]
            for row in members
        ]
        outcome = _outcome(model, match, elapsed)
        posterior = model.rate_match(teams, outcome)
        for row, after in zip(members, posterior):
            for (kind, name, before), rating in zip(row, after):
                self._store(kind, name, mode, before, rating, at)
        return teams, outcome

    def _store(self, kind: str, name: str, mode: str, before: _State, rating: Rating, at: float) -> None:
        last = at if before.last_played is None else max(before.last_played, at)
        if kind == "effect":
            self.effects[name] = _State(rating, last, before.games + 1)
            return
        if self.experience:
            bump = self.experience * math.exp(-before.games / EXPERIENCE_GAMES)
            rating = Rating(rating.mu + bump, rating.sigma, rating[2] if len(rating) > 2 else None)
        self.players[name][mode] = _State(rating, last, before.games + 1)


class CrossReplay(ModedReplay):
    """`ModedReplay` plus the cross-update: after a player's match in mode M, each of their
    states in the other modes is read at the match's time (aged by its idle time) and moved by
    `rating.modes.cross_update` (M's state as the model rated it, aged likewise, and after);
    its last-played time becomes the match's (it has been aged to it), its games stay. A
    first match in a mode starts from the most certain of the others as read (every mode has
    been told of the others' matches: pooling them would count those many times). ρ = 1 is one
    ladder ignoring the modes, exactly; ρ = 0 one ladder per mode."""

    def _pool(self, others: list[Rating]) -> list[Rating]:
        return [min(others, key=lambda r: r.sigma or 0.0)] if others else others

    def _store(self, kind: str, name: str, mode: str, before: _State, rating: Rating, at: float) -> None:
        super()._store(kind, name, mode, before, rating, at)
        if kind != "player" or not self.coupling:
            return
        seen = _read(self.models[mode], before, at)
        known = self.players[name]
        for other, state in known.items():
            if other != mode and other in self.models:
                moved = cross_update(_read(self.models[other], state, at), seen, rating, self.coupling)
                known[other] = _State(moved, _later(state.last_played, at), state.games)


class SharedReplay:
    """The richer form (TrueSkill 2's): a player's skill in mode ``m`` is a shared skill plus
    a per-mode offset, jointly Gaussian (`rating.modes.Joint`); ρ = 1 is one ladder ignoring
    the modes, ρ = 0 one ladder per mode. Every match updates the shared skill and the mode's
    offset (`rating.modes.updated`); time dynamics age each by its share (`rating.modes.aged`).
    With ``experience`` the bump goes to the shared skill, by the player's games in all modes."""

    def __init__(self, models: Mapping[str, RatingModel], coupling: float, experience: float = 0.0) -> None:
        if not 0.0 <= coupling <= 1.0:
            raise ValueError(f"coupling must be in [0, 1], got {coupling}")
        self.models, self.coupling, self.experience = dict(models), coupling, experience
        self.draws = {mode: predicts_draws(model) for mode, model in self.models.items()}
        self.new = {mode: joint_prior(model, coupling) for mode, model in self.models.items()}
        #: Player id → (their skills, games in all modes); effect name → state.
        self.players: dict[str, tuple[Joint, int]] = {}
        self.effects: dict[str, _State] = {}

    def _prior(self, mode: str, player: str, at: float) -> Joint:
        joint = self.players.get(player, (self.new[mode], 0))[0]
        model = self.models[mode]
        return aged(with_mode(joint, mode, model, self.coupling), mode, model, self.coupling, at)

    def apply(self, mode: str, match: MatchFinished) -> tuple[list[list[Rating]], Outcome]:
        """Rate `match` in `mode` (`ModedReplay.apply`)."""
        model, at = self.models[mode], match.finished_at
        joints = [[self._prior(mode, p.id, at) for p in team.players] for team in match.teams]
        effects = [
            [self.effects.get(e) or _State(model.initial_effect()) for e in t.effects] for t in match.teams
        ]
        teams = [[in_mode(j, mode) for j in row] + [e.rating for e in fx] for row, fx in zip(joints, effects)]
        none: list[float | None] = [None]
        elapsed = [
            none * len(row) + [None if e.last_played is None else max(0.0, at - e.last_played) for e in fx]
            for row, fx in zip(joints, effects)
        ]
        outcome = _outcome(model, match, elapsed)
        posterior = model.rate_match(teams, outcome)
        for team, row, fx, prior, after in zip(match.teams, joints, effects, teams, posterior):
            for player, joint, before, new in zip(team.players, row, prior, after):
                self._keep(player.id, updated(joint, mode, before, new, at))
            for name, e, new in zip(team.effects, fx, after[len(row) :]):
                self.effects[name] = _State(new, _later(e.last_played, at), e.games + 1)
        return teams, outcome

    def _keep(self, player: str, joint: Joint) -> None:
        games = self.players[player][1] if player in self.players else 0
        if self.experience:
            bump = self.experience * math.exp(-games / EXPERIENCE_GAMES)
            joint = Joint(joint.modes, (joint.mean[0] + bump, *joint.mean[1:]), joint.cov, joint.last)
        self.players[player] = (joint, games + 1)


def _later(last: float | None, at: float) -> float:
    return at if last is None else max(last, at)


def mode_models(ladder: Ladder, overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, RatingModel]:
    """Per mode of `overrides`: `ladder`'s model with the mode's parameters over the ladder's
    (a ``calibration`` of None: none)."""
    return {
        mode: Ladder(ladder.name, ladder.model, {**ladder.params, **params}).rating_model
        for mode, params in overrides.items()
    }


def _read(model: RatingModel, state: _State, at: float) -> Rating:
    """A state as the read API sees it at `at`: aged by its idle time."""
    if state.last_played is None:
        return state.rating
    return model.as_of(state.rating, max(0.0, at - state.last_played))


def _outcome(model: RatingModel, match: MatchFinished, elapsed: list[list[float | None]]) -> Outcome:
    """The model's `Outcome` of `match`, as the processor builds it: weights and rated flags
    (effects: 1 and True) unless every player is plain, scores where the model needs them."""
    plain = all(not t.effects and all(p.weight == 1.0 and p.rated for p in t.players) for t in match.teams)
    weights = rated = scores = seconds = None
    if not plain:
        weights = [[p.weight for p in t.players] + [1.0] * len(t.effects) for t in match.teams]
        rated = [[p.rated for p in t.players] + [True] * len(t.effects) for t in match.teams]
    if model.needs_scores:
        scores = [[p.score or 0.0 for p in t.players] for t in match.teams]
        seconds = [[p.seconds_played or 0.0 for p in t.players] for t in match.teams]
    return Outcome(match.ranks(), weights, scores, seconds, elapsed, rated)


def score_modes(
    parts: Sequence[Iterable[Moded]],
    models: Mapping[str, RatingModel],
    coupling: float,
    *,
    experience: float = 0.0,
    keep_raw: bool = False,
    form: str = "prior",
) -> ModesScore:
    """Replay `parts` one after the other on one `ModedReplay`, scoring each match before it
    is rated; per part the summary over every mode and per mode (modes in sorted order).
    `keep_raw`: also each part's raw pairs per mode (`Scorer.raw`). `form`: ``prior``
    (`ModedReplay`, what the service does) or ``shared`` (`SharedReplay`)."""
    if form not in FORMS:
        raise ValueError(f"form: use one of {', '.join(FORMS)}")
    replay = FORMS[form](models, coupling, experience)
    whole, per_mode, raw = [], [], []
    for part in parts:
        everything = Scorer(None)
        scorers: dict[str, Scorer] = {}
        for mode, match in part:
            teams, outcome = replay.apply(mode, match)
            scorer = scorers.get(mode) or scorers.setdefault(mode, Scorer(None, keep_raw=keep_raw))
            score = scorer.observe_with(replay.models[mode], replay.draws[mode], match, teams, outcome)
            everything.add(score, match.finished_at)
        whole.append(everything.summary())
        per_mode.append({m: scorers[m].summary() for m in sorted(scorers)})
        if keep_raw:
            raw.append({m: scorers[m].raw or [] for m in sorted(scorers)})
    return ModesScore(whole, per_mode, raw)


#: The forms of sharing `score_modes` replays.
FORMS: dict[str, type[ModedReplay] | type[SharedReplay]] = {
    "prior": ModedReplay,
    "cross": CrossReplay,
    "shared": SharedReplay,
}
