"""A ladder with modes replayed offline (offline/modes.py) and its fit (offline/tune.py's
`tune_modes`): the replay is the processor's for one mode, each form's rule, and the fit
recovering known per-mode offsets from synthetic duels (offline/synth.py's `generate_modes`)."""

from __future__ import annotations

import gzip
import statistics
from dataclasses import replace

import pytest

from stream_rater.bench.modes import DATA, PARAMS, competition_class, football_modes
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.offline.evaluate import score
from stream_rater.offline.modes import CrossReplay, ModedReplay, SharedReplay, mode_models, score_modes
from stream_rater.offline.synth import ModesConfig, generate_modes
from stream_rater.offline.tune import Scoring
from stream_rater.offline.tune_modes import tune_modes
from stream_rater.rating.modes import cross_update, first_in_mode

LADDER = Ladder("m", "trueskill", {"tau": 0.0, "time_tau": 0.5, "time_unit": "days"})
#: The generator's own model: skills that do not drift.
STILL = Ladder("m", "trueskill", {"tau": 0.0})
#: A smaller acceptance shape: a small mode opened to veterans of a large one.
SMALL = ModesConfig(players=200, matches=4000)


def labelled(config: ModesConfig):
    data = generate_modes(config)
    ladders = Ladders([LADDER])
    return [(mode, parse_match({**e, "ladder": "m"}, ladders)) for mode, e in data.events], data.offsets


@pytest.fixture(scope="module")
def football_head(tmp_path_factory):
    """The first 1,500 football matches (home effects, draws, idle times) with their modes."""
    path = tmp_path_factory.mktemp("football") / "head.csv"
    with gzip.open(DATA, "rt", encoding="utf-8") as source:
        path.write_text("".join(next(source) for _ in range(1501)), encoding="utf-8")
    return football_modes(path)


def test_one_mode_scores_as_the_processor(football_head):
    ladders = Ladders([Ladder("football", "trueskill", PARAMS)])
    matches = [m for _, m in football_head]
    expected = score([matches[:500], matches[500:]], ladders)[0]
    models = mode_models(ladders.get("football"), {"all": {}})
    got = score_modes([[("all", m) for m in matches[:500]], [("all", m) for m in matches[500:]]], models, 0.0)
    for want, have in zip(expected, got.whole):
        assert have.to_dict() == want.to_dict()


def test_competition_classes(football_head):
    assert [competition_class(t) for t in ("Friendly", "UEFA Euro qualification", "FIFA World Cup")] == [
        "friendly",
        "qualifier",
        "finals",
    ]
    assert {mode for mode, _ in football_head} == {"friendly", "finals"}  # no qualifiers before 1908


def test_first_match_in_a_mode_starts_from_the_others_as_read():
    matches, _ = labelled(replace(SMALL, matches=400, opens=0.5))
    models = mode_models(LADDER, {"large": {}, "small": {}})
    replay = ModedReplay(models, 0.6)
    index = next(i for i, (mode, _) in enumerate(matches) if mode == "small")
    for mode, match in matches[:index]:
        replay.apply(mode, match)
    first = matches[index][1]
    player = first.teams[0].players[0].id
    large = replay.players[player]["large"]
    read = models["large"].as_of(large.rating, first.finished_at - large.last_played)
    assert read.sigma > large.rating.sigma  # idle time counts
    assert replay.prior(player, "small", first.finished_at).rating == first_in_mode(
        models["small"], [read], 0.6
    )


def test_cross_form_moves_the_players_other_modes():
    matches, _ = labelled(replace(SMALL, matches=400, opens=0.5))
    models = mode_models(LADDER, {"large": {}, "small": {}})
    replay = CrossReplay(models, 0.6)
    seen: set[str] = set()
    for mode, match in matches:
        ids = [p.id for t in match.teams for p in t.players]
        if mode == "large" and seen.intersection(ids):
            break
        replay.apply(mode, match)
        seen.update(ids if mode == "small" else ())
    player, at = next(p for p in ids if p in seen), match.finished_at
    large, small = replay.players[player]["large"], replay.players[player]["small"]
    read = [models["large"].as_of(large.rating, at - large.last_played)]
    read.append(models["small"].as_of(small.rating, at - small.last_played))
    replay.apply(mode, match)
    after = replay.players[player]
    assert after["small"].rating == cross_update(read[1], read[0], after["large"].rating, 0.6)
    assert (after["small"].games, after["small"].last_played) == (small.games, at)
    assert after["small"].rating.mu != small.rating.mu


@pytest.mark.parametrize("form", ["shared", "cross"])
@pytest.mark.parametrize("coupling", [0.0, 1.0])
def test_sharing_forms_span_the_alternatives(coupling, form):
    """ρ = 1: one ladder ignoring the modes; ρ = 0: one ladder per mode."""
    matches, _ = labelled(replace(SMALL, matches=600))
    models = mode_models(LADDER, {"large": {}, "small": {}})
    shared = score_modes([matches], models, coupling, form=form).whole[0]
    if coupling == 1.0:
        one = mode_models(LADDER, {"all": {}})
        want = score_modes([[("all", m) for _, m in matches]], one, 0.0).whole[0]
    else:
        want = score_modes([matches], models, 0.0).whole[0]
    assert shared.log_loss == pytest.approx(want.log_loss, rel=1e-9)
    assert shared.wrong_order == pytest.approx(want.wrong_order, rel=1e-9)


@pytest.mark.parametrize("truth", [0.8, 0.5])
def test_fit_recovers_the_coupling(truth):
    """The modes' skills correlate by `truth`; the coupling fitted on 70 % is within 0.1 of it,
    and sharing predicts the held-out rest better than one ladder per mode."""
    sd = 25.0 / 3.0
    config = ModesConfig(skill_sd=sd * truth**0.5, offset_sd=sd * (1 - truth) ** 0.5)
    matches, _ = labelled(config)
    result = tune_modes(matches, STILL, form="shared", scoring=Scoring(fit_fraction=0.7), calibrate=None)
    assert result.coupling == pytest.approx(truth, abs=0.1)
    assert result.tuned.whole[1].log_loss < result.baseline.whole[1].log_loss
    assert f"coupling = {result.coupling}" in result.report()


def test_shared_form_recovers_each_players_offset():
    """Per player of the small mode: the rated small-minus-large offset follows the true one."""
    matches, truth = labelled(SMALL)
    replay = SharedReplay(mode_models(STILL, {"large": {}, "small": {}}), SMALL.correlation)
    for mode, match in matches:
        replay.apply(mode, match)

    def rated(player: str, mode: str) -> float:
        joint = replay.players[player][0]
        return joint.mean[1 + joint.modes.index(mode)]

    both = [p for p, (joint, _) in replay.players.items() if {"large", "small"} <= set(joint.modes)]
    assert len(both) == 100
    got = [rated(p, "small") - rated(p, "large") for p in both]
    want = [truth[(p, "small")] - truth[(p, "large")] for p in both]
    assert statistics.correlation(got, want) > 0.7
