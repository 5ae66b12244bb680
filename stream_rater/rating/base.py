"""The shape every rating model shares: a state (`Rating`), an outcome (`Outcome`) and a
model object (`RatingModel`) that holds its parameters and turns priors into posteriors.

Models are pure: no I/O, plain floats/numpy/scipy. The processor talks to every model
through `RatingModel.rate_match` only, so adding a model never touches the processor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from stream_rater.rating.calibration import Calibration

Teams = Sequence[Sequence["Rating"]]
PerPlayer = Sequence[Sequence[float]]
_T = TypeVar("_T")


class Rating(NamedTuple):
    """A player's rating state: mean `mu`, for Bayesian models std-dev `sigma`, and `extra`.

    Elo-family states have ``sigma=None`` and ``mu`` is the rating itself. A named tuple:
    immutable like a frozen dataclass, and about three times cheaper to create, which
    matters when a 1-vs-1 update takes a few microseconds.
    """

    mu: float
    sigma: float | None = None
    #: One more per-player number a model may keep (Glicko-2: the volatility); None otherwise.
    extra: float | None = None


class Outcome(NamedTuple):
    """Everything a match says about its result, in the teams' order.

    - ``ranks``: one per team, lower is better, equal ranks are a draw.
    - ``weights``: partial play per player in (0, 1] (TrueSkill); None = all 1.
    - ``scores``: per-player score (SPH Elo, TrueSkill's evidence options); None unless the
      model `needs_scores` (then 0 where the event gave none). A team's row covers its
      players only: context effects, listed last in `teams`, have no score.
    - ``seconds_played``: per-player time in the match, like ``scores`` (0 where absent).
    - ``elapsed``: per-player seconds since that player's previous match, None for a first
      match (time-scaled dynamics).
    - ``rated``: per-player flag; unrated players take part in nobody's update.

    A named tuple like `Rating`: the processor builds one per match.
    """

    ranks: Sequence[float]
    weights: PerPlayer | None = None
    scores: PerPlayer | None = None
    seconds_played: PerPlayer | None = None
    elapsed: Sequence[Sequence[float | None]] | None = None
    rated: Sequence[Sequence[bool]] | None = None


class MeanSigma(Protocol):
    """What a display rating is read from: a `Rating`, or a stored state that starts with
    ``(mu, sigma)`` (the planner shows a prior's display rating from the state itself)."""

    @property
    def mu(self) -> float: ...

    @property
    def sigma(self) -> float | None: ...


@runtime_checkable
class GaussianPerformance(Protocol):
    """The capability of a model whose team performances are Gaussian (TrueSkill, section 4.1):
    draws predicted by a margin, match quality by eq. (7), team performances sampled for
    ranking probabilities and many team splits scored at once (`rating.predict`)."""

    beta: float
    calibration: Calibration | None

    def quality(self, teams: Teams, weights: Sequence[Sequence[float]] | None = None) -> float:
        """Match quality, eq. (7) generalised to teams."""
        ...

    def performance_variances(self, teams: Teams) -> list[list[float]]:
        """Each player's part of its team's performance variance, same shape as `teams`."""
        ...

    def draw_margin(self, players: int) -> float:
        """The draw margin of a match with `players` players in all."""
        ...

    def duel_probabilities(self, a: Rating, b: Rating) -> tuple[float, float, float]:
        """P(a wins), P(b wins), P(draw) of one player against one, uncalibrated."""
        ...

    def win_probabilities(self, teams: Teams) -> list[float]:
        """P(each team's performance is the highest)."""
        ...


class RatingModel(ABC):
    """A rating model: parameters + the update rule.

    Subclasses implement `_rate` (all players rated) and `win_probabilities`; `rate_match`
    removes unrated players (and teams left empty) first, so every model treats
    ``rated=False`` the same way: such a player keeps its prior and influences nobody.
    """

    #: Name used in ladder configuration and in rating-changed events.
    name: ClassVar[str]
    #: True for models whose states carry a sigma (TrueSkill).
    has_sigma: ClassVar[bool] = False
    #: True when team-level context effects can be learned as extra team members.
    supports_effects: ClassVar[bool] = True
    #: True when the model reads per-player ``score`` and ``seconds_played``. A class that
    #: says so makes them required in events; an instance may also set it when one of its
    #: options reads them (TrueSkill's ``player_scores``), and they stay optional.
    needs_scores: bool = False
    #: The map `rating.predict.predict` applies to the win probabilities (a ladder's
    #: ``calibration`` parameter, set by `config.ladders.Ladder`); None = as the model gives them.
    calibration: Calibration | None = None
    #: The parameters `offline.tune` fits by default, each with the transform it is searched
    #: in (``log``, ``logit``). Scale parameters that only rescale the ratings are left out.
    TUNING: ClassVar[dict[str, str]] = {}
    #: Parameters of options that are off by default, fitted only when named (``--tune``;
    #: TrueSkill: fitting ``margin_scale`` from 0 switches score margins on).
    TUNING_OPTIONS: ClassVar[dict[str, str]] = {}
    #: True for a model of Gaussian team performances (`GaussianPerformance`: TrueSkill).
    GAUSSIAN: ClassVar[bool] = False

    def gaussian(self) -> GaussianPerformance | None:
        """The model as one of Gaussian team performances (`GAUSSIAN`), or None."""
        return self if self.GAUSSIAN else None  # type: ignore[return-value]  # (`cast`'s call costs)

    @abstractmethod
    def initial(self) -> Rating:
        """The prior state of a player never seen before."""

    def initial_effect(self) -> Rating:
        """The prior of a context effect (e.g. home advantage): centred on 0, since an effect
        adds to its team's strength, with the model's initial uncertainty."""
        return Rating(0.0, self.initial().sigma)

    def display(self, rating: MeanSigma) -> float:
        """What a leaderboard shows (from μ and σ alone); the rating itself unless the model
        says otherwise."""
        return rating.mu

    def floored(self, rating: Rating, floor: float) -> Rating:
        """`rating` with μ raised so that its display rating is at least `floor` (a ladder's
        ``rating_floor``); `rating` itself when it already is. The display rating is μ plus
        a term without μ (μ − kσ, or μ), so raising μ by the shortfall lands it on `floor`."""
        shortfall = floor - self.display(rating)
        if not shortfall > 0.0:
            return rating
        extra = rating[2] if len(rating) > 2 else None  # a model may build (mu, sigma) by tuple.__new__
        return Rating(rating.mu + shortfall, rating.sigma, extra)

    def as_of(self, rating: Rating, idle_seconds: float) -> Rating:
        """The state as a read `idle_seconds` after the player's last match sees it; the
        stored one unless the model has time-scaled dynamics. Never written back."""
        return rating

    @property
    def ages(self) -> bool:
        """Whether `as_of` may change a rating; False: it returns every rating itself."""
        return type(self).as_of is not RatingModel.as_of

    @abstractmethod
    def _rate(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """Posterior states for a match in which every player is rated."""

    @abstractmethod
    def win_probabilities(self, teams: Teams) -> list[float]:
        """P(each team finishes first) under the model; sums to 1."""

    def rate_match(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """Posterior states for every player of `teams`, same shape.

        Unrated players keep their prior; teams with no rated player drop out of the match;
        fewer than two teams left means nothing changes.
        """
        if outcome.rated is None or all(all(team) for team in outcome.rated):
            return self._rate(teams, outcome)
        kept = [(t, [p for p, ok in enumerate(outcome.rated[t]) if ok]) for t in range(len(teams))]
        kept = [(t, players) for t, players in kept if players]
        result = [list(team) for team in teams]
        if len(kept) < 2:
            return result

        def pick(per_player: Sequence[Sequence[_T]] | None) -> list[list[_T]] | None:
            if per_player is None:
                return None
            # a row may end before the team's effects (scores): keep what it has
            return [[per_player[t][p] for p in players if p < len(per_player[t])] for t, players in kept]

        sub_outcome = Outcome(
            ranks=[outcome.ranks[t] for t, _ in kept],
            weights=pick(outcome.weights),
            scores=pick(outcome.scores),
            seconds_played=pick(outcome.seconds_played),
            elapsed=pick(outcome.elapsed),
        )
        sub_teams = pick(teams)
        assert sub_teams is not None
        posterior = self._rate(sub_teams, sub_outcome)
        for (t, players), new_team in zip(kept, posterior):
            for p, new in zip(players, new_team):
                result[t][p] = new
        return result


class PointRatingModel(RatingModel):
    """A model whose state is one number (the Elo family, SPH Elo): ``sigma`` is None and a
    new player starts at ``self.initial_rating``."""

    has_sigma: ClassVar[bool] = False
    initial_rating: float

    def initial(self) -> Rating:
        """A new player: ``Rating(initial_rating, None)``."""
        return Rating(self.initial_rating, None)
