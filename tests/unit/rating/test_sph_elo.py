"""SPH Elo (ZoneStats *Player Rating*, equations 1–6): worked cases by hand, the decisions
on the seed's open edges, and properties."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.registry import create_model, model_parameters
from stream_rater.rating.sph_elo import SphElo

SPH = SphElo()


def play(ratings, scores, minutes, model: SphElo = SPH) -> list[list[float]]:
    """Rate one game given per-team lists of ratings, scores and minutes; the rating changes."""
    teams = [[Rating(r) for r in team] for team in ratings]
    seconds = [[m * 60.0 for m in team] for team in minutes]
    result = model.rate(teams, scores=scores, seconds_played=seconds)
    return [[new.mu - old.mu for new, old in zip(nt, ot)] for nt, ot in zip(result, teams)]


def predicted(me: float, opp: float) -> float:
    """Eq. 1 as printed in the seed."""
    return 1.0 / (1.0 + math.exp((opp - me) / 120.0))


# --- worked cases ------------------------------------------------------------------------


def test_defaults_and_initial_rating():
    """Defaults are the seed's T = 120, GAME_MULT = 2, MAX_GAME_LENGTH = 20 and new players start at 500."""
    assert model_parameters("sph-elo") == {
        "T": 120.0,
        "game_mult": 2.0,
        "max_game_length": 20.0,
        "initial": 500.0,
    }
    assert SPH.initial() == Rating(500.0, None)
    assert isinstance(create_model("sph-elo", {"T": 200}), SphElo)
    assert SphElo.needs_scores and not SphElo.supports_effects


def test_issue_example_by_hand():
    """500 (12 in 15 min, SPH 48) beats 530 (9 in 20 min, SPH 27): ±(1 − P)·2·15 with P = 1/(1 + e^(30/120))."""
    result = SPH.rate(
        [[Rating(500)], [Rating(530)]], scores=[[12.0], [9.0]], seconds_played=[[900.0], [1200.0]]
    )
    gain = (1.0 - predicted(500.0, 530.0)) * 2.0 * 15.0
    assert gain == pytest.approx(16.8653, abs=1e-4)
    assert result == [
        [Rating(pytest.approx(500.0 + gain), None)],
        [Rating(pytest.approx(530.0 - gain), None)],
    ]


def test_equal_players_equal_sph_do_not_change():
    """Seed assumption: if two equal players tie, neither rating changes."""
    assert play([[500.0], [500.0]], [[10.0], [10.0]], [[12.0], [12.0]]) == [[0.0], [0.0]]


def test_equal_ratings_decisive_gives_half_of_game_mult_times_minutes():
    """Equal ratings, decisive: the winner gains 0.5 × GAME_MULT × shared minutes and the loser loses it."""
    assert play([[700.0], [700.0]], [[10.0], [3.0]], [[12.0], [12.0]]) == [[12.0], [-12.0]]


def test_favourite_winning_as_predicted_gains_little():
    """A win the ratings predicted almost surely moves the ratings almost nothing (eq. 2 feedback)."""
    (a,), (b,) = play([[2000.0], [500.0]], [[10.0], [3.0]], [[20.0], [20.0]])
    assert 0.0 < a < 0.01 and b == -a


def test_time_is_min_of_max_game_length_and_both_times():
    """Eq. 3: the pair's minutes are min(MAX_GAME_LENGTH, mine, the opponent's)."""
    assert play([[500.0], [500.0]], [[30.0], [10.0]], [[30.0], [25.0]]) == [[20.0], [-20.0]]
    assert play([[500.0], [500.0]], [[30.0], [5.0]], [[30.0], [7.5]]) == [[7.5], [-7.5]]


def test_score_per_hour_not_score_decides():
    """Eq. 2 compares score per hour: 10 points in 5 minutes beats 30 points in 20 minutes."""
    (a,), (b,) = play([[500.0], [500.0]], [[10.0], [30.0]], [[5.0], [20.0]])
    assert a == 5.0 and b == -5.0


def test_team_mates_are_not_compared():
    """Team games: players are compared only with players of the opposing team (by hand)."""
    # SPH per 10 minutes: A 4, B 2 | C 3, D 1 — A beats C and D, B loses to C and beats D
    result = play([[500.0, 500.0], [500.0, 500.0]], [[4.0, 2.0], [3.0, 1.0]], [[10.0, 10.0], [10.0, 10.0]])
    assert result == [[20.0, 0.0], [0.0, -20.0]]


