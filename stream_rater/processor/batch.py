"""What one batch of one ladder is planned with (`_Setting`: the ladder, its model's and
rules' parts the hot loop calls, the snapshot) and what it has changed so far (`_Changes`), as
`processor.planner` and the moded planner (`processor.modes`, `processor.cross`) share them."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from stream_rater.config.ladders import Ladder
from stream_rater.config.rules import Rules, Standing
from stream_rater.contracts import MatchFinished
from stream_rater.processor.results import MatchResult
from stream_rater.rating.base import Outcome, Rating, RatingModel
from stream_rater.rating.scoring import predicts_draws
from stream_rater.store.base import Event, PlayerState, Snapshot

#: Sees each match with its prior team ratings (effects last in their teams) just before
#: the model rates it — how `evaluate` makes its predictions with the very same states.
PriorObserver = Callable[[MatchFinished, list[list[Rating]], Outcome], None]


@dataclass(slots=True)
class _Setting:
    """What one batch of one ladder is computed with: the ladder, its model's and rules'
    parts the hot loop calls, the snapshot's stored states, and the batch's own inputs."""

    ladder: Ladder
    model: RatingModel
    rules: Rules
    snapshot: Snapshot
    processed_at: str
    observe: PriorObserver | None
    #: None: a live batch (markers hold the events); a number: a re-rate's staging one.
    generation: int | None
    #: Whether markers hold the events until produced: not a staging generation's nor a
    #: shadow's (their events are never produced).
    keeps_events: bool
    #: Whether matches get rating-changed events: not a shadow's (nothing reads them).
    builds_events: bool
    #: Set when some match may be unrated by the ladder's duration or player-count rules.
    checks_rated: bool
    #: Display rating (games, sigma) → whether the player is on the leaderboard; None: all are.
    qualifies: Callable[[int, float | None], bool] | None
    #: (games, sigma) → the flag a rule adds to events (`Rules.flags`); None: no such rule.
    flag: Callable[[int, float | None], bool] | None
    #: (state, match time) → the state a rated match starts from (`Rules.adjusted`); None: as stored.
    adjust: Callable[[PlayerState, float], PlayerState] | None
    new_player: PlayerState
    new_effect: PlayerState
    #: The ladder's ``rating_floor`` (None: no floor).
    floor: float | None
    #: Whether the model predicts draws (`rating.scoring.predicts_draws`).
    draws: bool
    #: Match ids an operator voided (`Snapshot.voided`).
    voided: Collection[str]
    #: Whether a match's times since each player last played (`Outcome.elapsed`) are worked
    #: out: for a model whose ratings age (only such a model reads them) or an observer.
    times: bool

    @classmethod
    def of(
        cls,
        ladder: Ladder,
        snapshot: Snapshot,
        processed_at: str,
        observe: PriorObserver | None,
        generation: int | None,
    ) -> _Setting:
        """The setting of a batch of `ladder` computed on `snapshot`."""
        model, rules = ladder.rating_model, ladder.rules
        initial, initial_effect = model.initial(), model.initial_effect()
        return cls(
            ladder=ladder,
            model=model,
            rules=rules,
            snapshot=snapshot,
            processed_at=processed_at,
            observe=observe,
            generation=generation,
            keeps_events=generation is None and ladder.shadow_of is None,
            builds_events=ladder.shadow_of is None,
            checks_rated=rules.min_duration is not None or rules.min_players is not None,
            qualifies=rules.qualifier() if rules.filters_leaderboard else None,
            flag=rules.flagger(),
            adjust=_adjuster(rules, model) if rules.adjusts_states else None,
            new_player=PlayerState(initial.mu, initial.sigma, extra=initial.extra),
            new_effect=PlayerState(initial_effect.mu, initial_effect.sigma, extra=initial_effect.extra),
            floor=rules.rating_floor,
            draws=predicts_draws(model),
            voided=snapshot.voided,
            times=model.ages or observe is not None,
        )


def _adjuster(rules: Rules, model: RatingModel) -> Callable[[PlayerState, float], PlayerState]:
    """`Rules.adjusted` on a stored state (its μ only: games, σ and times stay)."""

    def adjust(state: PlayerState, at: float) -> PlayerState:
        if state.last_played is None:
            return state
        rating = Rating(state.mu, state.sigma, state.extra)
        new = rules.adjusted(model, rating, Standing(state.games, state.sigma, state.last_played), at)
        return state if new is rating else state._replace(mu=new.mu)

    return adjust


@dataclass(slots=True)
class _Changes:
    """What a batch has changed so far, as it will be written: states one version past the
    one read, markers, history entries, leaderboard scores and the results."""

    applied: dict[str, list[Event]]
    players: dict[str, PlayerState] = field(default_factory=dict)
    effects: dict[str, PlayerState] = field(default_factory=dict)
    markers: dict[str, list[Event]] = field(default_factory=dict)
    history: dict[str, list[Event]] = field(default_factory=dict)
    leaderboard: dict[str, float | None] = field(default_factory=dict)
    results: list[MatchResult] = field(default_factory=list)
    #: Match id → ``[player id, team rank]`` of its rated players (`Commit.placings`).
    placings: dict[str, list[list[Any]]] = field(default_factory=dict)
    #: The newly applied matches' prediction scores, in order (`processor.quality.record`).
    scores: list[list[Any]] = field(default_factory=list)
    #: The id of the season-start record the batch applies, if any.
    season: str | None = None
    #: ``id(event)`` → its fields, for each rating-changed event built (`Commit.event_fields`).
    event_fields: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    #: Each match's ``finished_at`` text → its stored form (`Commit.stored_times`).
    stored_times: dict[str, int | str] = field(default_factory=dict)

    def apply(self, match_id: str, events: list[Event], keeps_events: bool) -> None:
        """Mark `match_id` applied with `events`, which its marker holds if `keeps_events`
        (see `_Setting.keeps_events`)."""
        self.applied[match_id] = events
        self.markers[match_id] = events if keeps_events else []

    def player(self, pid: str, after: PlayerState, rating: float, s: _Setting) -> None:
        """Write player `pid`'s state `after` the match and its leaderboard score."""
        self.players[pid] = after
        qualifies = s.qualifies
        self.leaderboard[pid] = rating if qualifies is None or qualifies(after.games, after.sigma) else None
