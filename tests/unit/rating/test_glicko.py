"""Glicko-1 and Glicko-2: the papers' worked examples, golden values against the `glicko2`
package (with its Step 5 corrected), properties, and the ladder round trip through the store."""

from __future__ import annotations

import asyncio
import math
import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.processor import Processor
from stream_rater.rating import Glicko, Glicko2, Rating, create_model
from stream_rater.rating.balance import balance
from stream_rater.rating.base import Outcome
from stream_rater.rating.glicko import GLICKO2_SCALE, SECONDS_PER_DAY, new_volatility
from stream_rater.rating.predict import predict
from stream_rater.store import PlayerState
from stream_rater.store.memory import MemoryStore
from tests.helpers import parsed_duel

#: Glickman's example: 1500/200 beats 1400/30, loses to 1550/100 and to 1700/300.
PAPER_GAMES = [(Rating(1400.0, 30.0), 1.0), (Rating(1550.0, 100.0), 0.0), (Rating(1700.0, 300.0), 0.0)]
MODELS = [Glicko(), Glicko2()]
IDS = ["glicko", "glicko2"]


def duel(
    model: Glicko | Glicko2, a: Rating, b: Rating, rank_b: int = 1, elapsed=None
) -> tuple[Rating, Rating]:
    (new_a,), (new_b,) = model.rate_match([[a], [b]], Outcome(ranks=[0, rank_b], elapsed=elapsed))
    return new_a, new_b


# ---------------------------------------------------------------------- the papers' examples


def test_glicko2_reproduces_glickmans_worked_example():
    """ "Example of the Glicko-2 system": μ' = −0.2069, φ' = 0.8722, σ' = 0.05999 (Step 8:
    r' = 1464.06, RD' = 151.52), as one rating period of three games."""
    new = Glicko2(tau=0.5).rate_period(Rating(1500.0, 200.0, 0.06), PAPER_GAMES)
    assert round((new.mu - 1500.0) / GLICKO2_SCALE, 4) == -0.2069
    assert round(new.sigma / GLICKO2_SCALE, 4) == 0.8722
    assert new.extra == pytest.approx(0.05999, abs=1e-5)
    assert new.mu == pytest.approx(1464.06, abs=0.01)
    assert new.sigma == pytest.approx(151.52, abs=0.01)


def test_glicko1_reproduces_the_papers_example():
    """Glicko-1, same player and games, no idle time: r' ≈ 1464, RD' ≈ 151.4."""
    new = Glicko().rate_period(Rating(1500.0, 200.0), PAPER_GAMES)
    assert new.mu == pytest.approx(1464.0, abs=0.5)
    assert new.sigma == pytest.approx(151.4, abs=0.05)
    assert new.extra is None


def test_glicko1_step1_grows_the_rd_with_idle_time_up_to_the_cap():
    """Step 1: RD = min(sqrt(RD0² + c²t), 350), t in days."""
    model = Glicko(c=10.0)
    assert model.as_of(Rating(1500.0, 50.0), 100 * SECONDS_PER_DAY).sigma == pytest.approx(
        math.hypot(50.0, 100.0)
    )
    assert model.as_of(Rating(1500.0, 50.0), 1e12).sigma == pytest.approx(350.0)
    assert model.as_of(Rating(1500.0, 50.0), 0.0) == Rating(1500.0, 50.0)
    assert Glicko().as_of(Rating(1500.0, 50.0), 1e9) == Rating(1500.0, 50.0)  # c = 0: none
    # the same growth before a match: a long-idle player moves more
    fresh, _ = duel(model, Rating(1500.0, 50.0), Rating(1500.0, 50.0))
    idle, _ = duel(
        model, Rating(1500.0, 50.0), Rating(1500.0, 50.0), elapsed=[[1000 * SECONDS_PER_DAY], [0.0]]
    )
    assert idle.mu - 1500.0 > fresh.mu - 1500.0 > 0.0


# ---------------------------------------------------------------------- golden values: the glicko2 package


