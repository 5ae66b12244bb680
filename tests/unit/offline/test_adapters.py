"""The offline adapters: the football adapter's goals as player scores, ids and ranks unchanged."""

from __future__ import annotations

import io

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.offline.adapters import read_records

FOOTBALL = """date,home_team,away_team,home_score,away_score,tournament,city,country,neutral
1872-11-30,Scotland,England,0,0,Friendly,Glasgow,Scotland,FALSE
1873-03-08,England,Scotland,4,2,Friendly,London,England,FALSE
1873-03-08,England,Scotland,1,3,Friendly,London,England,TRUE
"""
MARGINS = Ladders([Ladder("default", "trueskill", {"margin_scale": 1.0})])


def test_football_goals_are_each_sides_player_score_with_ids_and_ranks_unchanged() -> None:
    """Each side's goals are its team score and its one player's score; ids and ranks as before."""
    records = list(read_records([("f.csv", io.StringIO(FOOTBALL))], "football"))
    assert [r.event["match_id"] for r in records] == [
        "1872-11-30:Scotland:England",
        "1873-03-08:England:Scotland",
        "1873-03-08:England:Scotland#2",
    ]
    for record in records:
        for team in record.event["teams"]:
            assert [p["score"] for p in team["players"]] == [team["score"]]
    matches = [parse_match(r.event, MARGINS) for r in records]
    assert [m.ranks() for m in matches] == [[1.0, 1.0], [1.0, 2.0], [2.0, 1.0]]
