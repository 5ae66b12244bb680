"""TrueSkill's evidence options: score margins and per-player scores (`rating._evidence`)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_rater.rating._evidence import margin_moments, score_evidence
from stream_rater.rating._gaussian import truncate_win
from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.registry import create_model
from stream_rater.rating.trueskill import TrueSkill

NEW = Rating(25.0, 25.0 / 3.0)
ORDER = TrueSkill()
MARGIN = TrueSkill(margin_scale=2.0)
SCORES = TrueSkill(player_scores=True)
BOTH = TrueSkill(player_scores=True, margin_scale=2.0)


def fresh(*sizes: int) -> list[list[Rating]]:
    return [[NEW] * size for size in sizes]


def zeros(teams: list[list[Rating]]) -> list[list[float]]:
    return [[0.0] * len(team) for team in teams]


# ---------------------------------------------------------------- the options' switches


def test_options_set_needs_scores_on_the_instance_only() -> None:
    """An option on makes the instance ask for scores; the class (validation) does not."""
    assert MARGIN.needs_scores and SCORES.needs_scores and not ORDER.needs_scores
    assert TrueSkill.needs_scores is False
    assert create_model("trueskill", {"player_scores": True}).needs_scores


@pytest.mark.parametrize(
    "params",
    [{"player_scores": "yes"}, {"score_noise": 0.0}, {"margin_scale": -1.0}, {"margin_noise": math.inf}],
)
def test_bad_option_values_are_refused(params) -> None:
    """Non-boolean switches, non-positive noises and negative scales raise ValueError."""
    with pytest.raises(ValueError, match=next(iter(params))):
        TrueSkill(**params)


@pytest.mark.parametrize(
    ("teams", "ranks"),
    [
        (fresh(1, 1), [0, 1]),
        ([[Rating(30, 2)], [Rating(20, 6)]], [1, 0]),
        (fresh(2, 2), [0, 1]),
        ([[Rating(28, 3), NEW], [Rating(20, 5)], [NEW, NEW]], [1, 0, 1]),
        (fresh(1, 1, 1, 1), [0, 1, 2, 3]),
    ],
)
def test_absent_scores_give_the_order_only_update_bit_for_bit(teams, ranks) -> None:
    """All-zero scores (what the processor passes when events have none) change nothing."""
    order = ORDER.rate(teams, ranks)
    for model in (MARGIN, SCORES, BOTH):
        assert model.rate(teams, ranks, scores=zeros(teams), seconds_played=zeros(teams)) == order
        assert model.rate(teams, ranks) == order


# ---------------------------------------------------------------- margins


def test_margin_factor_without_its_observation_is_the_win_factor() -> None:
    """An observation with huge noise leaves the plain truncation (Table 1) unchanged."""
    v, omw = margin_moments(0.7, 2.0, 0.3, 5.0, 1e30)
    assert (v, omw) == pytest.approx(truncate_win(0.35, 0.15), rel=1e-9)


@pytest.mark.parametrize("sizes", [(1, 1), (2, 2), (1, 1, 1)])
def test_a_larger_win_is_more_evidence(sizes) -> None:
    """The winner gains, and gains more the larger the margin (with this scale even a rout
    says the teams were closer than the order alone suggests for newcomers)."""
    teams = fresh(*sizes)
    ranks = list(range(len(sizes)))
    gains = []
    for margin in (1.0, 3.0, 10.0):
        scores = [[(len(sizes) - j) * margin] + [0.0] * (n - 1) for j, n in enumerate(sizes)]
        gains.append(MARGIN.rate(teams, ranks, scores=scores)[0][0].mu)
    order = ORDER.rate(teams, ranks)[0][0].mu
    assert 25.0 < gains[0] < gains[1] < gains[2] < order


def test_a_margin_that_disagrees_with_the_ranks_is_ignored() -> None:
    """Scores that say the loser scored more add nothing to the comparison."""
    teams = [[Rating(27, 4)], [Rating(24, 5)]]
    assert MARGIN.rate(teams, [0, 1], scores=[[1.0], [3.0]]) == ORDER.rate(teams, [0, 1])


def test_duel_shortcut_with_a_margin_equals_the_two_team_form() -> None:
    """The 1v1 shortcut applies the margin exactly as the general two-team form does."""
    teams = [[Rating(22, 4)], [Rating(27, 6)]]
    variances = MARGIN._variances(teams, None)
    for ranks, scores in (((0, 1), [4.0, 1.0]), ((1, 0), [0.0, 2.0])):
        general = MARGIN._rate_two(teams, *ranks, variances, None, scores)
        assert MARGIN.rate(teams, ranks, scores=[[s] for s in scores]) == general


def test_tied_teams_with_equal_scores_stay_symmetric_whatever_the_listing() -> None:
    """Equal priors, ranks and scores give identical posteriors in any listed order."""
    teams = [[Rating(30, 3)], [NEW], [NEW], [Rating(20, 5)]]
    ranks, scores = [0, 1, 1, 2], [[9.0], [4.0], [4.0], [1.0]]
    result = MARGIN.rate(teams, ranks, scores=scores)
    assert result[1] == result[2]
    for perm in itertools.permutations(range(4)):
        shuffled = MARGIN.rate(
            [teams[i] for i in perm], [ranks[i] for i in perm], scores=[scores[i] for i in perm]
        )
        for new, i in enumerate(perm):
            assert shuffled[new][0].mu == pytest.approx(result[i][0].mu, abs=1e-12)


def test_tied_teams_with_different_scores_are_not_pooled() -> None:
    """Beyond the tie-order limit, tied teams pool their runs only when their scores agree."""
    teams = fresh(1, 1, 1, 1, 1, 1, 1, 1)
    ranks = [0, 1, 1, 1, 1, 1, 1, 2]
    scores = [[20.0], [9.0], [9.0], [9.0], [9.0], [5.0], [7.0], [0.0]]
    result = MARGIN.rate(teams, ranks, scores=scores)
    assert result[1] == result[2] == result[3] == result[4]
    assert len({result[4][0], result[5][0], result[6][0]}) == 3


# ---------------------------------------------------------------- per-player scores


def test_the_higher_scorer_of_a_team_gains_more() -> None:
    """Teammates with equal priors are told apart by their scores, opponents too."""
    result = SCORES.rate(fresh(2, 2), [0, 1], scores=[[10.0, 2.0], [6.0, 2.0]])
    (a, b), (c, d) = result
    order = ORDER.rate(fresh(2, 2), [0, 1])
    assert a.mu > order[0][0].mu > b.mu
    assert c.mu > order[1][0].mu > d.mu
    assert all(new.sigma < old.sigma for team, base in zip(result, order) for new, old in zip(team, base))


def test_scores_are_read_per_second_played() -> None:
    """Equal score rates are equal evidence in the mean; less time played is less evidence."""
    evidence = score_evidence(
        [[25.0, 25.0], [25.0]], [[10.0, 5.0], [2.0]], [[600.0, 300.0], [600.0]], 1.0, 1.0
    )
    (full, half), (low,) = evidence
    assert full is not None and half is not None and low is not None
    assert full[0] == half[0] > low[0]
    assert half[1] == 2 * full[1]


def test_scale_and_shift_of_the_scores_do_not_matter() -> None:
    """Evidence is standardised within the match: points or points x 100 - 7, the same."""
    means = [[25.0, 30.0], [20.0, 25.0]]
    raw = score_evidence(means, [[3.0, -1.0], [0.5, 2.0]], None, 17.0, 4.0)
    moved = score_evidence(means, [[293.0, -107.0], [43.0, 193.0]], None, 17.0, 4.0)
    assert [pytest.approx(e) for row in raw for e in row] == [e for row in moved for e in row]


@pytest.mark.parametrize(
    ("scores", "seconds"),
    [
        ([[0.0, 0.0], [0.0]], None),  # absent
        ([[3.0, 3.0], [3.0]], None),  # all equal
        ([[1e308, -1e308], [1.0]], [[0.5, 1.0], [1.0]]),  # a rate overflows
    ],
)
def test_no_information_gives_no_evidence(scores, seconds) -> None:
    """Equal, absent or non-finite score rates are no evidence for anyone."""
    assert score_evidence([[25.0, 25.0], [25.0]], scores, seconds, 17.0, 17.0) == [[None, None], [None]]


def test_effects_have_no_score_and_unrated_players_drop_out() -> None:
    """Score rows without the context effects listed last, and unrated players, are handled."""
    effect = Rating(0.0, 25.0 / 3.0)
    teams = [[NEW, NEW, effect], [NEW, NEW]]
    outcome = Outcome(
        ranks=[0, 1],
        weights=[[1.0, 1.0, 1.0], [1.0, 1.0]],
        scores=[[5.0, 1.0], [3.0, 0.0]],
        seconds_played=[[0.0, 0.0], [0.0, 0.0]],
        rated=[[True, False, True], [True, True]],
    )
    result = BOTH.rate_match(teams, outcome)
    assert result[0][1] == NEW
    absent = outcome._replace(scores=[[0.0, 0.0], [0.0, 0.0]])
    (_, (c, d)), (_, (e, f)) = SCORES.rate_match(teams, outcome), SCORES.rate_match(teams, absent)
    assert c.mu > d.mu and e == f


finite = st.floats(-1e300, 1e300, allow_nan=False)
prior = st.builds(Rating, st.floats(-1e3, 1e3), st.floats(1e-3, 1e3))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(prior, finite, st.sampled_from([0.0, 1e-9, 1.0, 600.0, 1e12])), min_size=1, max_size=4
        ),
        min_size=2,
        max_size=4,
    ),
    st.data(),
)
def test_any_scores_give_finite_ratings_and_never_more_uncertainty(players, data) -> None:
    """Arbitrary (negative, huge, zero) scores and times: outputs are finite, no sigma
    exceeds the prior's, and player scores never make one exceed the order-only posterior's."""
    teams = [[p for p, _, _ in team] for team in players]
    scores = [[s for _, s, _ in team] for team in players]
    seconds = [[t for _, _, t in team] for team in players]
    ranks = data.draw(st.lists(st.integers(0, 2), min_size=len(teams), max_size=len(teams)))
    order = TrueSkill(tau=0.0).rate(teams, ranks)
    for model in (
        TrueSkill(tau=0.0, player_scores=True, margin_scale=3.0),
        TrueSkill(tau=0.0, player_scores=True),
    ):
        result = model.rate(teams, ranks, scores=scores, seconds_played=seconds)
        for team, base, priors in zip(result, order, teams):
            for new, old, before in zip(team, base, priors):
                assert math.isfinite(new.mu) and new.sigma is not None and math.isfinite(new.sigma)
                assert new.sigma <= before.sigma * (1 + 1e-12)
                if model.margin_scale == 0.0:
                    assert new.sigma <= old.sigma