def _corrected_package_player():
    """The `glicko2` package's Player with Step 5's f as the paper writes it.

    The package's ``_f`` uses the player's rating μ² where the paper's Step 5.1 has the RD φ²
    (``f(x) = e^x(Δ² − φ² − v − e^x) / 2(φ² + v + e^x)² − (x − a)/τ²``), so its σ' — and through
    Step 6 its RD and rating — depart from the paper's (on the worked example σ' = 0.0599934
    instead of 0.0599960). Everything else of the package is the paper's.
    """
    glicko2 = pytest.importorskip("glicko2")

    class Corrected(glicko2.Player):  # type: ignore[misc]
        def _f(self, x: float, delta: float, v: float, a: float) -> float:
            ex = math.exp(x)
            phi2 = self._Player__rd**2
            return ex * (delta**2 - phi2 - v - ex) / (2 * (phi2 + v + ex) ** 2) - (x - a) / self._tau**2

    return glicko2, Corrected


def test_the_glicko2_package_departs_from_the_paper_only_in_step_5():
    """On the worked example the package as shipped misses σ' (μ² for φ² in f); corrected, it
    gives our numbers."""
    glicko2, corrected = _corrected_package_player()
    shipped = glicko2.Player(1500, 200, 0.06)
    shipped.update_player([1400, 1550, 1700], [30, 100, 300], [1, 0, 0])
    assert shipped.vol == pytest.approx(0.0599934, abs=1e-7)
    fixed = corrected(1500, 200, 0.06)
    fixed.update_player([1400, 1550, 1700], [30, 100, 300], [1, 0, 0])
    ours = Glicko2().rate_period(Rating(1500.0, 200.0, 0.06), PAPER_GAMES)
    assert (fixed.rating, fixed.rd, fixed.vol) == pytest.approx((ours.mu, ours.sigma, ours.extra), rel=1e-12)


def test_glicko2_matches_the_corrected_package_game_by_game_on_random_matches():
    """500 random duels among 20 players, each one rating period (no idle time, no floor in
    reach): every posterior equals the corrected package's to 1e-6 relative. Not closer: Step 5
    stops once the bracket is within ε = 1e-6 in log σ², and the package computes μ − μ_j from
    ratings shifted by 1500 first, so the last Illinois step can differ by rounding."""
    _, corrected = _corrected_package_player()
    rng = random.Random(7)
    model = Glicko2(rd_floor=1e-3)
    states = {
        p: Rating(rng.uniform(1200, 1800), rng.uniform(40, 350), rng.uniform(0.03, 0.09)) for p in range(20)
    }
    for _ in range(500):
        a, b = rng.sample(range(20), 2)
        score = rng.choice([1.0, 0.5, 0.0])
        new_a, new_b = duel(model, states[a], states[b], rank_b={1.0: 1, 0.5: 0, 0.0: -1}[score])
        for me, opp, s, new in ((a, b, score, new_a), (b, a, 1.0 - score, new_b)):
            player = corrected(states[me].mu, states[me].sigma, states[me].extra)
            player.update_player([states[opp].mu], [states[opp].sigma], [s])
            assert (new.mu, new.sigma, new.extra) == pytest.approx(
                (player.rating, player.rd, player.vol), rel=1e-6
            )
        states[a], states[b] = new_a, new_b


# ---------------------------------------------------------------------- properties

ratings = st.floats(-1e6, 1e6)
rds = st.floats(1e-6, 350.0)
vols = st.floats(1e-6, 1.0)


@pytest.mark.parametrize("model", MODELS, ids=IDS)
@given(r=ratings, rd=st.floats(30.0, 350.0))
@settings(max_examples=50, deadline=None)
def test_equal_players_gain_what_the_other_loses(model, r, rd):
    """Symmetry: between equal players the winner's gain is the loser's loss, and a draw moves nobody."""
    p = model.initial()._replace(mu=r, sigma=rd)
    win, loss = duel(model, p, p)
    assert win.mu - r == pytest.approx(r - loss.mu, rel=1e-9, abs=1e-9)
    assert win.sigma == loss.sigma
    draw, _ = duel(model, p, p, rank_b=0)
    assert draw.mu == pytest.approx(r, abs=1e-9)


