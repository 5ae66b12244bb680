"""TrueSkill: known answers, agreement with the ``trueskill`` package, properties, robustness."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.registry import create_model, model_parameters
from stream_rater.rating.trueskill import TrueSkill

GOLDEN = json.loads((Path(__file__).parent / "golden" / "trueskill_cases.json").read_text())
DEFAULT = TrueSkill()
NEW = Rating(25.0, 25.0 / 3.0)


def flat(result: list[list[Rating]]) -> list[float]:
    """mu, sigma, mu, sigma, ... of every player, team by team."""
    return [x for team in result for r in team for x in (r.mu, r.sigma)]


def unpair(pairs) -> list[float]:
    """(mu, sigma) pairs flattened like `flat`."""
    return [x for pair in pairs for x in pair]


def fresh(*sizes: int) -> list[list[Rating]]:
    return [[NEW] * size for size in sizes]


# ---------------------------------------------------------------- known answers

# Published answers of the trueskill package's test-suite (the Moserware values), default
# environment, 3 decimals. Matches with tied teams are checked separately (ties here are
# symmetrised, the package's chain is not).
KNOWN = [
    (fresh(1, 1), [0, 1], [(29.396, 7.171), (20.604, 7.171)]),
    (fresh(1, 1), [0, 0], [(25.000, 6.458), (25.000, 6.458)]),
    (fresh(2, 2), [0, 1], [(28.108, 7.774)] * 2 + [(21.892, 7.774)] * 2),
    (fresh(2, 2), [0, 0], [(25.000, 7.455)] * 4),
    (fresh(4, 4), [0, 1], [(27.198, 8.059)] * 4 + [(22.802, 8.059)] * 4),
    (fresh(1, 2), [0, 1], [(33.730, 7.317)] + [(16.270, 7.317)] * 2),
    (fresh(1, 2), [0, 0], [(31.660, 7.138)] + [(18.340, 7.138)] * 2),
    (fresh(1, 3), [0, 1], [(36.337, 7.527)] + [(13.663, 7.527)] * 3),
    (fresh(1, 7), [0, 1], [(40.582, 7.917)] + [(9.418, 7.917)] * 7),
    (fresh(1, 1, 1), [0, 1, 2], [(31.675, 6.656), (25.000, 6.208), (18.325, 6.656)]),
    (fresh(1, 1, 1), [2, 1, 0], [(18.325, 6.656), (25.000, 6.208), (31.675, 6.656)]),
    (fresh(1, 1, 1, 1), [0, 1, 2, 3], [(33.207, 6.348), (27.401, 5.787), (22.599, 5.787), (16.793, 6.348)]),
    (
        fresh(1, 1, 1, 1, 1),
        [0, 1, 2, 3, 4],
        [(34.363, 6.136), (29.058, 5.536), (25.000, 5.420), (20.942, 5.536), (15.637, 6.136)],
    ),
    (
        fresh(*[1] * 16),
        list(range(16)),
        [
            (40.539, 5.276),
            (36.810, 4.711),
            (34.347, 4.524),
            (32.336, 4.433),
            (30.550, 4.380),
            (28.893, 4.349),
            (27.310, 4.330),
            (25.766, 4.322),
            (24.234, 4.322),
            (22.690, 4.330),
            (21.107, 4.349),
            (19.450, 4.380),
            (17.664, 4.433),
            (15.653, 4.524),
            (13.190, 4.711),
            (9.461, 5.276),
        ],
    ),
    ([[NEW], [Rating(50, 12.5)]], [0, 0], [(31.662, 7.137), (35.010, 7.910)]),
    (
        [[Rating(20, 8), Rating(25, 6)], [Rating(35, 7), Rating(40, 5)]],
        [0, 1],
        [(29.698, 7.008), (30.455, 5.594), (27.575, 6.346), (36.211, 4.768)],
    ),
    (
        [[Rating(28, 7), Rating(27, 6), Rating(26, 5)], [Rating(30, 4), Rating(31, 3)]],
        [0, 1],
        [(28.658, 6.770), (27.484, 5.856), (26.336, 4.917), (29.785, 3.958), (30.879, 2.983)],
    ),
    (
        [[Rating(28, 7), Rating(27, 6), Rating(26, 5)], [Rating(30, 4), Rating(31, 3)]],
        [1, 0],
        [(21.840, 6.314), (22.474, 5.575), (22.857, 4.757), (32.012, 3.877), (32.132, 2.949)],
    ),
    (
        [[Rating(10 + 5 * i, 8 - i)] for i in range(8)],
        list(range(8)),
        [
            (35.135, 4.506),
            (32.585, 4.037),
            (31.329, 3.756),
            (30.984, 3.453),
            (31.751, 3.064),
            (34.051, 2.541),
            (38.263, 1.849),
            (44.118, 0.983),
        ],
    ),
]


@pytest.mark.parametrize(("teams", "ranks", "expected"), KNOWN)
def test_published_known_answers(teams, ranks, expected) -> None:
    """Every published answer of the trueskill package's test-suite is reproduced to 1e-3."""
    assert flat(DEFAULT.rate(teams, ranks)) == pytest.approx(unpair(expected), abs=1.5e-3)


