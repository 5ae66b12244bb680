"""The pure part of processing: one ladder's matches applied in order to a snapshot of its
states, giving each match's result and the commit that makes them durable. No I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import isfinite
from typing import Any

from stream_rater.config.ladders import Ladder
from stream_rater.contracts import MatchFinished, Team, format_timestamp, rating_changed, season_changed
from stream_rater.processor.batch import PriorObserver, _Changes, _Setting
from stream_rater.processor.quality import LIVE, increments, record
from stream_rater.processor.results import MatchResult, NonFiniteRating, _new
from stream_rater.rating.base import Outcome, Rating, RatingModel
from stream_rater.rating.predict import as_read, expected, pairwise
from stream_rater.rating.scoring import score_match
from stream_rater.store.base import Commit, Event, PlayerState, Snapshot, StateWrite
from stream_rater.store.stored_events import stored_time


@dataclass(slots=True)
class _Plan:
    results: list[MatchResult]
    commit: Commit


def plan_batch(
    ladder: Ladder,
    matches: Sequence[MatchFinished],
    snapshot: Snapshot,
    processed_at: str,
    observe: PriorObserver | None = None,
    positions: Mapping[int, int] | None = None,
    generation: int | None = None,
) -> _Plan:
    """Apply `matches` (all of `ladder`) in order to `snapshot`; pure, no I/O.

    Returns the results and the commit that makes them durable: new states expecting the
    versions of the snapshot, one marker per newly applied match, leaderboard scores and
    history entries, and `positions` (how far into the topic the matches go) for the
    `generation` read. Voided matches are skipped. `observe`, if given, sees every newly
    applied match's priors.

    A staging generation's markers (`generation` not None: a re-rate) are written without
    events, as shrunk ones: its events are never produced (the re-rate sends correction
    events instead), so there is nothing a redelivery could re-emit.
    """
    setting = _Setting.of(ladder, snapshot, processed_at, observe, generation)
    changes = _Changes(applied=dict(snapshot.applied))
    results = changes.results
    for match in matches:
        results.append(_one_match(setting, changes, match))
    return _Plan(results, _commit(setting, changes, positions))


def _one_match(s: _Setting, changes: _Changes, match: MatchFinished) -> MatchResult:
    """Apply `match` on top of `changes`: the steps a match goes through, in order."""
    match_id = match.match_id
    if match_id in changes.applied:
        return MatchResult.duplicate_of(match, changes.applied[match_id])
    if match_id in s.voided:
        return MatchResult.voided_by_operator(match)
    if match.season is not None:
        changes.season = match_id
        resets = _season_events(s, match, changes)
        changes.apply(match_id, resets, s.keeps_events)
        return MatchResult.applied(match, resets)
    if s.checks_rated or not match.rated:
        reason = s.rules.unrated_reason(match)
        if reason is not None:
            changes.applied[match_id] = changes.markers[match_id] = []
            return MatchResult.unrated_because(match, reason)
    priors, teams, elapsed, plain = _priors(s, changes, match)
    outcome = _outcome(s, match, elapsed, plain)
    if s.observe is not None:
        s.observe(match, teams, outcome)
    if not s.builds_events:
        return _shadow_match(s, changes, match, priors, (teams, elapsed), outcome)
    read = teams if elapsed is None else as_read(s.model, teams, elapsed)  # as it returns
    pairs = pairwise(s.model, read)  # what the read API would answer, asked once for both uses
    ranks = outcome[0]  # `outcome.ranks`, without the named tuple's lookup
    changes.scores.append(record(score_match(s.model, s.draws, read, ranks, pairs)))
    posterior = _rated(s, match, teams, outcome)
    finished_at = format_timestamp(match.finished_at)  # per match: each has its own time
    changes.stored_times[finished_at] = stored_time(match.finished_at, finished_at)
    expectation = expected(s.model, read, pairs)
    events = _events(s, changes, match, priors, posterior, expectation, ranks, finished_at)
    changes.applied[match_id] = events
    changes.markers[match_id] = events if s.keeps_events else []  # `_Changes.apply`, inlined
    return _new(MatchResult, (match, events, False, False, None))  # `MatchResult.applied`


def _shadow_match(
    s: _Setting,
    changes: _Changes,
    match: MatchFinished,
    priors: list[list[PlayerState]],
    rated: tuple[list[list[Rating]], list[list[float | None]] | None],
    outcome: Outcome,
) -> MatchResult:
    """`_one_match`'s last steps for a shadow: scored like the live ladder (its quality in its
    own keys), but a match its model fails on is recorded unrated (``shadow model failed``)
    instead of raising, so that a shadow never dead-letters a match of the live ladder; a
    replay computes the same (the same rule, in the same planner). Its states are written,
    but no events built: nothing reads a shadow's (`_Setting.builds_events`)."""
    teams, elapsed = rated
    try:
        read = as_read(s.model, teams, elapsed)
        pairs = pairwise(s.model, read)
        score = record(score_match(s.model, s.draws, read, outcome.ranks, pairs))
        posterior = _rated(s, match, teams, outcome)
        events = _events(s, changes, match, priors, posterior)
    except Exception as exc:  # any failure of the model on this input
        changes.applied[match.match_id] = changes.markers[match.match_id] = []
        return MatchResult.unrated_because(match, f"shadow model failed: {type(exc).__name__}")
    changes.scores.append(score)
    changes.apply(match.match_id, events, s.keeps_events)
    return MatchResult.applied(match, events)


