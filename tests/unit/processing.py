"""What the processor's tests and the known-states tests share: their ladders, a fixed clock and
an N-team match on them."""

from __future__ import annotations

from stream_rater.config.ladders import Ladder, Ladders
from tests.helpers import parsed_match

LADDERS = Ladders(
    [
        Ladder("default", "trueskill"),
        Ladder("timed", "trueskill", {"time_tau": 1.0, "time_unit": "days"}),
        Ladder("sph", "sph-elo"),
    ]
)


def match(mid: str, *teams: list[str], ladder: str = "default", at: float = 1_000_000.0, **team_extra):
    """A valid match where team i has rank i and players given by id."""
    return parsed_match(LADDERS, mid, *teams, ladder=ladder, at=at)


def fixed_clock() -> float:
    return 1_700_000_000.0
