"""Elo family: pairwise Elo and duelling Elo known answers, and the properties every
Elo-family model (Elo, Plackett-Luce, Thurstonian, duelling Elo) must have."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_rater.rating.base import Outcome, Rating
from stream_rater.rating.duelling_elo import DuellingElo
from stream_rater.rating.elo import Elo
from stream_rater.rating.plackett_luce import PlackettLuce
from stream_rater.rating.registry import create_model, model_parameters
from stream_rater.rating.thurstonian import Thurstonian
from tests.unit.rating.ratings import solo

PHI_0_OVER_CDF_0 = math.sqrt(2.0 / math.pi)  # φ(0)/Φ(0)


def Phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def R(*mus: float) -> list[Rating]:
    return [Rating(m) for m in mus]


def mus(result: list[list[Rating]]) -> list[list[float]]:
    return [[p.mu for p in team] for team in result]


def flat(result) -> list[float]:
    return [p.mu for team in result for p in team]


def rate(model, teams, ranks):
    return model.rate_match(teams, Outcome(ranks=ranks))


ALL_MODELS = [
    Elo(),
    Elo(kind="gaussian"),
    Elo(kind="gaussian", update="ml"),
    Elo(combine="sum"),
    Elo(kind="gaussian", update="ml", combine="sum"),
    PlackettLuce(),
    PlackettLuce(reversed=True),
    Thurstonian(),
    DuellingElo(),
    DuellingElo(beta=200.0, initial=1500.0),
]
MODEL_IDS = [repr(m) for m in ALL_MODELS]


# --- two-player Elo (Kerby §2) -----------------------------------------------------------


def test_equal_players_decisive_move_half_eta():
    """Kerby §2.1: equally rated players, decisive game: the update size is η/2."""
    elo = Elo(k=10.0, scale=1.0)
    assert mus(rate(elo, solo(0.0, 0.0), [1, 2])) == [[5.0], [-5.0]]


def test_equal_players_draw_no_change():
    """Equal players who draw keep their ratings in every update form."""
    for kind in ("logistic", "gaussian"):
        for update in ("bounded", "ml"):
            elo = Elo(kind=kind, update=update)
            assert mus(rate(elo, solo(1500.0, 1500.0), [1, 1])) == [[1500.0], [1500.0]]


def test_logistic_update_is_kerby_closed_form():
    """Kerby §2.1: the loser moves by −η/(1 + e^(r_winner − r_loser)) and the winner by the opposite."""
    elo = Elo(k=3.0, scale=1.0)
    r1, r2 = 0.4, -1.1  # player 2 wins
    step = 3.0 / (1.0 + math.exp(r2 - r1))
    (a,), (b,) = mus(rate(elo, solo(r1, r2), [2, 1]))
    assert a == pytest.approx(r1 - step, abs=1e-12)
    assert b == pytest.approx(r2 + step, abs=1e-12)


def test_logistic_ml_equals_bounded():
    """Kerby §2.2: for the logistic form the maximum-likelihood and the bounded update coincide."""
    teams = solo(1430.0, 1610.0)
    for ranks in ([1, 2], [2, 1], [1, 1]):
        a = flat(rate(Elo(update="ml"), teams, ranks))
        b = flat(rate(Elo(update="bounded"), teams, ranks))
        assert a == pytest.approx(b, abs=1e-12)


def test_chess_scale_default():
    """The default scale is the chess convention: a 400-point underdog wins with P = 1/11 and gains k·10/11."""
    elo = Elo()
    (a,), (_b,) = mus(rate(elo, solo(1500.0, 1900.0), [1, 2]))
    assert a - 1500.0 == pytest.approx(32.0 * 10.0 / 11.0)
    assert elo.win_probabilities(solo(1500.0, 1900.0))[0] == pytest.approx(1.0 / 11.0)


def test_update_bounded_by_eta_and_approaches_it_for_upsets():
    """Kerby §2.1: the update never exceeds η and approaches η when a much weaker player wins."""
    elo = Elo(k=20.0)
    (a,), (_,) = mus(rate(elo, solo(0.0, 5000.0), [1, 2]))
    assert 19.99 < a <= 20.0
    (a,), (_,) = mus(rate(elo, solo(5000.0, 0.0), [1, 2]))
    assert 0.0 <= a - 5000.0 < 0.01


def test_gaussian_ml_equal_players_is_kerby_gradient():
    """Kerby §2.2: equal players, decisive: the ML Gaussian step is η·φ(0)/(√2·Φ(0))."""
    elo = Elo(k=1.0, scale=1.0, kind="gaussian", update="ml")
    (a,), (b,) = mus(rate(elo, solo(0.0, 0.0), [1, 2]))
    assert a == pytest.approx(PHI_0_OVER_CDF_0 / math.sqrt(2.0), rel=1e-12)
    assert b == pytest.approx(-a, rel=1e-12)


def test_gaussian_ml_is_unbounded_and_bounded_is_not():
    """Kerby §2.2: the ML Gaussian update grows like the size of an upset; the bounded one stays below η."""
    ml = Elo(k=1.0, scale=1.0, kind="gaussian", update="ml")
    bounded = Elo(k=1.0, scale=1.0, kind="gaussian", update="bounded")
    (a,), _ = mus(rate(ml, solo(0.0, 30.0), [1, 2]))
    assert a == pytest.approx(30.0 / 2.0, rel=0.01)  # φ(z)/Φ(z) ~ −z with z = −30/√2, over √2
    (b,), _ = mus(rate(bounded, solo(0.0, 30.0), [1, 2]))
    assert 0.999 < b <= 1.0


def test_gaussian_bounded_is_classic_elo():
    """The bounded Gaussian update is k·(S − Φ(Δ/(√2·scale)))."""
    elo = Elo(k=24.0, scale=200.0, kind="gaussian")
    (a,), (b,) = mus(rate(elo, solo(1600.0, 1500.0), [2, 1]))
    expected = 24.0 * (0.0 - Phi(100.0 / (math.sqrt(2.0) * 200.0)))
    assert a - 1600.0 == pytest.approx(expected)
    assert b - 1500.0 == pytest.approx(-expected)


def test_gaussian_ml_draw_is_half_win_half_loss():
    """An ML Gaussian draw is the mean of the win and the loss gradients."""
    elo = Elo(k=1.0, scale=1.0, kind="gaussian", update="ml")
    win = mus(rate(elo, solo(0.7, 0.0), [1, 2]))[0][0] - 0.7
    loss = mus(rate(elo, solo(0.7, 0.0), [2, 1]))[0][0] - 0.7
    draw = mus(rate(elo, solo(0.7, 0.0), [1, 1]))[0][0] - 0.7
    assert draw == pytest.approx((win + loss) / 2.0, abs=1e-12)
    assert draw < 0.0


# --- pairwise Elo for N teams (Kerby §3.1) and teams -------------------------------------


def test_pairwise_sum_and_mean():
    """Kerby §3.1: three equal players: the winner gains η (sum of two η/2 wins) or η/2 (mean)."""
    teams = solo(0.0, 0.0, 0.0)
    summed = mus(rate(Elo(k=2.0, scale=1.0, combine="sum"), teams, [1, 2, 3]))
    mean = mus(rate(Elo(k=2.0, scale=1.0, combine="mean"), teams, [1, 2, 3]))
    assert summed == [[2.0], [0.0], [-2.0]]
    assert mean == [[1.0], [0.0], [-1.0]]


def test_team_rating_is_sum_and_members_get_team_delta():
    """A team plays with the sum of its members' ratings and each member receives the team's full delta."""
    elo = Elo(k=16.0)
    teams = [R(1400.0, 1700.0), R(1500.0, 1500.0)]
    result = mus(rate(elo, teams, [2, 1]))
    expected = elo.pair_delta(3100.0, 3000.0, 0.0, 2, 2)
    assert result[0] == pytest.approx([1400.0 + expected, 1700.0 + expected])
    assert result[1] == pytest.approx([1500.0 - expected, 1500.0 - expected])


def test_gaussian_team_spread_counts_all_players():
    """Gaussian teams compare through √(n_a + n_b)·scale, the sd of the difference of summed performances."""
    elo = Elo(k=1.0, scale=100.0, kind="gaussian")
    teams = [R(0.0, 100.0), R(0.0, 0.0)]
    p = elo.win_probabilities(teams)[0]
    assert p == pytest.approx(Phi(100.0 / (100.0 * 2.0)))


def test_unequal_teams_not_zero_sum():
    """With teams of different sizes each member gets the team delta, so the total change is (n_a − n_b)·Δ."""
    elo = Elo()
    result = rate(elo, [R(750.0, 750.0), R(1500.0)], [1, 2])
    delta = result[0][0].mu - 750.0
    total = sum(p.mu for t in result for p in t) - 3000.0
    assert total == pytest.approx(delta)


# --- duelling Elo (TrueSkill paper §1, §4) -----------------------------------------------


def test_duelling_defaults_are_the_papers():
    """Defaults: α = 0.07, β = 25/6, initial 25; on the chess scale (β = 200) the K-factor αβ√π is ≈ 24.8."""
    model = DuellingElo()
    assert (model.alpha, model.beta, model.initial()) == (0.07, 25.0 / 6.0, Rating(25.0, None))
    assert DuellingElo(beta=200.0).k_factor == pytest.approx(24.81, abs=0.01)


def test_duelling_one_on_one_formula():
    """TrueSkill paper §1: Δ = αβ√π((y+1)/2 − Φ((s1 − s2)/(√2β))), winner +Δ, loser −Δ."""
    model = DuellingElo()
    k = 0.07 * (25.0 / 6.0) * math.sqrt(math.pi)
    (a,), (b,) = mus(rate(model, solo(28.0, 25.0), [2, 1]))  # y = −1 for player 1
    delta = k * (0.0 - Phi(3.0 / (math.sqrt(2.0) * 25.0 / 6.0)))
    assert a == pytest.approx(28.0 + delta)
    assert b == pytest.approx(25.0 - delta)
    assert delta < 0.0  # the loser loses (the printed s1 ← s1 + yΔ would make it gain)
    (a,), (b,) = mus(rate(model, solo(25.0, 25.0), [1, 2]))
    assert a - 25.0 == pytest.approx(k / 2.0)


def test_duelling_draw_pulls_together():
    """A draw (y = 0) moves the weaker player up by αβ√π(½ − Φ(·)) and the stronger down."""
    model = DuellingElo()
    (a,), (b,) = mus(rate(model, solo(20.0, 30.0), [1, 1]))
    assert a > 20.0 and b < 30.0 and (a - 20.0) == pytest.approx(30.0 - b)


def test_duelling_heuristic_averages_over_opponents_only():
    """Each player's update is the average of its duels against every player of the other teams; team-mates never duel."""
    model = DuellingElo()
    teams = [R(20.0, 30.0), R(25.0)]
    result = mus(rate(model, teams, [1, 2]))
    assert result[0][0] - 20.0 == pytest.approx(model.duel(20.0, 25.0, 1.0))
    assert result[0][1] - 30.0 == pytest.approx(model.duel(30.0, 25.0, 1.0))
    expected_c = (-model.duel(20.0, 25.0, 1.0) - model.duel(30.0, 25.0, 1.0)) / 2.0
    assert result[1][0] - 25.0 == pytest.approx(expected_c)