@pytest.mark.parametrize("model", [Glicko(c=50.0), Glicko2(c=50.0)], ids=IDS)
@given(
    a=ratings,
    b=ratings,
    rd_a=rds,
    rd_b=rds,
    vol=vols,
    idle=st.floats(0.0, 1e12),
    rank=st.sampled_from([1, 0, -1]),
)
@settings(max_examples=200, deadline=None)
def test_rd_stays_between_the_floor_and_the_cap_and_nothing_is_nan(model, a, b, rd_a, rd_b, vol, idle, rank):
    """Huge gaps, tiny RDs, long idle times: finite states, rd_floor ≤ RD ≤ the initial RD."""
    pa, pb = Rating(a, rd_a, vol), Rating(b, rd_b, vol)
    for new in duel(model, pa, pb, rank_b=rank, elapsed=[[idle], [idle]]):
        assert math.isfinite(new.mu) and math.isfinite(new.sigma)
        assert model.rd_floor <= new.sigma <= model.rd * (1 + 1e-12)
        if isinstance(model, Glicko2):
            assert new.extra is not None and math.isfinite(new.extra) and new.extra > 0.0
    assert model.as_of(pa, idle).sigma <= model.rd * (1 + 1e-12)


@pytest.mark.parametrize("model", MODELS, ids=IDS)
@given(a=ratings, b=ratings, rd_a=st.floats(30.0, 350.0), rd_b=st.floats(30.0, 350.0))
@settings(max_examples=100, deadline=None)
def test_a_win_rates_higher_than_a_draw_higher_than_a_loss(model, a, b, rd_a, rd_b):
    """Monotonic in the result (ties allowed where the gap makes the outcome certain)."""
    pa, pb = model.initial()._replace(mu=a, sigma=rd_a), model.initial()._replace(mu=b, sigma=rd_b)
    win, draw, loss = (duel(model, pa, pb, rank_b=r)[0].mu for r in (1, 0, -1))
    assert win >= draw >= loss
    assert win > loss or abs(a - b) > 1000


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_extreme_inputs_stay_finite(model):
    """Gaps beyond float range of the expected score, the smallest RDs, volatilities at both ends."""
    for a, b in ((1e300, -1e300), (-1e300, 1e300), (1e6, 0.0), (0.0, 0.0)):
        for rd in (1e-300, 1e-6, 30.0, 350.0, 1e300):
            for vol in (1e-300, 0.06, 10.0, None):
                for new in duel(model, Rating(a, rd, vol), Rating(b, rd, vol)):
                    assert math.isfinite(new.mu) and math.isfinite(new.sigma), (a, rd, vol)


def test_volatility_search_is_finite_for_an_astronomical_upset():
    """Step 5 where v and Δ² are far beyond float range (Σ g²E(1−E) underflows): its limit,
    ``f = e^x (Σ g(s−E))² / 2 − (x − a)/τ²``, finite; a volatility is never above the cap RD."""
    cap2 = (350.0 / GLICKO2_SCALE) ** 2
    tiny = new_volatility(0.06, 0.03, 1e-290, 1.0, 0.5, cap2)
    assert 0.06 < tiny < 0.0601
    assert new_volatility(0.06, 0.03, 0.0, 1.0, 0.5, cap2) == pytest.approx(tiny, rel=1e-9)
    assert new_volatility(0.06, 0.03, 0.0, 0.0, 0.5, cap2) == 0.06  # nothing learnt
    assert new_volatility(0.06, 0.03, 1e-6, 1e3, 0.5, cap2) == pytest.approx(math.sqrt(cap2))
    assert new_volatility(1e9, 0.03, 0.2, 0.1, 0.5, cap2) <= math.sqrt(cap2) * (1 + 1e-12)


