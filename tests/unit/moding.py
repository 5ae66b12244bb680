"""What the tests of ladders with modes (issue 48) share: a moded ladder, mixed-mode matches
among players who cross between the modes, and the per-mode event chain check."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished, Player, Team
from stream_rater.contracts.modes import stored_id

MODES = {"duel": {"draw_probability": 0.02}, "ffa": {}, "team": {}}


def arena(name: str = "arena") -> Ladder:
    """A TrueSkill ladder with three modes, one overriding the draw probability."""
    return Ladder(name, "trueskill", {"mode_coupling": 0.6, "draw_probability": 0.1}, modes=MODES)


def arena_ladders(name: str = "arena") -> Ladders:
    return Ladders([arena(name)])


def moded(
    mid: str, mode: str, *teams: Sequence[str], at: float = 1_000_000.0, ladder: str = "arena"
) -> MatchFinished:
    """A match of `mode` where team i has rank i."""
    return MatchFinished(
        mid,
        ladder,
        at,
        tuple(Team(tuple(Player(p) for p in team), rank=float(r)) for r, team in enumerate(teams, 1)),
        mode=mode,
    )


def mixed(n: int, seed: int = 7, ladder: str = "arena") -> list[MatchFinished]:
    """`n` matches of every mode among 12 players, who cross between the modes."""
    rng = random.Random(seed)
    players = [f"p{i}" for i in range(12)]
    out = []
    for i in range(n):
        mode = rng.choice(list(MODES))
        picked = rng.sample(players, {"duel": 2, "ffa": 4, "team": 4}[mode])
        teams = [picked[:2], picked[2:]] if mode == "team" else [[p] for p in picked]
        out.append(moded(f"m{i}", mode, *teams, at=1_000_000.0 + i, ladder=ladder))
    return out


def chained(events: list, states: dict) -> None:
    """Each (player, mode)'s events in order chain before → after and end at its stored state;
    its match events count its games 1, 2, …, its cross events keep the count."""
    chains: dict[str, list] = {}
    for e in events:
        chains.setdefault(stored_id(e["mode"], e["player_id"]), []).append(e)
    assert chains.keys() == states.keys()
    for sid, chain in chains.items():
        assert [e["games"] for e in chain if e.get("kind", "match") == "match"] == list(
            range(1, states[sid].games + 1)
        )
        for prev, nxt in itertools.pairwise(chain):
            assert nxt["before"] == prev["after"], sid
            assert nxt["games"] == prev["games"] + (nxt.get("kind", "match") == "match"), sid
        assert (chain[-1]["after"]["mu"], chain[-1]["after"]["sigma"]) == (states[sid].mu, states[sid].sigma)