def test_duelling_free_for_all_averages():
    """Free-for-all: the middle player of three equal players wins one duel and loses one, so does not move."""
    model = DuellingElo()
    result = mus(rate(model, solo(25.0, 25.0, 25.0), [1, 2, 3]))
    assert result[1] == [25.0]
    assert result[0][0] - 25.0 == pytest.approx(model.k_factor / 2.0)


# --- configuration -----------------------------------------------------------------------


def test_registry_creates_every_elo_family_model_with_keywords():
    """The registry builds each model from its documented configuration keys."""
    assert set(model_parameters("elo")) == {"k", "scale", "initial", "kind", "update", "combine"}
    assert set(model_parameters("plackett-luce")) == {"eta", "scale", "initial", "reversed"}
    assert set(model_parameters("thurstonian")) == {"eta", "scale", "initial"}
    assert set(model_parameters("duelling-elo")) == {"alpha", "beta", "initial"}
    model = create_model("elo", {"k": 10, "kind": "gaussian", "update": "ml"})
    assert isinstance(model, Elo) and model.k == 10.0
    assert isinstance(create_model("plackett-luce", {"reversed": True}), PlackettLuce)
    assert isinstance(create_model("thurstonian"), Thurstonian)
    assert isinstance(create_model("duelling-elo"), DuellingElo)


