"""Questions about a ladder's live ratings — batch lookup, leaderboard, predictions, balanced
teams — that the HTTP API (worker and ``stream-rater serve``), the CLI and Python callers share
(`reads.Queries`), and what a request names, checked (`arguments`). Read-only."""

from stream_rater.queries.arguments import (
    AROUND_N,
    LEADERBOARD_TOP,
    MAX_AROUND_N,
    MAX_LEADERBOARD_TOP,
    NotRanked,
    QueryError,
    TooManyPlayers,
    UnknownLadder,
    UnknownPlayer,
    ladder_of,
    limit_of,
    n_of,
    season_of,
    team_arguments,
    top_of,
    whole_number,
)
from stream_rater.queries.reads import Queries

__all__ = [
    "AROUND_N",
    "LEADERBOARD_TOP",
    "MAX_AROUND_N",
    "MAX_LEADERBOARD_TOP",
    "NotRanked",
    "Queries",
    "QueryError",
    "TooManyPlayers",
    "UnknownLadder",
    "UnknownPlayer",
    "ladder_of",
    "limit_of",
    "n_of",
    "season_of",
    "team_arguments",
    "top_of",
    "whole_number",
]