def _rated(
    s: _Setting, match: MatchFinished, teams: list[list[Rating]], outcome: Outcome
) -> list[list[Rating]]:
    """The model's posterior ratings of `match`, raised to the ladder's floor if it has one;
    `NonFiniteRating` if one is NaN or infinite (checked before anything is written)."""
    posterior = s.model.rate_match(teams, outcome)
    if s.floor is not None:
        posterior = _floored(s.model, s.floor, match, posterior)
    for team_post in posterior:
        for r in team_post:  # r[0], r[1]: mu and sigma, without a named tuple's lookups
            if not (isfinite(r[0]) and (r[1] is None or isfinite(r[1]))):
                raise NonFiniteRating(
                    f"match {match.match_id!r}: model {s.model.name!r} produced a non-finite rating"
                )
    return posterior


def _priors(
    s: _Setting, changes: _Changes, match: MatchFinished
) -> tuple[list[list[PlayerState]], list[list[Rating]], list[list[float | None]] | None, bool]:
    """Per team: its players' states before `match`, then its effects' (as changed by the
    batch, else as stored, else new); their ratings; the time since each last played (None
    unless `_Setting.times`); and whether the match is plain (every weight 1, every player
    rated, no effects)."""
    players, stored_players, new_player = changes.players, s.snapshot.players, s.new_player
    at = match.finished_at
    priors: list[list[PlayerState]] = []
    teams: list[list[Rating]] = []
    plain = True
    for team in match.teams:
        prior: list[PlayerState] = []
        ratings: list[Rating] = []
        for p in team.players:  # a loop, not a list comprehension (a frame of its own in 3.11)
            pid = p.id
            state = players.get(pid) or stored_players.get(pid) or new_player
            prior.append(state)
            ratings.append(_new(Rating, (state[0], state[1], state[5])))  # mu, sigma, extra
            if p.weight != 1.0 or not p.rated:  # here: a second loop over the players costs more
                plain = False
        if s.adjust is not None or team.effects:
            prior = _adjusted(s, changes, team, prior, at)
            ratings = [_new(Rating, (state[0], state[1], state[5])) for state in prior]
            plain = plain and not team.effects
        priors.append(prior)
        teams.append(ratings)
    return priors, teams, _elapsed(priors, at) if s.times else None, plain


def _adjusted(
    s: _Setting, changes: _Changes, team: Team, prior: list[PlayerState], at: float
) -> list[PlayerState]:
    """`_priors` of `team` whose players' states before a match at `at` are `prior`: those
    states as the rules adjust them (`_Setting.adjust`), then its effects' (as changed by the
    batch, else as stored, else new)."""
    if s.adjust is not None:
        prior = [s.adjust(state, at) for state in prior]
    if team.effects:
        effects, stored_effects, new_effect = changes.effects, s.snapshot.effects, s.new_effect
        prior = prior + [effects.get(e) or stored_effects.get(e) or new_effect for e in team.effects]
    return prior