@pytest.mark.parametrize(
    "factory",
    [
        lambda: Elo(kind="normal"),
        lambda: Elo(update="gradient"),
        lambda: Elo(combine="max"),
        lambda: Elo(k=0.0),
        lambda: Elo(scale=math.inf),
        lambda: PlackettLuce(reversed="yes"),
        lambda: Thurstonian(eta=-1.0),
        lambda: DuellingElo(beta=0.0),
    ],
)
def test_invalid_parameters_rejected(factory):
    """Invalid model parameters raise ValueError at construction."""
    with pytest.raises(ValueError):
        factory()


def test_rank_count_must_match_teams():
    """A match whose rank list does not have one rank per team is rejected."""
    for model in ALL_MODELS:
        with pytest.raises(ValueError):
            rate(model, solo(1.0, 2.0), [1])


# --- properties of every Elo-family model ------------------------------------------------

ratings = st.floats(min_value=-400.0, max_value=400.0, allow_nan=False)


@st.composite
def matches(draw, equal_sizes: bool, max_teams: int = 5):
    n_teams = draw(st.integers(2, max_teams))
    size = draw(st.integers(1, 3))
    sizes = [size] * n_teams if equal_sizes else [draw(st.integers(1, 3)) for _ in range(n_teams)]
    teams = [[Rating(draw(ratings) + 1500.0) for _ in range(s)] for s in sizes]
    ranks = [draw(st.integers(1, n_teams)) for _ in range(n_teams)]
    return teams, ranks