def test_custom_draw_probability_known_answer() -> None:
    """With draw probability 0.5 a 1v1 win gives the package's 30.267 / 19.733, sigma 7.077."""
    result = TrueSkill(draw_probability=0.5).rate(fresh(1, 1), [0, 1])
    assert flat(result) == pytest.approx([30.267, 7.077, 19.733, 7.077], abs=1.5e-3)


@pytest.mark.parametrize(
    ("teams", "expected"),
    [
        (fresh(1, 1), 0.447),
        (fresh(2, 2), 0.447),
        (fresh(1, 2), 0.135),
        (fresh(1, 3), 0.012),
        (fresh(1, 1, 1), 0.200),
        (fresh(1, 1, 1, 1), 0.089),
        (fresh(*[1] * 5), 0.040),
        (fresh(*[1] * 8), 0.004),
        ([[NEW], [Rating(50, 12.5)]], 0.110),
        ([[Rating(20, 8), Rating(25, 6)], [Rating(35, 7), Rating(40, 5)]], 0.084),
        (
            [
                [Rating(40, 4), Rating(45, 3)],
                [Rating(20, 7), Rating(19, 6), Rating(30, 9), Rating(10, 4)],
                [Rating(50, 5), Rating(30, 2)],
            ],
            0.367,
        ),
    ],
)
def test_published_match_qualities(teams, expected) -> None:
    """quality reproduces the package's published match qualities to 1e-3."""
    assert DEFAULT.quality(teams) == pytest.approx(expected, abs=1e-3)


def test_quality_is_equation_7_for_two_players() -> None:
    """For two single players quality is exactly the paper's eq. (7)."""
    a, b = Rating(27.0, 4.0), Rating(22.0, 6.0)
    denom = 2 * DEFAULT.beta**2 + a.sigma**2 + b.sigma**2
    spread = 2 * DEFAULT.beta**2
    expected = math.sqrt(spread / denom) * math.exp(-((a.mu - b.mu) ** 2) / (2 * denom))
    assert DEFAULT.quality([[a], [b]]) == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------- the trueskill package


def golden(name: str):
    return [pytest.param(case, id=f"{name}-{i}") for i, case in enumerate(GOLDEN[name])]


def rate_case(case: dict) -> tuple[TrueSkill, list[list[Rating]], list[list[Rating]]]:
    model = TrueSkill(**case["params"])
    teams = [[Rating(mu, sigma) for mu, sigma in team] for team in case["teams"]]
    return model, teams, model.rate(teams, case["ranks"], case["weights"])


@pytest.mark.parametrize("case", golden("two_teams"))
def test_two_teams_equal_the_trueskill_package(case: dict) -> None:
    """Two-team results (wins, draws, weights, other scales) equal the package to 1e-6."""
    model, teams, result = rate_case(case)
    expected = unpair(x for team in case["expected"] for x in team)
    assert flat(result) == pytest.approx(expected, abs=1e-6)
    assert model.quality(teams, case["weights"]) == pytest.approx(case["quality"], abs=1e-9)