# ---------------------------------------------------------------------- teams, predictions, registry


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_teams_and_free_for_alls_are_decomposed_pairwise(model):
    """A 1v1 through the teams path is the papers' update; in a free-for-all the winner gains,
    the last loses, tied teams with equal priors get equal posteriors."""
    p = model.initial()
    opp = Rating(1600.0, 80.0, p.extra)
    assert duel(model, p, opp)[0] == model.rate_period(p, [(opp, 1.0)])
    posts = model.rate_match([[p], [p], [p], [p]], Outcome(ranks=[0, 1, 1, 2]))
    assert posts[0][0].mu > 1500.0 > posts[3][0].mu
    assert posts[1][0] == posts[2][0]
    two_v_two = model.rate_match([[p, p], [p, p]], Outcome(ranks=[0, 1]))
    assert two_v_two[0][0] == two_v_two[0][1] and two_v_two[0][0].mu > 1500.0 > two_v_two[1][0].mu


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_predict_quality_and_balance(model):
    """Glickman's predictive probability, RD-attenuated: 1/(1 + 10^(−g(√(RD_a²+RD_b²))Δ/400))."""
    a, b = Rating(1700.0, 50.0), Rating(1500.0, 120.0)
    s = model.scale  # 400/ln 10 for Glicko-1 (so e^(x/s) = 10^(x/400)), 173.7178 for Glicko-2
    g = 1 / math.sqrt(1 + 3 * (50.0**2 + 120.0**2) / s**2 / math.pi**2)
    expected = 1 / (1 + math.exp(-g * 200.0 / s))
    prediction = predict(model, [[a], [b]])
    assert prediction.win_probabilities[0] == pytest.approx(expected, rel=1e-12)
    assert sum(prediction.win_probabilities) == pytest.approx(1.0)
    assert prediction.draw_probability == 0.0
    assert 0.0 < prediction.quality < 1.0
    assert predict(model, [[a], [b], [b]]).draw_probability is None
    pool = [Rating(1500.0 + 100 * i, 60.0) for i in range(4)]
    assert sorted(map(sorted, balance(model, pool, [2, 2]).teams)) == [[0, 3], [1, 2]]


def test_registry_and_parameters():
    """Registered as glicko and glicko2 with the documented keys; bad values are refused."""
    assert isinstance(create_model("glicko", {"rating": 1200, "rd": 300, "c": 5, "rd_floor": 40}), Glicko)
    model = create_model("glicko2", {"volatility": 0.05, "tau": 0.3, "c": 1.0})
    assert model.initial() == Rating(1500.0, 350.0, 0.05)
    for bad in ({"rd": 0}, {"c": -1}, {"rd_floor": 400}, {"rating": math.inf}):
        with pytest.raises(ValueError):
            create_model("glicko", bad)
    with pytest.raises(ValueError):
        create_model("glicko2", {"tau": 0})


# ---------------------------------------------------------------------- the ladder: the volatility is stored


def test_the_volatility_rides_in_the_stored_state_and_old_states_still_load():
    """A glicko2 ladder stores (rating, RD, volatility); per-game updates through the processor
    equal `rate_match` applied in order, with idle time in days; a five-field state (an older
    one, or another model's) still unpacks, and packs as five fields (integral floats as ints)."""
    ladders = Ladders([Ladder("g2", "glicko2", {"c": 20.0})])
    model = ladders.get("g2").rating_model
    events = [
        ("m1", "a", "b", 0.0),
        ("m2", "a", "c", 3 * SECONDS_PER_DAY),
        ("m3", "b", "a", 10 * SECONDS_PER_DAY),
    ]
    processor = Processor(ladders, MemoryStore())

    async def run() -> dict[str, PlayerState]:
        for mid, first, second, at in events:
            await processor.process(
                [parsed_duel(ladders, mid, first, second, ladder="g2", at=1_700_000_000.0 + at)]
            )
        return await processor.store.players("g2")

    stored = asyncio.run(run())
    states: dict[str, Rating] = {}
    last: dict[str, float] = {}
    for _, first, second, at in events:
        priors = [states.get(p, model.initial()) for p in (first, second)]
        elapsed = [[at - last[p] if p in last else None] for p in (first, second)]
        (new_a,), (new_b,) = model.rate_match([[priors[0]], [priors[1]]], Outcome([0, 1], elapsed=elapsed))
        states[first], states[second] = new_a, new_b
        last[first] = last[second] = at
    for pid, rating in states.items():
        assert stored[pid][:2] == rating[:2] and stored[pid].extra == rating.extra != 0.06
        assert PlayerState.unpack(stored[pid].pack()) == stored[pid]
    old = PlayerState(25.0, 8.0, 3, 100.0, 2)
    assert PlayerState.unpack(msgpack.packb([25.0, 8.0, 3, 100.0, 2])) == old  # as format 1 packed it
    assert old.pack() == msgpack.packb([25, 8, 3, 100, 2]) and PlayerState.unpack(old.pack()) == old