def test_player_alone_on_a_team_faces_all_opponents():
    """A player alone on a team in a team game is compared with every player of the other team."""
    result = play([[500.0, 500.0], [500.0]], [[1.0, 3.0], [2.0]], [[10.0, 10.0], [10.0]])
    assert result == [[-10.0, 10.0], [0.0]]


def test_free_for_all_compares_everybody():
    """Free-for-all (one player per team): every pair of players is compared and the offsets summed (eq. 4)."""
    ratings = [[480.0], [500.0], [540.0]]
    result = play(ratings, [[9.0], [6.0], [3.0]], [[10.0], [15.0], [20.0]])
    a = (1 - predicted(480, 500)) * 20 + (1 - predicted(480, 540)) * 20
    b = (0 - predicted(500, 480)) * 20 + (1 - predicted(500, 540)) * 30
    c = (0 - predicted(540, 480)) * 20 + (0 - predicted(540, 500)) * 30
    assert [x for (x,) in result] == pytest.approx([a, b, c])


def test_cap_scales_everybody_by_the_largest_offset_player():
    """Eqs. 5–6: 10-minute A beats four equal 20-minute players: offset 40 > 2 × 10, so everybody is halved."""
    result = play(
        [[500.0]] * 5, [[10.0], [1.0], [1.0], [1.0], [1.0]], [[10.0], [20.0], [20.0], [20.0], [20.0]]
    )
    assert result == [[20.0], [-5.0], [-5.0], [-5.0], [-5.0]]


def test_cap_uses_full_time_in_game_not_max_game_length():
    """Eq. 5 uses the capping player's whole time (60 min), not MAX_GAME_LENGTH: offset 140 scales by 120/140."""
    result = play([[500.0]] * 8, [[10.0]] + [[1.0]] * 7, [[60.0]] * 8)
    assert result[0][0] == pytest.approx(120.0)
    assert [x for (x,) in result[1:]] == pytest.approx([-20.0 * 120.0 / 140.0] * 7)


def test_largest_offset_tie_uses_shortest_time():
    """Players tied for the largest |offset| with different times: the shortest time sets the (strictest) scale."""
    # equal ratings; SPH A 0 (5 min) < B = C 60/h (5 min) < D 120/h (10 min): offsets −15, 0, 0, +15
    result = play([[500.0]] * 4, [[0.0], [5.0], [5.0], [20.0]], [[5.0], [5.0], [5.0], [10.0]])
    assert [x for (x,) in result] == pytest.approx([-10.0, 0.0, 0.0, 10.0])  # scale 2·5/15, not 2·10/15 → 1
    assert SPH.cap_scale([15.0, -15.0 * (1 + 1e-14), 0.0], [10.0, 5.0, 1.0]) == pytest.approx(10.0 / 15.0)


def test_only_the_largest_offset_player_is_capped():
    """As in the seed, only the largest-|offset| player is checked: a 1-minute player may still move more than 2 points."""
    result = play([[300.0], [700.0], [700.0]], [[5.0], [40.0], [20.0]], [[1.0], [20.0], [20.0]])
    assert result[0][0] > 2.0 * 1.0
    assert sum(x for (x,) in result) == pytest.approx(0.0, abs=1e-12)


# --- open edges --------------------------------------------------------------------------


def test_zero_time_player_neither_gains_nor_gives():
    """A player with zero seconds in the game (SPH undefined) keeps its rating and changes nobody else's."""
    with_idle = play([[500.0], [520.0], [480.0]], [[0.0], [10.0], [5.0]], [[0.0], [10.0], [10.0]])
    without = play([[520.0], [480.0]], [[10.0], [5.0]], [[10.0], [10.0]])
    assert with_idle[0] == [0.0]
    assert with_idle[1:] == without
    assert play([[500.0], [600.0]], [[3.0], [0.0]], [[0.0], [0.0]]) == [[0.0], [0.0]]


def test_all_offsets_zero_changes_nothing():
    """All offsets zero (equal players with equal SPH, or a single team) leaves every rating unchanged."""
    assert play([[500.0], [500.0], [500.0]], [[4.0], [8.0], [2.0]], [[10.0], [20.0], [5.0]]) == [
        [0.0],
        [0.0],
        [0.0],
    ]
    assert play([[500.0, 900.0]], [[4.0, 1.0]], [[10.0, 10.0]]) == [[0.0, 0.0]]