def _elapsed(priors: list[list[PlayerState]], at: float) -> list[list[float | None]]:
    """Per team, the seconds since each of its `priors` last played before a match at `at`
    (None: never)."""
    elapsed: list[list[float | None]] = []
    for prior in priors:
        gaps: list[float | None] = []
        for state in prior:
            last = state.last_played
            if last is None:
                gaps.append(None)
            else:  # `max(0.0, gap)`, without the builtin's call (each costs about 1,000 instructions)
                gap = at - last
                gaps.append(gap if gap > 0.0 else 0.0)
        elapsed.append(gaps)
    return elapsed


def _per_player(match: MatchFinished, attr: str, default: Any) -> list[list[Any]]:
    return [[default if (v := getattr(p, attr)) is None else v for p in team.players] for team in match.teams]


def _outcome(
    s: _Setting, match: MatchFinished, elapsed: list[list[float | None]] | None, plain: bool
) -> Outcome:
    """What the model learns `match`'s teams from besides their ratings: the ranks, and
    weights and rated flags (unless `plain`), scores and times played (if the model uses them)."""
    needs_scores = s.model.needs_scores
    if plain and not needs_scores:  # the commonest match: ranks only
        return _new(Outcome, (match.ranks(), None, None, None, elapsed, None))
    weights = rated = scores = seconds = None
    if not plain:
        pad = [[1.0] * len(team.effects) for team in match.teams]
        weights = [w + e for w, e in zip(_per_player(match, "weight", 1.0), pad)]
        rated = [r + [True] * len(e) for r, e in zip(_per_player(match, "rated", True), pad)]
    if needs_scores:
        scores = _per_player(match, "score", 0.0)
        seconds = _per_player(match, "seconds_played", 0.0)
    return _new(Outcome, (match.ranks(), weights, scores, seconds, elapsed, rated))


def _floored(
    model: RatingModel, floor: float, match: MatchFinished, posterior: list[list[Rating]]
) -> list[list[Rating]]:
    """`posterior` with each player's rating raised to the ladder's `floor` (`Rules`:
    ``rating_floor``); the team's context effects, listed after its players, stay as rated."""
    return [
        [model.floored(r, floor) for r in team_post[: len(team.players)]]
        + list(team_post[len(team.players) :])
        for team, team_post in zip(match.teams, posterior)
    ]


def _events(
    s: _Setting,
    changes: _Changes,
    match: MatchFinished,
    priors: list[list[PlayerState]],
    posterior: list[list[Rating]],
    expectation: list[dict[str, float]] | None = None,
    ranks: Sequence[float] = (),
    finished_at: str = "",
) -> list[Event]:
    """Write the rated players' and the effects' states after `match` (their `posterior`
    ratings, checked finite by `_rated`) into `changes`, with leaderboard scores.
    With `expectation` (per team; none for a shadow), `ranks` and `finished_at` (as text) build
    and return the rated players' events, put in their history, and their `MatchFinished.placings`."""
    display, flag, qualifies, history = s.model.display, s.flag, s.qualifies, changes.history
    stored_players, players, leaderboard = s.snapshot.players, changes.players, changes.leaderboard
    at, match_id, ladder_name, model_name = match.finished_at, match.match_id, s.ladder.name, s.model.name
    placings: list[list[Any]] = []
    if expectation is not None:
        changes.placings[match_id] = placings
    events: list[Event] = []
    for t, team in enumerate(match.teams):  # indexed: a zip costs more than the lookups
        prior, team_post = priors[t], posterior[t]
        for i, player in enumerate(team.players):
            if not player.rated:
                continue
            before, new = prior[i], team_post[i]
            pid, rating, last = player.id, display(new), before[3]  # before.last_played
            players[pid] = after = _after(before, new, at, stored_players.get(pid, s.new_player), rating)
            games = after[2]  # after.games, without the named tuple's lookup
            leaderboard[pid] = rating if qualifies is None or qualifies(games, after[1]) else None
            if expectation is None:
                continue
            fields = (  # `Commit.event_fields`: the store packs these, not the event's map
                match_id,
                ladder_name,
                pid,
                model_name,
                before,
                new,
                rating,
                games,
                finished_at,
                s.processed_at,
                last is not None and at < last,  # late: see `is_late`
                None if flag is None else flag(games, after[1]),  # after.sigma
                expectation[t],
                display(before),  # the display rating before, from its mu and sigma
            )
            changes.event_fields[id(event := rating_changed(*fields))] = fields
            events.append(event)
            placings.append([pid, ranks[t]])
            if (entries := history.get(pid)) is None:
                history[pid] = [event]
            else:
                entries.append(event)
        if team.effects:
            _effects(s, changes, team, prior, team_post, at)
    return events