@pytest.mark.parametrize("case", golden("many_teams") + golden("many_teams_tied"))
def test_many_teams_equal_the_trueskill_package(case: dict) -> None:
    """N-team results equal the package to 1e-3 of sigma0 (ties: its average over tie orders)."""
    model, teams, result = rate_case(case)
    expected = unpair(x for team in case["expected"] for x in team)
    assert flat(result) == pytest.approx(expected, abs=1e-3 * model.sigma)
    assert model.quality(teams, case["weights"]) == pytest.approx(case["quality"], abs=1e-9)


def test_package_asymmetric_tie_is_symmetrised() -> None:
    """3 teams of 2 new players, ranks [0, 1, 1]: both tied teams get one posterior (~23.194)."""
    result = DEFAULT.rate(fresh(2, 2, 2), [0, 1, 1])
    assert result[1] == result[2]
    assert result[1][0] == result[1][1]
    assert result[1][0].mu == pytest.approx(23.1935, abs=1e-3)  # package: 23.192 and 23.195


def test_all_drawn_free_for_all_is_symmetric() -> None:
    """Eight new players all drawing (beyond the all-orders budget) end up identical at mu 25."""
    result = DEFAULT.rate(fresh(*[1] * 8), [0] * 8)
    assert len({r for team in result for r in team}) == 1
    assert result[0][0].mu == pytest.approx(25.0, abs=1e-9)
    assert result[0][0].sigma == pytest.approx(4.58, abs=0.01)  # package: 4.573 ... 4.592


# ---------------------------------------------------------------- properties

ratings = st.builds(Rating, st.floats(-50, 100), st.floats(0.05, 15))


@st.composite
def matches(draw, max_teams: int = 5, max_size: int = 3, weighted: bool = True):
    n_teams = draw(st.integers(2, max_teams))
    teams = [draw(st.lists(ratings, min_size=1, max_size=max_size)) for _ in range(n_teams)]
    ranks = draw(st.lists(st.integers(0, n_teams - 1), min_size=n_teams, max_size=n_teams))
    weights = None
    if weighted and draw(st.booleans()):
        weights = [draw(st.lists(st.floats(0.01, 1.0), min_size=len(t), max_size=len(t))) for t in teams]
    return teams, ranks, weights


@settings(max_examples=60, deadline=None)
@given(matches())
def test_sigma_never_grows_without_dynamics(match) -> None:
    """With tau = 0 and no time term no player's sigma grows, whatever the outcome."""
    teams, ranks, weights = match
    result = TrueSkill(tau=0.0).rate(teams, ranks, weights)
    for before, after in zip(teams, result):
        for old, new in zip(before, after):
            assert new.sigma <= old.sigma * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(matches(), st.randoms(use_true_random=False))
def test_relabelling_players_and_teams_changes_nothing(match, rnd: random.Random) -> None:
    """Listing the teams and their players in another order gives the same posteriors."""
    teams, ranks, weights = match
    result = DEFAULT.rate(teams, ranks, weights)
    team_order = list(range(len(teams)))
    rnd.shuffle(team_order)
    player_orders = [rnd.sample(range(len(t)), len(t)) for t in teams]

    def relabel(rows):
        return [[rows[j][i] for i in player_orders[j]] for j in team_order]

    new_weights = None if weights is None else relabel(weights)
    shuffled = DEFAULT.rate(relabel(teams), [ranks[j] for j in team_order], new_weights)
    for pos, j in enumerate(team_order):
        for k, i in enumerate(player_orders[j]):
            got, want = shuffled[pos][k], result[j][i]
            assert got.mu == pytest.approx(want.mu, rel=1e-9, abs=1e-9)
            assert got.sigma == pytest.approx(want.sigma, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(ratings, min_size=1, max_size=3), st.integers(2, 4), matches(max_teams=3))
