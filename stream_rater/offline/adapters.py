"""Input adapters: files of match results → match-finished wire objects, with line numbers.

Formats (``--format``):

- ``jsonl`` — one match-finished event (README "Event contracts") per line; blank lines are skipped.
- ``football`` — the international football results CSV in ``shared/data``
  (``date,home_team,away_team,home_score,away_score,tournament,city,country,neutral``).
  Each row is a 1-vs-1 match ranked by goals; ``match_id`` is ``date:home:away`` (a repeated
  key gets ``#2``, ``#3``…). The goals are each team's score and its one player's, so
  TrueSkill's ``margin_scale`` sees the goal difference. With ``home_effect`` the home team of a non-neutral match carries
  the ``home`` context effect.
- ``player-rows`` — CSV rows ``finished_at,match_id,player_id,team,score[,seconds_played]``
  (optional header). A match's rows must be contiguous; a team's score is the sum of its
  players' scores and decides the ranking.

Adapters only reshape; validation is `contracts.parse_match`'s job, so a bad row surfaces there
with its line number like any other bad event.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

FORMATS = ("jsonl", "football", "player-rows")


@dataclass(frozen=True, slots=True)
class InputRecord:
    """One event read from `source` at `line`, or the reason it could not be read."""

    source: str
    line: int
    event: dict[str, Any] | None
    error: str | None = None

    @property
    def where(self) -> str:
        """``file:line`` for error messages."""
        return f"{self.source}:{self.line}"


def read_records(
    streams: Iterable[tuple[str, TextIO]], fmt: str = "jsonl", *, home_effect: bool = False
) -> Iterator[InputRecord]:
    """Records of every (name, stream) in turn, in the given format."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown input format {fmt!r} (known: {', '.join(FORMATS)})")
    for name, stream in streams:
        if fmt == "jsonl":
            yield from _jsonl(name, stream)
        elif fmt == "football":
            yield from _football(name, stream, home_effect=home_effect)
        else:
            yield from _player_rows(name, stream)


def open_text(path: str | Path) -> TextIO:
    """A text stream of `path` for the adapters; ``.gz`` files are decompressed."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _jsonl(name: str, stream: TextIO) -> Iterator[InputRecord]:
    for number, text in enumerate(stream, start=1):
        if not text.strip():
            continue
        try:
            event = json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            yield InputRecord(name, number, None, f"not valid JSON: {exc}")
            continue
        yield InputRecord(name, number, event)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


_FOOTBALL_COLUMNS = [
    "date",
    "home_team",
    "away_team",
    "home_score",
    "away_score",
    "tournament",
    "city",
    "country",
    "neutral",
]


def _football(name: str, stream: TextIO, *, home_effect: bool) -> Iterator[InputRecord]:
    rows = csv.reader(stream)
    header = next(rows, None)
    if header != _FOOTBALL_COLUMNS:
        yield InputRecord(name, 1, None, f"header must be {','.join(_FOOTBALL_COLUMNS)}")
        return
    seen: dict[str, int] = {}
    for number, row in enumerate(rows, start=2):
        if len(row) != len(_FOOTBALL_COLUMNS):
            yield InputRecord(
                name, number, None, f"expected {len(_FOOTBALL_COLUMNS)} columns, got {len(row)}"
            )
            continue
        date, home, away, home_score, away_score, *_, neutral = row
        try:
            goals = (int(home_score), int(away_score))
        except ValueError:
            yield InputRecord(
                name, number, None, f"scores must be integers, got {home_score!r}, {away_score!r}"
            )
            continue
        key = f"{date}:{home}:{away}"
        seen[key] = seen.get(key, 0) + 1
        match_id = key if seen[key] == 1 else f"{key}#{seen[key]}"
        home_team: dict[str, Any] = {"score": goals[0], "players": [{"id": home, "score": goals[0]}]}
        if home_effect and neutral.strip().upper() == "FALSE":
            home_team["effects"] = ["home"]
        event = {
            "match_id": match_id,
            "finished_at": f"{date}T00:00:00Z",
            "teams": [home_team, {"score": goals[1], "players": [{"id": away, "score": goals[1]}]}],
        }
        yield InputRecord(name, number, event)


def _player_rows(name: str, stream: TextIO) -> Iterator[InputRecord]:
    current: dict[str, Any] | None = None
    teams: dict[str, list[dict[str, Any]]] = {}
    start = 0
    done: set[str] = set()

    def finish() -> InputRecord:
        assert current is not None
        current["teams"] = [
            {"score": sum(p.get("score", 0.0) for p in players), "players": players}
            for players in teams.values()
        ]
        return InputRecord(name, start, current)

    for number, row in enumerate(csv.reader(stream), start=1):
        if not row or (number == 1 and row[0].strip() == "finished_at"):
            continue
        if len(row) not in (5, 6):
            yield InputRecord(name, number, None, f"expected 5 or 6 columns, got {len(row)}")
            continue
        finished_at, match_id, player_id, team, score, *rest = (c.strip() for c in row)
        try:
            player: dict[str, Any] = {"id": player_id, "score": float(score)}
            if rest:
                player["seconds_played"] = float(rest[0])
        except ValueError:
            yield InputRecord(name, number, None, "score and seconds_played must be numbers")
            continue
        if current is None or match_id != current["match_id"]:
            if current is not None:
                done.add(current["match_id"])
                yield finish()
            if match_id in done:
                yield InputRecord(name, number, None, f"rows of match {match_id!r} are not contiguous")
                current = None
                continue
            current, teams, start = {"match_id": match_id, "finished_at": _timestamp(finished_at)}, {}, number
        teams.setdefault(team, []).append(player)
    if current is not None:
        yield finish()


def _timestamp(text: str) -> str | float:
    try:
        return float(text)
    except ValueError:
        return text
