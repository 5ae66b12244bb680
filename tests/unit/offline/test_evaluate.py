"""The prediction scorer on hand-built matches with known probabilities, `score` on the
processor's priors, and the probabilities scored checked against the read API's answers."""

from __future__ import annotations

import math
from functools import partial

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.offline.evaluate import PROBABILITY_FLOOR, Scorer, score
from stream_rater.processor import Processor
from stream_rater.queries import Queries
from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.predict import predict
from stream_rater.store.memory import MemoryStore
from tests.helpers import parsed_duel, parsed_match

# Logistic Elo with scale 1: P(a beats b) = 1 / (1 + exp(r_b - r_a)), so r = ln 3 vs 0 is 3/4.
LADDERS = Ladders([Ladder("default", "elo", {"scale": 1.0})])
STRONG = math.log(3.0)


def observe(scorer: Scorer, ratings: list[float], ranks: list[float], at: float = 0.0) -> None:
    """Feed one match of single-player teams with the given prior ratings and ranks."""
    match = parsed_match(LADDERS, "x", *([f"p{i}"] for i in range(len(ranks))), ranks=ranks, at=at)
    scorer.observe(match, [[Rating(r)] for r in ratings], Outcome(ranks=ranks))


def test_perfect_predictions_have_no_wrong_order() -> None:
    """Matches always won by the team the model favours give a wrong-order rate of 0."""
    scorer = Scorer(LADDERS)
    observe(scorer, [STRONG, 0.0], [1, 2])
    observe(scorer, [0.0, STRONG], [2, 1])
    assert scorer.summary().wrong_order == 0.0


def test_inverted_predictions_are_all_wrong() -> None:
    """Matches always won by the team the model rates lower give a wrong-order rate of 1."""
    scorer = Scorer(LADDERS)
    observe(scorer, [STRONG, 0.0], [2, 1])
    observe(scorer, [0.0, STRONG], [1, 2])
    assert scorer.summary().wrong_order == 1.0


def test_equal_predictions_count_half() -> None:
    """A pair predicted as a toss-up counts half wrong, whoever wins."""
    scorer = Scorer(LADDERS)
    observe(scorer, [1.0, 1.0], [1, 2])
    observe(scorer, [STRONG, 0.0], [1, 2])
    assert scorer.summary().wrong_order == 0.25


def test_log_loss_and_brier_use_the_winners_probability() -> None:
    """Log-loss is the mean of -ln P(winner wins) and Brier the mean of (1 - P)^2 over decisive duels."""
    scorer = Scorer(LADDERS)
    observe(scorer, [STRONG, 0.0], [1, 2])  # winner had 3/4
    observe(scorer, [STRONG, 0.0], [2, 1])  # winner had 1/4
    s = scorer.summary()
    assert s.two_team == 2
    assert s.log_loss == pytest.approx((-math.log(0.75) - math.log(0.25)) / 2, rel=1e-12)
    assert s.brier == pytest.approx((0.25**2 + 0.75**2) / 2, rel=1e-12)


def test_draws_are_not_scored_for_a_model_without_draws() -> None:
    """An Elo draw counts as a match but adds no pair, log-loss or calibration entry."""
    scorer = Scorer(LADDERS)
    observe(scorer, [STRONG, 0.0], [1, 1])
    s = scorer.summary()
    assert (s.matches, s.pairs, s.two_team) == (1, 0, 0)
    assert s.wrong_order is s.log_loss is s.brier is None
    assert all(b.count == 0 for b in s.calibration)
    with pytest.raises(ValueError, match="log_loss"):
        s.metric("log_loss")


def test_calibration_bins_count_first_listed_team() -> None:
    """Each decisive pair lands in the bin of P(first-listed team wins) with its observed result."""
    scorer = Scorer(LADDERS, bins=4)
    observe(scorer, [STRONG, 0.0], [1, 2])  # p = .75, first won
    observe(scorer, [STRONG, 0.0], [2, 1])  # p = .75, first lost
    observe(scorer, [0.0, STRONG], [2, 1])  # p = .25, first lost
    bins = scorer.summary().calibration
    assert [(b.low, b.high, b.count) for b in bins] == [
        (0.0, 0.25, 0),
        (0.25, 0.5, 1),
        (0.5, 0.75, 0),
        (0.75, 1.0, 2),
    ]
    assert bins[3].mean_predicted == pytest.approx(0.75) and bins[3].observed == 0.5
    assert bins[1].observed == 0.0 and bins[0].mean_predicted is None
    # ECE = (2·|0.75 − 0.5| + 1·|0.25 − 0|) / 3, computed by hand from the bins above
    assert scorer.summary().expected_calibration_error == pytest.approx((2 * 0.25 + 0.25) / 3)
    assert scorer.summary().to_dict()["expected_calibration_error"] == pytest.approx(0.25)


def test_many_teams_are_scored_pairwise_without_log_loss() -> None:
    """A multi-team match scores every pair of teams with different ranks and no log-loss."""
    scorer = Scorer(LADDERS)
    observe(scorer, [2.0, 1.0, 0.0, 0.0], [1, 2, 3, 3])  # 5 decisive pairs, all predicted right
    observe(scorer, [2.0, 1.0, 0.0], [3, 2, 1])  # 3 pairs, all wrong
    s = scorer.summary()
    assert s.pairs == 8
    assert s.wrong_order == pytest.approx(3 / 8)
    assert s.two_team == 0 and s.log_loss is None


def test_certain_miss_has_finite_log_loss() -> None:
    """A winner given probability 0 costs -ln PROBABILITY_FLOOR, not infinity."""
    scorer = Scorer(LADDERS)
    observe(scorer, [0.0, 1000.0], [1, 2])
    assert scorer.summary().log_loss == pytest.approx(-math.log(PROBABILITY_FLOOR))