def test_tied_equal_teams_get_identical_posteriors(team, copies, others) -> None:
    """Teams with equal priors and equal rank get exactly equal posteriors, wherever they sit."""
    other_teams, other_ranks, _ = others
    teams = [list(team) for _ in range(copies)] + other_teams
    ranks = [1] * copies + [2 * r for r in other_ranks]  # copies tie among themselves
    result = DEFAULT.rate(teams, ranks)
    assert all(result[c] == result[0] for c in range(copies))


@settings(max_examples=60, deadline=None)
@given(matches(max_teams=4, weighted=False), st.data())
def test_a_better_rank_never_gives_a_lower_mu(match, data) -> None:
    """Moving one team up the ranking never lowers any of its players' posterior mu."""
    teams, ranks, _ = match
    j = data.draw(st.integers(0, len(teams) - 1))
    better = list(ranks)
    better[j] = data.draw(st.integers(-1, ranks[j]))
    low, high = DEFAULT.rate(teams, ranks), DEFAULT.rate(teams, better)
    for worse_off, better_off in zip(low[j], high[j]):
        assert better_off.mu >= worse_off.mu - 1e-9


def test_win_draw_loss_order_for_two_players() -> None:
    """For one prior pair, mu after a win > after a draw > after a loss."""
    a, b = Rating(27, 5), Rating(24, 3)
    win, draw, loss = (DEFAULT.rate([[a], [b]], r)[0][0].mu for r in ([0, 1], [0, 0], [1, 0]))
    assert win > draw > loss


@settings(max_examples=60, deadline=None)
@given(matches())
def test_quality_lies_in_unit_interval_and_ignores_order(match) -> None:
    """quality is in [0, 1] and does not depend on the order the teams are listed in."""
    teams, _, weights = match
    q = DEFAULT.quality(teams, weights)
    assert 0.0 <= q <= 1.0
    reversed_weights = None if weights is None else weights[::-1]
    assert DEFAULT.quality(teams[::-1], reversed_weights) == pytest.approx(q, rel=1e-9, abs=1e-300)


# ---------------------------------------------------------------- win probabilities


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(ratings, min_size=1, max_size=2), min_size=2, max_size=6))
def test_win_probabilities_sum_to_one(teams) -> None:
    """win_probabilities returns one probability in [0, 1] per team, summing to 1."""
    probs = DEFAULT.win_probabilities(teams)
    assert len(probs) == len(teams)
    assert all(0.0 <= p <= 1.0 for p in probs)
    assert math.fsum(probs) == pytest.approx(1.0, abs=1e-12)


def test_two_team_win_probability_is_closed_form() -> None:
    """Two teams: P = Phi(dmu / sqrt(sum sigma^2 + n (beta^2 + tau^2)))."""
    teams = [[Rating(30, 4), Rating(20, 6)], [Rating(22, 3)]]
    spread = 16 + 36 + 9 + 3 * (DEFAULT.beta**2 + DEFAULT.tau**2)
    z = 28 / math.sqrt(spread)
    assert DEFAULT.win_probabilities(teams)[0] == pytest.approx(0.5 * math.erfc(-z / math.sqrt(2)))


def test_hopeless_third_team_leaves_the_two_team_answer() -> None:
    """Adding a team that cannot win leaves the other two with their two-team probabilities."""
    a, b = [Rating(30, 4)], [Rating(26, 7)]
    two = DEFAULT.win_probabilities([a, b])
    three = DEFAULT.win_probabilities([a, b, [Rating(-1e6, 1.0)]])
    assert three[:2] == pytest.approx(two, abs=1e-9)
    assert three[2] == pytest.approx(0.0, abs=1e-12)


