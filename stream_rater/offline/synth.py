"""Synthetic team games whose per-player scores and margins depend on known, drifting skills,
and how well a ladder recovers those skills (`recovery`).

The generative model (`SynthConfig` holds its parameters):

1. ``players`` players get true skills ``s ~ N(mu, skill_sd**2)``; at the start of every day
   each skill takes a random-walk step ``N(0, drift**2)``.
2. Each match draws ``teams * team_size`` distinct players uniformly; ``matches_per_day``
   matches a day, in order.
3. A player plays the whole ``minutes`` or, with probability ``partial``, a uniform 30-100 %
   of it (``seconds_played``).
4. Each player performs ``p ~ N(s, beta**2)`` (TrueSkill's eq. 2 model), and scores
   ``Poisson(points_per_minute * minutes played * exp(score_slope * (p - mean p)))`` points,
   ``mean p`` over the match's players: as in TrueSkill 2, a player's count depends on its
   performance relative to everyone in the match, per time played.
5. A team's score is the sum of its players' points; the ranking follows the team scores
   (equal scores draw), so the margin is the points difference.
6. Premade parties (off unless ``party_share`` > 0): with probability ``party_share`` a team's
   first ``party_size`` players queued together — they carry one ``party`` id and perform as
   if ``party_bonus`` more skilled (coordination). ``party_bonus = 0`` is the placebo: the
   same party ids, no strength behind them. The parties draw from a random stream of their
   own, so the rest of the data is the same with and without them.

The events are match-finished wire objects with per-player ``score`` and
``seconds_played`` and no ``rank``. `shuffle_scores` is the placebo: it permutes the
(score, seconds) pairs within each team, keeping every team's score (so ranks and margins)
and destroying only the per-player evidence.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stream_rater.contracts import parse_match

if TYPE_CHECKING:
    from stream_rater.config.ladders import Ladders
    from stream_rater.processor import MatchResult


@dataclass(frozen=True, slots=True)
class SynthConfig:
    """Parameters of the generative model (module docs), with their defaults."""

    players: int = 200
    matches: int = 4000
    teams: int = 2
    team_size: int = 4
    mu: float = 25.0
    skill_sd: float = 25.0 / 3.0
    beta: float = 25.0 / 6.0
    drift: float = 0.1
    matches_per_day: int = 100
    minutes: float = 10.0
    partial: float = 0.2
    points_per_minute: float = 0.5
    score_slope: float = 0.25
    party_share: float = 0.0
    party_size: int = 2
    party_bonus: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.teams < 2 or self.team_size < 1 or self.players < self.teams * self.team_size:
            raise ValueError("need at least 2 teams of 1 player, and enough players to fill a match")
        if self.matches < 1 or self.matches_per_day < 1:
            raise ValueError("matches and matches_per_day must be at least 1")
        if not (0.0 <= self.partial <= 1.0 and 0.0 <= self.party_share <= 1.0):
            raise ValueError("partial and party_share must be probabilities")
        if not 2 <= self.party_size <= self.team_size and self.party_share:
            raise ValueError("party_size must be from 2 to team_size")


@dataclass(frozen=True, slots=True)
class Synthetic:
    """Generated events (match-finished wire objects, in order) and each player's true skill
    after the last match."""

    events: list[dict[str, Any]]
    truth: dict[str, float]


def generate(config: SynthConfig) -> Synthetic:
    """The events and final true skills of `config`'s generative model; the same config
    (seed included) gives the same data."""
    import numpy as np  # only here: building the ``synth`` command's flags stays light

    rng = np.random.default_rng(config.seed)
    ids = [f"p{i:05d}" for i in range(config.players)]
    skills = rng.normal(config.mu, config.skill_sd, config.players)
    size = config.teams * config.team_size
    full = config.minutes * 60.0
    party_rng = np.random.default_rng([config.seed, 1])
    events = []
    for n in range(config.matches):
        day, slot = divmod(n, config.matches_per_day)
        if slot == 0 and n:
            skills += rng.normal(0.0, config.drift, config.players)
        chosen = rng.choice(config.players, size, replace=False)
        seconds = np.where(rng.random(size) < config.partial, rng.uniform(0.3, 1.0, size) * full, full)
        performance = rng.normal(skills[chosen], config.beta)
        parties = _parties(party_rng, config)
        performance += config.party_bonus * (parties >= 0)
        rate = config.points_per_minute * seconds / 60.0
        points = rng.poisson(rate * np.exp(config.score_slope * (performance - performance.mean())))
        teams = [
            {
                "players": [
                    {
                        "id": ids[chosen[k]],
                        "score": int(points[k]),
                        "seconds_played": round(float(seconds[k]), 1),
                    }
                    | ({"party": f"synth-{n}-{parties[k]}"} if parties[k] >= 0 else {})
                    for k in range(t * config.team_size, (t + 1) * config.team_size)
                ]
            }
            for t in range(config.teams)
        ]
        events.append({"match_id": f"synth-{n}", "finished_at": day * 86400 + slot, "teams": teams})
    return Synthetic(events, {pid: float(s) for pid, s in zip(ids, skills)})


def _parties(rng: Any, config: SynthConfig) -> Any:
    """Per slot of one match: the index of the team whose party the player is in, or -1
    (module docs, step 6); all -1 without parties, drawing nothing from `rng`."""
    import numpy as np

    parties = np.full(config.teams * config.team_size, -1)
    if config.party_share > 0.0:
        for t in np.flatnonzero(rng.random(config.teams) < config.party_share):
            start = t * config.team_size
            parties[start : start + config.party_size] = t
    return parties


def shuffle_scores(events: Iterable[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """The placebo: each team's (score, seconds_played) pairs permuted among its players;
    team scores, ranks and margins unchanged."""
    rng = random.Random(seed)
    shuffled = []
    for event in events:
        teams = []
        for team in event["teams"]:
            players = team["players"]
            stats = [(p["score"], p["seconds_played"]) for p in players]
            rng.shuffle(stats)
            teams.append(
                {
                    **team,
                    "players": [
                        {**p, "score": score, "seconds_played": seconds}
                        for p, (score, seconds) in zip(players, stats)
                    ],
                }
            )
        shuffled.append({**event, "teams": teams})
    return shuffled


def final_means(events: Iterable[dict[str, Any]], ladders: Ladders, ladder: str) -> dict[str, float]:
    """Each player's rating mean after replaying `events` on `ladder` (a fresh in-memory
    store, the same `Processor` as the stream)."""
    from stream_rater.offline.replay import replay
    from stream_rater.processor import Processor
    from stream_rater.store.memory import MemoryStore

    means: dict[str, float] = {}

    def keep(result: MatchResult) -> None:
        for event in result.events:
            means[event["player_id"]] = event["after"]["mu"]

    matches = [parse_match({**e, "ladder": ladder}, ladders) for e in events]
    asyncio.run(replay(matches, Processor(ladders, MemoryStore()), on_result=keep))
    return means


def party_study(config: SynthConfig) -> dict[str, dict[str, float]]:
    """What ``party_effects`` does on `config`'s data (``real``) and on its placebo (the same
    parties with ``party_bonus`` 0): per data set, the learned ``party:<party_size>`` effect
    (its final μ and σ; the effect drifts like a player, so σ stays near 1.3) and TrueSkill's wrong-order rate and log-loss (`offline.evaluate`) without
    and with the rule."""
    from dataclasses import replace

    from stream_rater.config.ladders import Ladder, Ladders
    from stream_rater.offline.evaluate import score
    from stream_rater.offline.replay import replay
    from stream_rater.processor import Processor
    from stream_rater.store.memory import MemoryStore

    ladders = Ladders([Ladder("plain", "trueskill"), Ladder("parties", "trueskill", {"party_effects": True})])
    study: dict[str, dict[str, float]] = {}
    for name, bonus in (("real", config.party_bonus), ("placebo", 0.0)):
        events = generate(replace(config, party_bonus=bonus)).events
        row: dict[str, float] = {}
        for ladder in ("plain", "parties"):
            matches = [parse_match({**e, "ladder": ladder}, ladders) for e in events]
            _, whole, _ = score([matches], ladders)
            row[f"{ladder}_wrong_order"] = whole.metric("wrong_order")
            row[f"{ladder}_log_loss"] = whole.metric("log_loss")
        store = MemoryStore()
        matches = [parse_match({**e, "ladder": "parties"}, ladders) for e in events]
        asyncio.run(replay(matches, Processor(ladders, store)))
        effects = asyncio.run(store.players("parties", effects=True))
        learned = effects[f"party:{config.party_size}"]
        row["effect"], row["effect_sigma"] = learned.mu, learned.sigma or 0.0
        study[name] = row
    return study


def recovery(means: Mapping[str, float], truth: Mapping[str, float]) -> float:
    """Pearson correlation of the rated means with the true skills over the rated players
    (scale-free: TrueSkill's units need not be the generator's)."""
    rated = sorted(means)
    return statistics.correlation([means[p] for p in rated], [truth[p] for p in rated])


@dataclass(frozen=True, slots=True)
class ModesConfig:
    """Duels in several modes of one ladder (issue 48's acceptance shape: a small mode whose
    players are veterans of a large one). Each player has a shared skill
    ``s ~ N(mu, skill_sd**2)`` and per mode an offset ``o ~ N(0, offset_sd**2)``; in a mode
    they perform ``N(s + o, beta**2)``, and the better performance wins. The first mode of
    `modes` is open from the start; the others open after `opens` of the matches, to the
    first `veterans` share of the players only. `modes` gives each mode's share of the
    matches once open. The modes' skills correlate by ``skill_sd² / (skill_sd² + offset_sd²)``
    (0.8 by default, with TrueSkill's prior variance split between the two)."""

    players: int = 300
    matches: int = 6000
    modes: tuple[tuple[str, float], ...] = (("large", 0.8), ("small", 0.2))
    opens: float = 0.3
    veterans: float = 0.5
    mu: float = 25.0
    skill_sd: float = 25.0 / 3.0 * 0.8**0.5
    offset_sd: float = 25.0 / 3.0 * 0.2**0.5
    beta: float = 25.0 / 6.0
    seed: int = 0

    @property
    def correlation(self) -> float:
        """The true correlation of a player's skills in two modes."""
        return self.skill_sd**2 / (self.skill_sd**2 + self.offset_sd**2)


@dataclass(frozen=True, slots=True)
class ModesSynthetic:
    """``(mode, event)`` pairs in order, and each player's true offset per mode."""

    events: list[tuple[str, dict[str, Any]]]
    offsets: dict[tuple[str, str], float]


def generate_modes(config: ModesConfig) -> ModesSynthetic:
    """The labelled duels of `config`'s model; the same config (seed included) gives the same data."""
    import numpy as np

    rng = np.random.default_rng(config.seed)
    ids = [f"p{i:05d}" for i in range(config.players)]
    names = [name for name, _ in config.modes]
    skills = rng.normal(config.mu, config.skill_sd, config.players)
    offsets = rng.normal(0.0, config.offset_sd, (len(names), config.players))
    shares = np.array([share for _, share in config.modes], dtype=float)
    pool = max(2, round(config.players * config.veterans))
    events = []
    for n in range(config.matches):
        opened = n >= config.opens * config.matches
        k = int(rng.choice(len(names), p=shares / shares.sum())) if opened else 0
        a, b = rng.choice(config.players if k == 0 else pool, 2, replace=False)
        perf = rng.normal(skills[[a, b]] + offsets[k, [a, b]], config.beta)
        ranks = (0, 1) if perf[0] > perf[1] else (1, 0)
        teams = [{"rank": r, "players": [{"id": ids[p]}]} for p, r in zip((a, b), ranks)]
        events.append((names[k], {"match_id": f"modes-{n}", "finished_at": n * 3600, "teams": teams}))
    truth = {
        (ids[p], names[k]): float(offsets[k, p]) for k in range(len(names)) for p in range(config.players)
    }
    return ModesSynthetic(events, truth)