def _effects(
    s: _Setting, changes: _Changes, team: Team, prior: list[PlayerState], team_post: list[Rating], at: float
) -> None:
    """Write the states of `team`'s context effects (listed after its players) after a match."""
    n, stored_effects = len(team.players), s.snapshot.effects
    for name, before, new in zip(team.effects, prior[n:], team_post[n:]):
        changes.effects[name] = _after(before, new, at, stored_effects.get(name, s.new_effect), None)


def _after(
    before: PlayerState, new: Rating, at: float, stored: PlayerState, rating: float | None
) -> PlayerState:
    """The state to write after a match at `at`: one version past the `stored` one; its peak
    raised to the display `rating` if that is higher (None for effects: no peak)."""
    # Unpacked and indexed: each attribute of a named tuple costs a descriptor's lookup.
    _, _, games, last, _, _, peak, peak_at = before
    if last is None or at > last:  # `max(last, at)` without the builtin's call
        last = at
    extra = new[2] if len(new) > 2 else None  # a model may build (mu, sigma) by tuple.__new__
    if rating is not None and (peak is None or rating > peak):
        peak, peak_at = rating, at
    return _new(PlayerState, (new[0], new[1], games + 1, last, stored[4] + 1, extra, peak, peak_at))


def _season_events(s: _Setting, record: MatchFinished, changes: _Changes) -> list[Event]:
    """Apply the season-start `record` to every player of the snapshot (which holds them all):
    each state pulled toward the prior (`Rules.season_reset`) is written into `changes` with
    its leaderboard score; returns one season event per player whose state changed. Games,
    last match and peak stay as they were."""
    model, rules = s.model, s.rules
    overrides = dict(record.season.params) if record.season is not None else {}
    started_at = format_timestamp(record.finished_at)
    events: list[Event] = []
    for pid, stored in s.snapshot.players.items():
        state = changes.players.get(pid, stored)
        reset = rules.season_reset(model, Rating(state.mu, state.sigma, state.extra), overrides)
        if (reset.mu, reset.sigma) == (state.mu, state.sigma):
            continue
        after = state._replace(mu=reset.mu, sigma=reset.sigma, version=stored.version + 1)
        rating = model.display(reset)
        changes.player(pid, after, rating, s)
        event = season_changed(
            record.match_id,
            s.ladder.name,
            pid,
            model.name,
            (state.mu, state.sigma),
            (reset.mu, reset.sigma),
            rating,
            after.games,
            started_at,
            s.processed_at,
            None if s.flag is None else s.flag(after.games, after.sigma),  # the rules' flag
            overrides,
            model.display(Rating(state.mu, state.sigma)),
        )
        events.append(event)
        changes.history.setdefault(pid, []).append(event)
    return events


def _commit(s: _Setting, changes: _Changes, positions: Mapping[int, int] | None) -> Commit:
    """The commit that makes `changes` durable: each changed state expecting the version
    read, the players' leaderboard scores (and last played, where the rules track activity),
    and the players' history entries — none for a shadow: they would double the largest item
    of a ladder's memory (deploy/README.md, "Shadow models") for a view nobody compares."""
    tracks_activity = s.rules.leaderboard_active_days is not None
    leaderboard = changes.leaderboard
    writes = [
        _new(
            StateWrite,
            (
                pid,
                state,
                state.version - 1,
                False,
                score := leaderboard[pid],
                state.last_played if tracks_activity and score is not None else None,
            ),
        )
        for pid, state in changes.players.items()
    ] + [
        _new(StateWrite, (name, state, state.version - 1, True, None, None))
        for name, state in changes.effects.items()
    ]
    return Commit(
        ladder=s.ladder.name,
        writes=writes,
        markers=changes.markers,
        history=changes.history if s.ladder.shadow_of is None else {},  # a shadow keeps no history
        positions=positions or {},
        generation=s.generation,
        season=changes.season,
        read_at=(s.snapshot.generation, s.snapshot.watermark),
        placings=changes.placings,
        quality={LIVE: (increments(changes.scores), changes.scores)} if changes.scores else {},
        active_within=s.rules.active_within(),
        event_fields=changes.event_fields,
        stored_times=changes.stored_times,
    )