def test_sph_equality_is_exact_up_to_input_rounding():
    """Equal SPH draw: 12 in 15 min vs 16 in 20 min, and 0.3 points in 3 s vs 0.1 in 1 s."""
    assert play([[500.0], [500.0]], [[12.0], [16.0]], [[15.0], [20.0]]) == [[0.0], [0.0]]
    assert play([[500.0], [500.0]], [[0.3], [0.1]], [[3 / 60], [1 / 60]]) == [[0.0], [0.0]]
    assert play([[500.0], [500.0]], [[1e300], [1e300]], [[1e6], [1e6]]) == [[0.0], [0.0]]


def test_ranks_are_ignored():
    """Ranks play no part: only the SPH comparison decides each pair."""
    teams = [[Rating(500.0)], [Rating(510.0)]]
    kwargs = {"scores": [[5.0], [9.0]], "seconds_played": [[600.0], [600.0]]}
    a = SPH.rate_match(teams, Outcome(ranks=[1, 2], **kwargs))
    b = SPH.rate_match(teams, Outcome(ranks=[2, 1], **kwargs))
    assert a == b and a[1][0].mu > 510.0


@pytest.mark.parametrize(
    "scores, seconds",
    [
        (None, [[60.0], [60.0]]),
        ([[1.0], [2.0]], None),
        ([[1.0], [2.0]], [[60.0], [-1.0]]),
        ([[1.0], [math.nan]], [[60.0], [60.0]]),
        ([[1.0], [2.0]], [[60.0], [math.inf]]),
        ([[1.0]], [[60.0], [60.0]]),
    ],
)
def test_invalid_inputs_rejected(scores, seconds):
    """Missing, negative, non-finite or mis-shaped scores/seconds are a ValueError."""
    with pytest.raises(ValueError):
        SPH.rate_match(
            [[Rating(500.0)], [Rating(500.0)]], Outcome(ranks=[1, 2], scores=scores, seconds_played=seconds)
        )


def test_unrated_players_untouched():
    """Players with rated=False keep their rating and are compared with nobody (via rate_match)."""
    teams = [[Rating(500.0), Rating(700.0)], [Rating(450.0)], [Rating(600.0)]]
    scores = [[5.0, 50.0], [3.0], [40.0]]
    seconds = [[600.0, 600.0], [600.0], [600.0]]
    result = SPH.rate(teams, scores, seconds, rated=[[True, False], [True], [False]])
    assert result[0][1] == teams[0][1] and result[2][0] == teams[2][0]
    alone = SPH.rate([[teams[0][0]], [teams[1][0]]], [[5.0], [3.0]], [[600.0], [600.0]])
    assert [result[0][0], result[1][0]] == [alone[0][0], alone[1][0]]


# --- properties --------------------------------------------------------------------------


@st.composite
def games(draw, max_teams: int = 6, max_size: int = 3, extreme: bool = False):
    n_teams = draw(st.integers(2, max_teams))
    sizes = [draw(st.integers(1, max_size)) for _ in range(n_teams)]
    if extreme:
        rating = st.sampled_from([0.0, 500.0, 1e6, -1e6, 999999.5])
        minutes = st.sampled_from([0.0, 1e-6, 0.5, 20.0, 600.0, 1e5])
        score = st.sampled_from([0.0, -5.0, 1e9, 3.0, 1e300])
    else:
        rating = st.floats(100.0, 900.0)
        minutes = st.sampled_from([0.0, 1.0, 5.0, 10.0, 15.0, 20.0, 35.0, 60.0])
        score = st.integers(-3, 30).map(float)
    ratings = [[draw(rating) for _ in range(s)] for s in sizes]
    scores = [[draw(score) for _ in range(s)] for s in sizes]
    mins = [[draw(minutes) for _ in range(s)] for s in sizes]
    return ratings, scores, mins


@settings(max_examples=60, deadline=None)
@given(game=games())
def test_zero_sum(game):
    """SPH Elo is zero-sum for any team sizes: pair terms cancel and one common scale applies."""
    changes = play(*game)
    assert math.fsum(x for t in changes for x in t) == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(game=games())
