"""Parameter fitting on a small synthetic history: search budget, guarantees and argument checks;
the evidence options' parameters fitted only when named."""

from __future__ import annotations

import random

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished, parse_match
from stream_rater.offline.synth import SynthConfig, generate
from stream_rater.offline.tune import OPTIONS, SPACES, ZERO_SCAN, Scoring, SearchOptions, tune

ELO = Ladders([Ladder("default", "elo", {"k": 4.0})])
TIMED = Ladders([Ladder("default", "trueskill", {"time_unit": "days"})])


def history(ladders: Ladders, n: int = 300, seed: int = 7, *, mixed: bool = False) -> list[MatchFinished]:
    """`n` duels a day apart among 12 players of fixed strengths; the stronger wins 80 % of the
    time; the winner is listed first, or (`mixed`) first or second at random."""
    rng = random.Random(seed)
    matches = []
    for i in range(n):
        a, b = rng.sample(range(12), 2)
        favourite_won = rng.random() < 0.8
        winner, loser = (max(a, b), min(a, b)) if favourite_won else (min(a, b), max(a, b))
        teams = [
            {"rank": 1, "players": [{"id": f"p{winner}"}]},
            {"rank": 2, "players": [{"id": f"p{loser}"}]},
        ]
        if mixed and rng.random() < 0.5:
            teams.reverse()
        matches.append(
            parse_match(
                {
                    "match_id": f"m{i}",
                    "finished_at": 86400.0 * i,
                    "teams": teams,
                },
                ladders,
            )
        )
    return matches


def test_tuned_fit_objective_is_no_worse_than_the_configured_values() -> None:
    """Within its trial budget, tune returns parameters whose fit-part objective is at most the baseline's."""
    result = tune(history(ELO), ELO, "default", options=SearchOptions(10))
    assert 0 < len(result.trials) <= 12
    assert result.baseline.params == {"k": 4.0}
    assert set(result.tuned.params) == {"k"}
    assert result.tuned.fit.log_loss <= result.baseline.fit.log_loss
    assert result.fit_matches == 90 and result.tuned.rest.matches == 210 and result.tuned.all.matches == 300
    assert result.to_dict()["tuned"]["all"]["wrong_order"] == result.tuned.all.wrong_order
    assert "--param k=" in result.report()


def test_a_parameter_configured_as_zero_is_scanned_first() -> None:
    """A parameter at 0 is first tried at each `ZERO_SCAN` value; fixed parameters are not tuned by default."""
    result = tune(
        history(TIMED, n=60),
        TIMED,
        "default",
        fixed={"beta", "tau", "draw_probability"},
        options=SearchOptions(len(ZERO_SCAN["log"]) + 2),
    )
    assert [t.params["time_tau"] for t in result.trials[:5]] == pytest.approx(ZERO_SCAN["log"])
    assert all(set(t.params) == {"time_tau"} for t in result.trials)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"names": ["scale"]}, "cannot tune scale of 'elo'"),
        ({"fixed": {"k"}}, "no parameters to tune"),
        ({"scoring": Scoring(fit_fraction=1.0)}, "leaves a part empty"),
        ({"scoring": Scoring(objective="accuracy")}, "objective must be one of"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict, message: str) -> None:
    """Untunable names, nothing to tune, an empty part or an unknown objective raise ValueError."""
    with pytest.raises(ValueError, match=message):
        tune(history(ELO, n=20), ELO, "default", **kwargs)


def test_option_parameters_are_tuned_only_when_named() -> None:
    """By default tune fits the usual parameters; named, margin_scale is scanned up from 0."""
    assert not set(OPTIONS["trueskill"]) & set(SPACES["trueskill"])
    ladders = Ladders([Ladder("default", "trueskill")])
    matches = [parse_match(e, ladders) for e in generate(SynthConfig(matches=200, seed=3)).events]
    result = tune(
        matches, ladders, "default", ["margin_scale"], options=SearchOptions(len(ZERO_SCAN["log"]) + 1)
    )
    assert [t.params["margin_scale"] for t in result.trials[:5]] == pytest.approx(ZERO_SCAN["log"])
    assert result.tuned.fit.log_loss <= result.baseline.fit.log_loss
    with pytest.raises(ValueError, match="cannot tune player_scores"):
        tune(matches, ladders, "default", ["player_scores"])


def test_calibrate_fits_on_the_fit_part_and_lowers_the_held_out_ece_on_the_football_data() -> None:
    """The football results with the demo's tuned TrueSkill (home effect): the draw band fitted
    on the first 30 % (``--calibrate draw``) brings the held-out ECE to 0.02 or below, from above
    it, with a log-loss no worse; the tuned parameters are the configured ones plus ``calibration``."""
    from stream_rater.local.demo import DEMO_LADDER, DEMO_LADDER_ENV, default_data_file, football_events

    ladders = Ladders.from_env(DEMO_LADDER_ENV)
    matches = [parse_match(e, ladders) for e in football_events(default_data_file(), DEMO_LADDER)]
    result = tune(matches, ladders, DEMO_LADDER, options=SearchOptions(0), calibrate="draw")
    before, after = result.baseline.rest, result.tuned.rest
    assert after.expected_calibration_error <= 0.02 < before.expected_calibration_error
    assert after.log_loss <= before.log_loss
    assert result.trials == [] and set(result.tuned.params) == {*result.baseline.params, "calibration"}
    assert f'calibration = "{result.tuned.params["calibration"]}"' in result.report()


def test_calibrate_with_a_search_scores_the_raw_model_and_calibrates_what_it_found() -> None:
    """With a search, the trials score the model without the configured calibration, and the
    calibration is then fitted with the parameters found (a temperature: no intercept)."""
    ladders = Ladders([Ladder("default", "elo", {"k": 4.0, "calibration": "platt:3,1"})])
    matches = history(ladders, mixed=True)
    result = tune(matches, ladders, "default", options=SearchOptions(6), calibrate="temperature")
    plain = tune(
        matches, Ladders([Ladder("default", "elo", {"k": 4.0})]), "default", options=SearchOptions(6)
    )
    assert [t.value for t in result.trials] == [t.value for t in plain.trials]
    assert str(result.tuned.params["calibration"]).startswith("temperature:")
    with pytest.raises(ValueError, match="predicts no draws"):
        tune(matches, ladders, "default", options=SearchOptions(0), calibrate="draw")