def total(result) -> float:
    return math.fsum(p.mu for team in result for p in team)


@pytest.mark.parametrize("model", ALL_MODELS, ids=MODEL_IDS)
@settings(max_examples=30, deadline=None)
@given(match=matches(equal_sizes=True))
def test_zero_sum_for_equal_sized_teams(model, match):
    """Every Elo-family model is zero-sum when all teams have the same number of players."""
    teams, ranks = match
    result = rate(model, teams, ranks)
    assert total(result) == pytest.approx(total(teams), abs=1e-6)
    assert all(p.sigma is None for t in result for p in t)


@pytest.mark.parametrize("model", ALL_MODELS, ids=MODEL_IDS)
@settings(max_examples=30, deadline=None)
@given(match=matches(equal_sizes=False), seed=st.integers(0, 2**32 - 1))
def test_relabelling_changes_nothing(model, match, seed):
    """Listing the teams, or the players inside a team, in another order gives the same posteriors."""
    teams, ranks = match
    rng = random.Random(seed)
    order = list(range(len(teams)))
    rng.shuffle(order)
    inner = [rng.sample(range(len(t)), len(t)) for t in teams]
    shuffled = [[teams[t][i] for i in inner[t]] for t in order]
    base = mus(rate(model, teams, ranks))
    moved = mus(rate(model, shuffled, [ranks[t] for t in order]))
    for pos, t in enumerate(order):
        assert moved[pos] == pytest.approx([base[t][i] for i in inner[t]], abs=1e-7)
    probs = model.win_probabilities(teams)
    moved_probs = model.win_probabilities(shuffled)
    assert moved_probs == pytest.approx([probs[t] for t in order], abs=1e-9)


@pytest.mark.parametrize("model", ALL_MODELS, ids=MODEL_IDS)
@settings(max_examples=20, deadline=None)
@given(n_teams=st.integers(2, 6), size=st.integers(1, 3), mu=ratings)
def test_equal_teams_all_tied_do_not_move(model, n_teams, size, mu):
    """Equal teams that all tie keep their ratings."""
    teams = [[Rating(mu + 1500.0) for _ in range(size)] for _ in range(n_teams)]
    result = flat(rate(model, teams, [1] * n_teams))
    assert result == pytest.approx(flat(teams), abs=1e-7)


