"""A match event's ``mode`` (issue 48): parsed on a moded ladder, refused with its reason
(the DLQ's) otherwise; stored ids and board names split back exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import ValidationError, parse_match
from stream_rater.contracts.modes import board_name, split_board, split_stored, stored_id
from stream_rater.service.batch_metrics import _reason_label

TOML = """\
[ladders.arena]
model = "trueskill"
{extra}
[ladders.arena.modes.duel]
draw_probability = 0.08

[ladders.arena.modes.ffa]
"""


def ladders(tmp_path: Path, extra: str = "") -> Ladders:
    path = tmp_path / "ladders.toml"
    path.write_text(TOML.format(extra=extra))
    return Ladders.from_toml(str(path))


def event(**fields: Any) -> dict[str, Any]:
    teams = [{"rank": 1, "players": [{"id": "a"}]}, {"rank": 2, "players": [{"id": "b"}]}]
    return {"match_id": "m1", "ladder": "arena", "finished_at": 0, "teams": teams, **fields}


def test_a_declared_mode_is_parsed_and_kept_in_the_wire_form(tmp_path: Path) -> None:
    match = parse_match(event(mode="duel"), ladders(tmp_path))
    assert match.mode == "duel"
    assert match.to_dict()["mode"] == "duel"
    assert parse_match(match.to_dict(), ladders(tmp_path)) == match


def test_a_ladder_without_modes_keeps_matches_unmoded(tmp_path: Path) -> None:
    match = parse_match(event(ladder="default"), ladders(tmp_path))
    assert match.mode is None and "mode" not in match.to_dict()


def test_the_default_mode_stands_for_a_match_naming_none(tmp_path: Path) -> None:
    match = parse_match(event(), ladders(tmp_path, 'default_mode = "ffa"\n'))
    assert match.mode == "ffa"


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({}, "mode: ladder 'arena' has modes (duel, ffa) and no default mode: name one"),
        ({"mode": "ctf"}, "mode: ladder 'arena' has no mode 'ctf' (its modes: duel, ffa)"),
        ({"mode": "Duel"}, "mode: must be a plain word"),
        ({"mode": "duel@x"}, "mode: must be a plain word"),
        ({"mode": 3}, "mode: must be a plain word: a lower-case letter, then up to 31 lower-case"),
        ({"ladder": "default", "mode": "duel"}, "mode: ladder 'default' has no modes, the event says 'duel'"),
    ],
)
def test_bad_modes_are_refused_with_their_reason(tmp_path: Path, fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_match(event(**fields), ladders(tmp_path))
    assert str(info.value).startswith(reason)
    assert _reason_label(info.value) == "mode"  # the dead-letter metric's reason


def test_stored_ids_and_board_names_split_back_whatever_the_player_id() -> None:
    assert split_stored(stored_id("duel", "p@x.org")) == ("duel", "p@x.org")
    assert split_board(board_name("arena", "ffa")) == ("arena", "ffa")
    assert split_board(board_name("arena", None)) == ("arena", None)