def test_win_probabilities_match_monte_carlo() -> None:
    """Four uneven teams: probabilities agree with 400k simulated matches within 5 s.e."""
    teams = [[Rating(25, 8)], [Rating(30, 2), Rating(-3, 1)], [Rating(29, 5)], [Rating(20, 1)]]
    probs = DEFAULT.win_probabilities(teams)
    rng = np.random.default_rng(7)
    n = 400_000
    extra = DEFAULT.beta**2 + DEFAULT.tau**2
    perf = np.stack([sum(rng.normal(r.mu, math.sqrt(r.sigma**2 + extra), n) for r in team) for team in teams])
    freq = np.bincount(perf.argmax(axis=0), minlength=len(teams)) / n
    for p, f in zip(probs, freq):
        assert abs(p - f) < 5 * math.sqrt(p * (1 - p) / n) + 1e-9


def test_win_probabilities_survive_huge_gaps() -> None:
    """A 1e6 gap gives probabilities 1 and 0, not NaN."""
    probs = DEFAULT.win_probabilities([[Rating(1e6, 1e-6)], [Rating(0, 1e-6)], [Rating(5, 8)]])
    assert probs == pytest.approx([1.0, 0.0, 0.0], abs=1e-12)


# ---------------------------------------------------------------- dynamics

DAY = 86400.0


def test_tau_is_added_before_the_update() -> None:
    """A loser's sigma equals a tau = 0 loser's sigma with sigma^2 + tau^2 as prior."""
    a, b = Rating(25, 3), Rating(25, 3)
    with_tau = TrueSkill(tau=1.0).rate([[a], [b]], [0, 1])
    widened = Rating(25, math.sqrt(10.0))
    without = TrueSkill(tau=0.0).rate([[widened], [widened]], [0, 1])
    assert flat(with_tau) == pytest.approx(flat(without), rel=1e-12)


def test_tau_zero_means_no_dynamics() -> None:
    """tau = 0 is taken literally: equal to a prior with no added variance."""
    model = TrueSkill(tau=0.0, draw_probability=0.0)
    assert model.rate([[Rating(25, 1e-3)], [Rating(25, 1e-3)]], [0, 1])[0][0].sigma < 1e-3


def test_time_term_scales_with_elapsed_time_in_the_unit() -> None:
    """sigma^2 grows by time_tau^2 per time_unit elapsed: 2 days at 1/day equal 2 * 86400 s."""
    teams = [[Rating(25, 2)], [Rating(25, 2)]]
    days = TrueSkill(tau=0.0, time_tau=1.0, time_unit="days")
    seconds = TrueSkill(tau=0.0, time_tau=1.0 / math.sqrt(DAY), time_unit="seconds")
    numeric = TrueSkill(tau=0.0, time_tau=1.0, time_unit=DAY)
    plain = TrueSkill(tau=0.0)
    expected = plain.rate([[Rating(25, math.sqrt(6))], [Rating(25, 2)]], [0, 1])
    for model in (days, seconds, numeric):
        got = model.rate(teams, [0, 1], elapsed=[[2 * DAY], [None]])
        assert flat(got) == pytest.approx(flat(expected), rel=1e-12)


def test_years_are_julian() -> None:
    """time_unit "years" is 365.25 days."""
    years = TrueSkill(tau=0.0, time_tau=1.0, time_unit="years")
    days = TrueSkill(tau=0.0, time_tau=1.0 / math.sqrt(365.25), time_unit="days")
    teams = [[Rating(25, 1)], [Rating(20, 1)]]
    elapsed = [[400 * DAY], [30 * DAY]]
    assert flat(years.rate(teams, [1, 0], elapsed=elapsed)) == pytest.approx(
        flat(days.rate(teams, [1, 0], elapsed=elapsed)), rel=1e-12
    )


def test_time_term_is_capped_at_sigma0_then_tau_is_added() -> None:
    """A long absence raises sigma to sigma0 at most; tau^2 comes on top of the cap."""
    model = TrueSkill(tau=0.5, time_tau=1.0, time_unit="days")
    capped = model.rate([[Rating(25, 2)], [Rating(25, 2)]], [0, 0], elapsed=[[1e6 * DAY], [None]])
    sigma0_plus_tau = Rating(25, math.sqrt(model.sigma**2 + 0.25))
    reference = TrueSkill(tau=0.0).rate([[sigma0_plus_tau], [Rating(25, math.sqrt(4.25))]], [0, 0])
    assert flat(capped) == pytest.approx(flat(reference), rel=1e-12)