def test_cap_bounds_every_change_by_capping_players_minutes(game):
    """After eq. 6 no |offset| exceeds GAME_MULT × the capping player's minutes, and a binding cap is met exactly."""
    ratings, scores, mins = game
    changes = [x for t in play(ratings, scores, mins) for x in t]
    teams = [[Rating(r) for r in t] for t in ratings]
    outcome = Outcome(
        ranks=[0] * len(teams), scores=scores, seconds_played=[[m * 60 for m in t] for t in mins]
    )
    offsets = SPH.offsets(teams, outcome)
    largest = max(abs(o) for o in offsets)
    if largest == 0.0:
        assert all(x == 0.0 for x in changes)
        return
    flat_minutes = [m for t in mins for m in t]
    cap_minutes = min(m for o, m in zip(offsets, flat_minutes) if abs(o) >= largest * (1 - 1e-12))
    bound = 2.0 * cap_minutes
    assert max(abs(x) for x in changes) <= bound * (1 + 1e-12)
    if largest > bound:
        assert max(abs(x) for x in changes) == pytest.approx(bound)


@settings(max_examples=60, deadline=None)
@given(game=games(), seed=st.integers(0, 2**32 - 1))
def test_relabelling_changes_nothing(game, seed):
    """Listing the teams, or the players inside a team, in another order gives the same changes."""
    ratings, scores, mins = game
    rng = random.Random(seed)
    order = list(range(len(ratings)))
    rng.shuffle(order)
    inner = [rng.sample(range(len(t)), len(t)) for t in ratings]

    def shuffle(per_player):
        return [[per_player[t][i] for i in inner[t]] for t in order]

    base = play(ratings, scores, mins)
    moved = play(shuffle(ratings), shuffle(scores), shuffle(mins))
    assert moved == [[pytest.approx(x, abs=1e-9) for x in t] for t in shuffle(base)]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 8),
    rating=st.floats(0.0, 1000.0),
    score=st.integers(0, 50),
    minutes=st.sampled_from([1.0, 10.0, 20.0, 40.0]),
)
def test_symmetric_ties_change_nothing(n, rating, score, minutes):
    """Equal players with equal score and time all tie and keep their ratings."""
    changes = play([[rating]] * n, [[float(score)]] * n, [[minutes]] * n)
    assert changes == [[0.0]] * n


@settings(max_examples=60, deadline=None)
@given(
    r_a=st.floats(0.0, 1000.0),
    r_b=st.floats(0.0, 1000.0),
    m_a=st.sampled_from([1.0, 5.0, 20.0, 45.0]),
    m_b=st.sampled_from([1.0, 5.0, 20.0, 45.0]),
)
def test_winning_never_worse_than_losing_one_on_one(r_a, r_b, m_a, m_b):
    """One-on-one, the better SPH ends no lower than a draw, and a draw no lower than the worse SPH."""
    outcomes = [play([[r_a], [r_b]], [[s * m_a], [m_b]], [[m_a], [m_b]])[0][0] for s in (2.0, 1.0, 0.5)]
    assert outcomes[0] >= outcomes[1] >= outcomes[2]


@settings(max_examples=40, deadline=None)
@given(game=games(max_teams=8, extreme=True))
def test_extreme_inputs_stay_finite(game):
    """Rating gaps of 1e6, scores of 1e300 and times from 0 to 1e5 minutes give finite, zero-sum changes."""
    changes = [x for t in play(*game) for x in t]
    assert all(math.isfinite(x) for x in changes)
    assert math.fsum(changes) == pytest.approx(0.0, abs=1e-6 * max(1.0, max(abs(x) for x in changes)))


def test_large_free_for_all_finite():
    """A 120-player free-for-all with huge rating gaps stays finite and zero-sum."""
    rng = random.Random(3)
    n = 120
    ratings = [[rng.choice([-1e6, 0.0, 500.0, 1e6]) + rng.uniform(-50, 50)] for _ in range(n)]
    changes = play(
        ratings, [[float(rng.randint(0, 40))] for _ in range(n)], [[rng.uniform(0, 60)] for _ in range(n)]
    )
    flat = [x for (x,) in changes]
    assert all(math.isfinite(x) for x in flat)
    assert math.fsum(flat) == pytest.approx(0.0, abs=1e-6)
    probs = SPH.win_probabilities([[Rating(r)] for (r,) in ratings])
    assert math.fsum(probs) == pytest.approx(1.0) and all(0.0 <= p <= 1.0 for p in probs)


def test_win_probabilities_one_on_one_is_equation_one():
    """One-on-one, P(first) is eq. 1's predicted outcome."""
    probs = SPH.win_probabilities([[Rating(500.0)], [Rating(530.0)]])
    assert probs == pytest.approx([predicted(500.0, 530.0), predicted(530.0, 500.0)])
