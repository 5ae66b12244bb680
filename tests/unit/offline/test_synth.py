"""Synthetic data: the generator, the gain of per-player scores in recovering true skills, the
placebo that removes it, and stream = replay for ladders with the evidence options."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest

from stream_rater.cli import main
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.offline.replay import replay
from stream_rater.offline.synth import (
    SynthConfig,
    final_means,
    generate,
    party_study,
    recovery,
    shuffle_scores,
)
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore

LADDERS = Ladders(
    [
        Ladder("order", "trueskill"),
        Ladder("scores", "trueskill", {"player_scores": True}),
        Ladder("both", "trueskill", {"player_scores": True, "margin_scale": 1.0, "time_tau": 0.5}),
    ]
)
DATA = generate(SynthConfig(matches=3000, seed=7))


def team_scores(event: dict) -> list[float]:
    return [sum(p["score"] for p in team["players"]) for team in event["teams"]]


def test_the_generator_is_deterministic_and_its_events_are_valid() -> None:
    """The same config gives the same events; each is a valid match ranked by its team scores."""
    again = generate(SynthConfig(matches=3000, seed=7))
    assert again == DATA and generate(SynthConfig(matches=3000, seed=8)) != DATA
    assert len(DATA.truth) == 200
    for event in DATA.events[:200]:
        match = parse_match({**event, "ladder": "both"}, LADDERS)
        scores = team_scores(event)
        assert match.ranks() == [1.0 + sum(other > mine for other in scores) for mine in scores]
        assert all(0 < p.seconds_played <= 600 for t in match.teams for p in t.players)


def test_the_placebo_keeps_team_scores_and_moves_player_scores() -> None:
    """Shuffling within teams keeps every team's score (so ranks and margins) and changes players'."""
    placebo = shuffle_scores(DATA.events, seed=1)
    assert [team_scores(e) for e in placebo] == [team_scores(e) for e in DATA.events]
    assert placebo != DATA.events


def test_per_player_scores_recover_true_skills_better_and_the_placebo_removes_the_gain() -> None:
    """Correlation of rated means with the true skills: player_scores beat the order alone by
    at least 0.02; with scores shuffled within teams the gain is gone."""
    order = recovery(final_means(DATA.events, LADDERS, "order"), DATA.truth)
    scores = recovery(final_means(DATA.events, LADDERS, "scores"), DATA.truth)
    placebo = recovery(final_means(shuffle_scores(DATA.events, seed=1), LADDERS, "scores"), DATA.truth)
    assert scores > order + 0.02
    assert placebo < order + 0.005


@pytest.mark.parametrize("ladder", ["scores", "both"])
def test_stream_equals_replay_with_the_evidence_options(ladder) -> None:
    """One match per batch (a stream) and 1000 per batch (a replay) give the same states to the
    bit, and a second replay gives them again."""
    matches = [parse_match({**e, "ladder": ladder}, LADDERS) for e in DATA.events[:600]]

    async def states(batch: int) -> dict:
        processor = Processor(LADDERS, MemoryStore())
        after: dict = {}
        await replay(
            matches,
            processor,
            batch_size=batch,
            on_result=lambda r: after.update({e["player_id"]: e["after"] for e in r.events}),
        )
        return after

    replayed = asyncio.run(states(1000))
    assert asyncio.run(states(1)) == replayed == asyncio.run(states(1000))
    assert final_means(DATA.events[:600], LADDERS, ladder) != final_means(DATA.events[:600], LADDERS, "order")


def test_synth_command_writes_events_and_truth(tmp_path: Path, capsys) -> None:
    """``synth --out --truth`` writes JSON lines a replay accepts and the final true skills."""
    out, truth = tmp_path / "m.jsonl", tmp_path / "truth.csv"
    assert (
        main(["synth", "--matches", "30", "--players", "20", "--out", str(out), "--truth", str(truth)]) == 0
    )
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert events == generate(SynthConfig(matches=30, players=20)).events
    rows = list(csv.reader(truth.open()))
    assert rows[0] == ["player_id", "true_skill"] and len(rows) == 21
    assert main(["synth", "--matches", "30", "--players", "20", "--placebo"]) == 0
    placebo = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert placebo == shuffle_scores(events, 0)


def test_parties_mark_a_teams_first_players_and_change_nothing_else() -> None:
    """With ``party_share`` the first ``party_size`` players of some teams share a party id;
    without a bonus the rest of the data is the one generated without parties."""
    plain = generate(SynthConfig(matches=300, seed=7))
    marked = generate(SynthConfig(matches=300, seed=7, party_share=0.5))
    strip = [
        {
            **e,
            "teams": [
                {"players": [{k: v for k, v in p.items() if k != "party"} for p in t["players"]]}
                for t in e["teams"]
            ],
        }
        for e in marked.events
    ]
    assert strip == plain.events
    parties = [[p.get("party") for p in t["players"]] for e in marked.events for t in e["teams"]]
    assert 0.4 < sum(ids[0] is not None for ids in parties) / len(parties) < 0.6
    assert all(ids[0] == ids[1] and ids[2] is None for ids in parties)


def test_a_real_party_advantage_is_learned_and_improves_prediction_and_the_placebo_learns_none() -> None:
    """Parties whose two players each perform 4 points better: ``party_effects`` learns
    ``party:2`` more than three of its σ above zero and lowers TrueSkill's wrong-order rate
    and log-loss; the same parties without the advantage (placebo) learn an effect within
    one σ of zero."""
    study = party_study(SynthConfig(matches=3000, seed=7, party_share=0.5, party_bonus=4.0))
    real, placebo = study["real"], study["placebo"]
    assert real["effect"] > 3 * real["effect_sigma"] > 3.0
    assert abs(placebo["effect"]) < placebo["effect_sigma"]
    assert real["parties_wrong_order"] < real["plain_wrong_order"]
    assert real["parties_log_loss"] < real["plain_log_loss"]