def test_over_time_splits_pairs_into_equal_windows() -> None:
    """The wrong-order rate over time comes in consecutive windows of equal pair counts."""
    scorer = Scorer(LADDERS, periods=2)
    for at, ranks in [(0.0, [1, 2]), (1.0, [1, 2]), (2.0, [2, 1]), (3.0, [2, 1])]:
        observe(scorer, [STRONG, 0.0], ranks, at)
    periods = scorer.summary().over_time
    assert [(p.start, p.end, p.pairs, p.wrong_order) for p in periods] == [
        (0.0, 1.0, 2, 0.0),
        (2.0, 3.0, 2, 1.0),
    ]


def test_score_predicts_from_the_ratings_before_each_match() -> None:
    """`score` predicts each match from the states before it: a toss-up first, then the previous winner."""
    matches = [
        parsed_duel(LADDERS, "m1", "a", "b", at=0.0),
        parsed_duel(LADDERS, "m2", "a", "b", at=1.0),
        parsed_duel(LADDERS, "m3", "a", "b", ranks=(1, 0), at=2.0),
    ]
    (first, rest), whole, counts = score([matches[:1], matches[1:]], LADDERS)
    assert counts.applied == 3
    assert first.wrong_order == 0.5
    assert rest.wrong_order == 0.5  # m2 right, m3 (a favoured, b won) wrong
    assert whole.pairs == 3 and whole.wrong_order == pytest.approx(1.5 / 3)


DAY = 86400.0
#: TrueSkill with draws and time-scaled dynamics, so both the draw margin and `as_of` matter.
TIMED = Ladders(
    [Ladder("timed", "trueskill", {"draw_probability": 0.25, "time_tau": 1.0, "time_unit": "days"})]
)


#: A 1-vs-1 match on the `TIMED` ladder.
timed_duel = partial(parsed_duel, TIMED, ladder="timed")


@pytest.mark.parametrize(("ranks", "outcome"), [((1, 2), 0), ((2, 1), 1), ((1, 1), "draw")])
async def test_scored_probabilities_are_the_read_apis(ranks: tuple[int, int], outcome: int | str) -> None:
    """Log-loss, Brier and calibration of a match score exactly what `Queries.predict` answers
    for the same players at the match's time: win, loss or draw, σ grown by the idle time."""
    store = MemoryStore()
    await Processor(TIMED, store).process(
        [
            timed_duel("h1", "ann", "bob", at=0.0),
            timed_duel("h2", "ann", "cat", at=DAY),
            timed_duel("h3", "cat", "bob", at=2 * DAY, ranks=(1, 1)),
        ]
    )
    at = 40 * DAY  # ann idle 39 days, bob 38: the read adds γ²·Δt to each σ
    answer = await Queries(store, TIMED).predict("timed", [["ann"], ["bob"]], now=at)
    wins = [team["win_probability"] for team in answer["teams"]]
    draw = answer["draw_probability"]
    assert 0 < draw < 1 and sum(wins) + draw == pytest.approx(1.0)
    p = draw if outcome == "draw" else wins[outcome]

    scorer = Scorer(TIMED, bins=1)
    await Processor(TIMED, store, observe=scorer.observe).process(
        [timed_duel("m", "ann", "bob", at=at, ranks=ranks)]
    )
    s = scorer.summary()
    assert s.two_team == 1
    assert s.log_loss == pytest.approx(-math.log(p), rel=1e-12)
    assert s.brier == pytest.approx(((1 - p) ** 2 + sum(q * q for q in [*wins, draw]) - p * p) / 2, rel=1e-12)
    (calibration,) = s.calibration
    assert calibration.mean_predicted == pytest.approx(wins[0], rel=1e-12)
    assert calibration.observed == (1.0 if outcome == 0 else 0.0)  # a draw is not a win
    assert s.pairs == (0 if outcome == "draw" else 1)


def test_without_idle_time_the_priors_go_to_predict_unchanged() -> None:
    """With no elapsed times the scorer asks `predict` of the priors exactly as given."""
    model = TIMED.get("timed").rating_model
    teams = [[Rating(27.0, 4.0)], [Rating(24.0, 6.0)]]
    expected = predict(model, teams)
    scorer = Scorer(TIMED, bins=1)
    scorer.observe(timed_duel("m", "a", "b", at=0.0, ranks=(1, 1)), teams, Outcome(ranks=[1, 1]))
    s = scorer.summary()
    assert s.log_loss == pytest.approx(-math.log(expected.draw_probability), rel=1e-12)
    assert s.calibration[0].mean_predicted == pytest.approx(expected.win_probabilities[0], rel=1e-12)


def test_many_trueskill_teams_are_scored_with_each_pairs_prediction() -> None:
    """In a three-team match each pair (draws included) is scored with `predict` of the pair alone."""
    model = TIMED.get("timed").rating_model
    teams = [[Rating(30.0, 3.0)], [Rating(25.0, 3.0)], [Rating(20.0, 3.0)]]
    match = parsed_match(TIMED, "ffa", ["p0"], ["p1"], ["p2"], ladder="timed", ranks=[1, 2, 2], at=0.0)
    scorer = Scorer(TIMED, bins=1)
    scorer.observe(match, teams, Outcome(ranks=[1, 2, 2]))
    s = scorer.summary()
    firsts = [predict(model, [teams[a], teams[b]]).win_probabilities[0] for a, b in [(0, 1), (0, 2), (1, 2)]]
    assert (s.pairs, s.wrong_order, s.two_team, s.calibration[0].count) == (2, 0.0, 0, 3)
    assert s.calibration[0].mean_predicted == pytest.approx(sum(firsts) / 3, rel=1e-12)
    assert s.calibration[0].observed == pytest.approx(2 / 3)
