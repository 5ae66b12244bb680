"""What the shadow tests share (issue #38): a ladder with two shadows and duels on it."""

from __future__ import annotations

import random

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished
from tests.helpers import parsed_duel

#: The shadows' models and parameters: TrueSkill with a wider β, and Elo.
SHADOW_MODELS = {"wide": ("trueskill", {"beta": 10.0, "draw_probability": 0.0}), "elo": ("elo", {"k": 24.0})}


def live(name: str = "duel") -> Ladder:
    """The live ladder `name` as it is without shadows."""
    return Ladder(name, "trueskill", {"k": 2})


def shadowed(name: str = "duel") -> Ladders:
    """`live(name)` with the shadows of `SHADOW_MODELS`."""
    shadows = tuple(Ladder(f"{name}~{s}", m, p, shadow_of=name) for s, (m, p) in SHADOW_MODELS.items())
    return Ladders([Ladder(name, "trueskill", {"k": 2}, shadows=shadows)])


def alone(shadow: Ladder, name: str) -> Ladders:
    """The oracle's configuration: a live ladder `name` with `shadow`'s model and parameters."""
    return Ladders([Ladder(name, shadow.model, shadow.params)])


SHADOWED = shadowed()


def duels(n: int, ladder: str = "duel", seed: int = 7) -> list[MatchFinished]:
    """`n` duels of `ladder` among eight players, draws included, one second apart."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.sample("abcdefgh", 2)
        ranks = rng.choice([(0, 1), (1, 0), (0, 0)])
        out.append(parsed_duel(shadowed(ladder), f"m{i}", a, b, ladder=ladder, ranks=ranks, at=1_000_000 + i))
    return out
