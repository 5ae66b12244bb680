"""A ladder's modes (`config.modes`): tables, overrides, coupling, default mode, and errors
that say file:line and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_rater.config.ladders import LadderConfigError, Ladders

BASE = """\
[ladders.arena]
model = "trueskill"
mode_coupling = 0.7
draw_probability = 0.1

[ladders.arena.modes.duel]
draw_probability = 0.02

[ladders.arena.modes.ffa]

[ladders.arena.shadows.wide]
model = "trueskill"
mode_coupling = 0.2
"""


def load(tmp_path: Path, text: str) -> Ladders:
    path = tmp_path / "ladders.toml"
    path.write_text(text)
    return Ladders.from_toml(str(path))


def test_modes_override_the_ladders_parameters_with_their_own_model(tmp_path: Path) -> None:
    arena = load(tmp_path, BASE)["arena"]
    assert list(arena.modes) == ["duel", "ffa"]
    duel, ffa = arena.mode_ladder("duel"), arena.mode_ladder("ffa")
    assert duel.params["draw_probability"] == 0.02 and ffa.params["draw_probability"] == 0.1
    assert duel.rating_model is not ffa.rating_model is not arena.rating_model
    assert arena.mode_ladder("duel") is duel
    assert arena.mode_coupling == 0.7 and arena.default_mode is None


def test_a_shadow_has_the_ladders_modes_and_may_try_another_coupling(tmp_path: Path) -> None:
    shadow = load(tmp_path, BASE)["arena"].shadows[0]
    assert list(shadow.modes) == ["duel", "ffa"] and shadow.mode_coupling == 0.2


def test_the_coupling_defaults_to_a_half(tmp_path: Path) -> None:
    ladders = load(tmp_path, BASE.replace("mode_coupling = 0.7\n", ""))
    assert ladders["arena"].mode_coupling == 0.5


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "[ladders.arena.modes.ffa]",
            "[ladders.arena.modes.Ffa]",
            ":9: [ladders.arena.modes.Ffa]: mode name 'Ffa' must be a plain word",
        ),
        (
            "draw_probability = 0.02",
            "k2 = 1",
            ":7: [ladders.arena.modes.duel] k2: model 'trueskill' has no parameter 'k2'",
        ),
        (
            "draw_probability = 0.02",
            "draw_probability = 2.0",
            ":7: [ladders.arena.modes.duel] draw_probability: mode 'duel':",
        ),
        (
            "mode_coupling = 0.7",
            "mode_coupling = 1.5",
            "mode_coupling: must be a number from 0 to 1, got 1.5",
        ),
        (
            "mode_coupling = 0.7",
            'default_mode = "ctf"',
            "default_mode: 'ctf' is not a mode of ladder 'arena'",
        ),
    ],
)
def test_bad_modes_are_config_errors_saying_where(tmp_path: Path, old: str, new: str, message: str) -> None:
    with pytest.raises(LadderConfigError) as info:
        load(tmp_path, BASE.replace(old, new, 1))
    assert message in str(info.value)


def test_mode_parameters_need_modes(tmp_path: Path) -> None:
    with pytest.raises(LadderConfigError, match="mode_coupling: ladder 'solo' has no modes"):
        load(tmp_path, '[ladders.solo]\nmodel = "elo"\nmode_coupling = 0.5\n')