def test_time_term_never_lowers_a_sigma_above_the_cap() -> None:
    """A sigma already above sigma0 is left as it is by the time term."""
    model = TrueSkill(tau=0.0, time_tau=1.0)
    wide = [[Rating(25, 20)], [Rating(25, 2)]]
    assert (
        model.rate(wide, [0, 1], elapsed=[[5 * DAY], [5 * DAY]])[0]
        == model.rate([[Rating(25, 20)], [Rating(25, math.sqrt(9))]], [0, 1])[0]
    )


def test_first_match_has_no_time_term() -> None:
    """elapsed None (a first match) and a missing elapsed list add no time variance."""
    model = TrueSkill(time_tau=1.0)
    teams = [[Rating(25, 2)], [Rating(25, 2)]]
    assert model.rate(teams, [0, 1], elapsed=[[None], [None]]) == model.rate(teams, [0, 1])


# ---------------------------------------------------------------- robustness


@pytest.mark.parametrize("gap", [0.0, 1e3, 1e6, -1e6])
@pytest.mark.parametrize("sigma", [1e-6, 1.0, 8.3])
@pytest.mark.parametrize("sizes", [(1, 1), (3, 3), (1, 1, 1), (2, 2, 2), (100, 1), (1,) * 9])
@pytest.mark.parametrize("outcome", ["ordered", "reversed", "drawn", "pairs"])
def test_extreme_inputs_give_finite_ratings(gap, sigma, sizes, outcome) -> None:
    """Gaps up to 1e6, sigma down to 1e-6, 100-player teams, tiny weights: always finite."""
    n = len(sizes)
    teams = [[Rating(25 + gap * j / (n - 1), sigma)] * size for j, size in enumerate(sizes)]
    ranks = {
        "ordered": list(range(n)),
        "reversed": list(range(n))[::-1],
        "drawn": [0] * n,
        "pairs": [j // 2 for j in range(n)],
    }[outcome]
    weights = [[1e-9 if i % 3 else 0.7 for i in range(size)] for size in sizes]
    for w in (None, weights):
        result = DEFAULT.rate(teams, ranks, w)
        for team in result:
            for r in team:
                assert math.isfinite(r.mu) and math.isfinite(r.sigma) and r.sigma > 0
        assert 0.0 <= DEFAULT.quality(teams, w) <= 1.0


def test_huge_upset_moves_like_the_asymptote() -> None:
    """A 1e6 upset between certain players moves each by about sigma^2 / c * |t| (V ~ -x)."""
    result = DEFAULT.rate([[Rating(0, 1e-3)], [Rating(1e6, 1e-3)]], [0, 1])
    c = math.sqrt(2 * (1e-6 + DEFAULT.tau**2 + DEFAULT.beta**2))
    var = 1e-6 + DEFAULT.tau**2
    expected_shift = var / c * (1e6 / c)
    assert result[0][0].mu == pytest.approx(expected_shift, rel=1e-6)
    assert result[1][0].mu == pytest.approx(1e6 - expected_shift, rel=1e-9)


# ---------------------------------------------------------------- interface


@given(
    st.floats(-100, 100),
    st.floats(0.01, 50),
    st.floats(-100, 100),
    st.floats(0.01, 50),
    st.sampled_from([(0, 1), (1, 0), (0, 0)]),
    st.sampled_from([None, 0.0, 3600.0, 1e9]),
    st.sampled_from([DEFAULT, TrueSkill(time_tau=1.0), TrueSkill(draw_probability=0.0, tau=0.0)]),
)
def test_duel_shortcut_is_bit_identical_to_the_two_team_form(
    mu0, sigma0, mu1, sigma1, ranks, gap, model
) -> None:
    """The one-against-one shortcut computes exactly (to the bit) what the general two-team form does."""
    teams = [[Rating(mu0, sigma0)], [Rating(mu1, sigma1)]]
    elapsed = [[gap], [None]]
    general = model._rate_two(teams, *ranks, model._variances(teams, elapsed), None)
    assert model.rate(teams, ranks, elapsed=elapsed) == general


def test_rate_match_maps_the_outcome() -> None:
    """rate_match passes the outcome's ranks, weights and elapsed times to rate."""
    model = TrueSkill(time_tau=1.0)
    teams = [[Rating(25, 3), Rating(20, 2)], [Rating(30, 4)], [Rating(22, 1)]]
    weights = [[1.0, 0.5], [1.0], [0.8]]
    elapsed = [[DAY, None], [3 * DAY], [None]]
    outcome = Outcome(ranks=[1, 0, 1], weights=weights, elapsed=elapsed)
    assert model.rate_match(teams, outcome) == model.rate(teams, [1, 0, 1], weights, elapsed)


def test_default_ranks_follow_listing_order() -> None:
    """Without ranks the first listed team won, as in the trueskill package."""
    assert DEFAULT.rate(fresh(1, 1)) == DEFAULT.rate(fresh(1, 1), [0, 1])


def test_output_has_the_input_shape() -> None:
    """rate returns lists of Rating in the teams' shape."""
    result = DEFAULT.rate([[NEW], [NEW, NEW, NEW], [NEW, NEW]], [2, 0, 1])
    assert [len(team) for team in result] == [1, 3, 2]
    assert all(isinstance(r, Rating) for team in result for r in team)


def test_defaults_are_the_papers_xbox_values() -> None:
    """mu0 = 25, sigma0 = 25/3, beta = sigma0/2, tau = sigma0/100, draw 10 %, k = 3."""
    assert model_parameters("trueskill") == {
        "mu": 25.0,
        "sigma": 25.0 / 3.0,
        "beta": 25.0 / 6.0,
        "tau": 25.0 / 300.0,
        "draw_probability": 0.10,
        "time_tau": 0.0,
        "time_unit": "days",
        "k": 3.0,
        "player_scores": False,
        "score_noise": 25.0 / 6.0,
        "margin_scale": 0.0,
        "margin_noise": 25.0 / 6.0,
    }
    assert not DEFAULT.needs_scores
    assert DEFAULT.initial() == Rating(25.0, 25.0 / 3.0)
    assert TrueSkill.name == "trueskill" and TrueSkill.has_sigma


def test_display_is_conservative_skill() -> None:
    """display is mu - k * sigma."""
    assert create_model("trueskill", {"k": 2.0}).display(Rating(30, 4)) == 22.0
    assert DEFAULT.display(DEFAULT.initial()) == pytest.approx(0.0)


@pytest.mark.parametrize(
    "params",
    [
        {"sigma": 0},
        {"beta": -1},
        {"tau": -0.1},
        {"draw_probability": 1.0},
        {"draw_probability": -0.1},
        {"time_tau": math.nan},
        {"time_unit": "fortnights"},
        {"time_unit": 0},
        {"mu": math.inf},
    ],
)
def test_invalid_parameters_are_rejected(params) -> None:
    """Parameters outside their domain raise ValueError naming the problem."""
    with pytest.raises(ValueError):
        TrueSkill(**params)


@pytest.mark.parametrize(
    ("teams", "ranks", "weights"),
    [
        ([[NEW]], None, None),
        ([[NEW], []], None, None),
        ([[NEW], [NEW]], [0], None),
        ([[NEW], [NEW]], None, [[1.0], [-0.5]]),
        ([[NEW], [NEW]], None, [[1.0], [math.nan]]),
        ([[NEW], [NEW]], None, [[1.0], [1.0, 1.0]]),
    ],
)
def test_malformed_matches_are_rejected(teams, ranks, weights) -> None:
    """Fewer than two teams, empty teams, wrong rank counts or bad weights raise ValueError."""
    with pytest.raises(ValueError):
        DEFAULT.rate(teams, ranks, weights)