@pytest.mark.parametrize("model", ALL_MODELS, ids=MODEL_IDS)
@settings(max_examples=20, deadline=None)
@given(match=matches(equal_sizes=True))
def test_tied_equal_teams_move_alike(model, match):
    """Two identical teams that tie with each other receive identical updates."""
    teams, ranks = match
    teams = [list(teams[0])] + [list(t) for t in teams]
    ranks = [ranks[0], *list(ranks)]
    result = mus(rate(model, teams, ranks))
    assert result[0] == pytest.approx(result[1], abs=1e-7)


@pytest.mark.parametrize("model", ALL_MODELS, ids=MODEL_IDS)
@settings(max_examples=30, deadline=None)
@given(match=matches(equal_sizes=False))
def test_winning_never_worse_than_losing(model, match):
    """A team that finishes first ends no lower than it would have finishing last, others' ranks unchanged."""
    teams, ranks = match
    best, worst = min(ranks) - 1, max(ranks) + 1
    won = rate(model, teams, [best, *list(ranks[1:])])
    lost = rate(model, teams, [worst, *list(ranks[1:])])
    assert won[0][0].mu >= lost[0][0].mu - 1e-9


@pytest.mark.parametrize("model", ALL_MODELS, ids=MODEL_IDS)
@settings(max_examples=30, deadline=None)
@given(match=matches(equal_sizes=False))
def test_win_probabilities_are_a_distribution(model, match):
    """win_probabilities gives one probability per team, each in [0, 1], summing to 1."""
    teams, _ = match
    probs = model.win_probabilities(teams)
    assert len(probs) == len(teams)
    assert all(0.0 <= p <= 1.0 for p in probs)
    assert math.fsum(probs) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("model", ALL_MODELS, ids=MODEL_IDS)
def test_two_team_win_probability_matches_update_model(model):
    """For two single players the first-place probability is the model's own pairwise probability."""
    teams = solo(1550.0, 1500.0)
    p = model.win_probabilities(teams)[0]
    if isinstance(model, DuellingElo):
        expected = Phi(50.0 / (math.sqrt(2.0) * model.beta))
    elif isinstance(model, Thurstonian) or (isinstance(model, Elo) and model.kind == "gaussian"):
        expected = Phi(50.0 / (math.sqrt(2.0) * model.scale))
    else:
        expected = 1.0 / (1.0 + math.exp(-50.0 / model.scale))
    assert p == pytest.approx(expected, rel=1e-12)


EXTREMES = [0.0, 1e6, -1e6, 1e-9, 123.456, 999999.0]


@pytest.mark.parametrize("model", ALL_MODELS, ids=MODEL_IDS)
def test_extreme_inputs_stay_finite(model):
    """Rating gaps of 1e6 and 120-player free-for-alls give finite posteriors and probabilities."""
    rng = random.Random(7)
    cases = []
    for a in EXTREMES:
        for b in EXTREMES:
            cases.append((solo(a, b), [1, 2]))
            cases.append((solo(a, b), [1, 1]))
            cases.append((solo(a, b, 0.0), [3, 1, 2]))
    ffa = [[Rating(rng.choice(EXTREMES) + rng.uniform(-300, 300))] for _ in range(120)]
    cases.append((ffa, list(range(120))))
    cases.append((ffa, [rng.randint(1, 10) for _ in range(120)]))
    cases.append(([[Rating(1500.0)] for _ in range(120)], list(range(120))[::-1]))
    for teams, ranks in cases:
        result = rate(model, teams, ranks)
        assert all(math.isfinite(p.mu) for t in result for p in t)
        probs = model.win_probabilities(teams)
        assert all(math.isfinite(p) and 0.0 <= p <= 1.0 for p in probs)
        assert math.fsum(probs) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("model", ALL_MODELS, ids=MODEL_IDS)
def test_unrated_players_untouched(model):
    """Players with rated=False keep their prior and do not influence anybody's update."""
    teams = [R(1500.0, 1800.0), R(1450.0), R(1600.0)]
    outcome = Outcome(ranks=[1, 2, 3], rated=[[True, False], [True], [False]])
    result = model.rate_match(teams, outcome)
    assert result[0][1] == teams[0][1] and result[2][0] == teams[2][0]
    alone = rate(model, [R(1500.0), R(1450.0)], [1, 2])
    assert [result[0][0], result[1][0]] == [alone[0][0], alone[1][0]]
