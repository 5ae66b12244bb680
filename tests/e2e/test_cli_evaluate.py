"""``stream-rater evaluate`` and ``tune`` as users run them, on a slice of the football results."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from functools import partial
from pathlib import Path

import pytest

from stream_rater.local.demo import default_data_file
from tests import helpers

pytestmark = pytest.mark.e2e

ROWS = 1500


@pytest.fixture(scope="module")
def football(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The header and first `ROWS` results of the shipped football CSV."""
    path = tmp_path_factory.mktemp("football") / "football.csv"
    with gzip.open(default_data_file(), "rt", encoding="utf-8", newline="") as source:
        path.write_text("".join(itertools.islice(source, ROWS + 1)), encoding="utf-8")
    return path


#: ``stream-rater ARGS``, failing the test on a non-zero exit.
cli = partial(helpers.cli, check=True)


def test_evaluate_prints_metrics_as_json(football: Path) -> None:
    """``evaluate --json`` scores every match and gives wrong order, log-loss, Brier, calibration and periods."""
    out = json.loads(cli("evaluate", "--format", "football", "--home-effect", "--json", str(football)).stdout)
    assert out["matches"] == ROWS
    assert 0 < out["pairs"] < out["two_team"] == ROWS  # TrueSkill predicts draws: every duel is scored
    assert 0.0 < out["wrong_order"] < 0.5
    assert 0.0 < out["brier"] < 1 / 3 and 0.0 < out["log_loss"] < math.log(3)  # better than a uniform guess
    assert len(out["calibration"]) == 10
    assert sum(b["count"] for b in out["calibration"]) == out["two_team"]
    assert sum(p["pairs"] for p in out["over_time"]) == out["pairs"]
    assert out["over_time"][0]["start"].startswith("1873-03-08")


def test_evaluate_prints_a_report_and_saves_a_plot(football: Path, tmp_path: Path) -> None:
    """The text report names each metric and ``--plot`` writes a PNG image."""
    plot = tmp_path / "eval.png"
    result = cli("evaluate", "--format", "football", "--param", "tau=0.1", "--plot", str(plot), str(football))
    for label in ("wrong order", "log-loss", "Brier score", "calibration", "wrong order over time"):
        assert label in result.stdout
    assert f"{ROWS} read, {ROWS} applied" in result.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tune_is_no_worse_than_baseline_on_the_fit_part(football: Path) -> None:
    """``tune --json`` reports baseline and tuned metrics per part, the tuned objective on the fit part at most the baseline's."""
    result = cli(
        "tune",
        "--format",
        "football",
        "--home-effect",
        "--param",
        "time_unit=years",
        "--tune",
        "beta,time_tau",
        "--max-trials",
        "12",
        "--json",
        str(football),
    )
    out = json.loads(result.stdout)
    assert out["objective"] == "log_loss" and out["matches"] == ROWS
    assert out["fit_matches"] == round(0.3 * ROWS)
    assert 0 < out["trials"] <= 12 + 2  # Nelder-Mead may finish its last step
    assert "trial 1: beta=4.167 time_tau=0.001" in result.stderr
    for scores in (out["baseline"], out["tuned"]):
        assert scores["params"]["time_unit"] == "years"
        for part in ("fit", "rest", "all"):
            assert set(scores[part]) == {
                "matches",
                "pairs",
                "wrong_order",
                "log_loss",
                "brier",
                "expected_calibration_error",
            }
        assert scores["fit"]["matches"] + scores["rest"]["matches"] == scores["all"]["matches"] == ROWS
    assert set(out["tuned"]["params"]) == {"time_unit", "beta", "time_tau", "calibration"}
    assert out["tuned"]["params"]["calibration"].startswith("draw:")  # calibrated by default
    assert out["tuned"]["fit"]["log_loss"] <= out["baseline"]["fit"]["log_loss"]


def test_evaluate_and_tune_with_modes_report_per_mode(football: Path) -> None:
    """``--modes competition``: the metrics per competition class beside all of them, and
    ``tune`` fits the coupling and each mode's calibration."""
    evaluated = json.loads(
        cli("evaluate", "--format", "football", "--modes", "competition", "--json", str(football)).stdout
    )
    assert set(evaluated) == {"all", "friendly", "finals"}  # no qualifiers before 1908
    assert (
        evaluated["friendly"]["matches"] + evaluated["finals"]["matches"]
        == evaluated["all"]["matches"]
        == ROWS
    )
    tuned = json.loads(
        cli("tune", "--format", "football", "--modes", "competition", "--json", str(football)).stdout
    )
    assert 0.0 <= tuned["coupling"] <= 1.0 and tuned["form"] == "cross"  # what a worker does
    assert {m: set(p) for m, p in tuned["modes"].items()} == {
        "finals": {"calibration"},
        "friendly": {"calibration"},
    }
    rest = tuned["tuned"][1]
    assert rest["all"]["matches"] == ROWS - tuned["fit_matches"]
