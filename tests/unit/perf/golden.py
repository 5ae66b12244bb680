"""The golden replay: the bundled football results and a seeded mix of every model and rule
through the processor, digested (sha256 of the canonical JSON of every event, every final
state, leaderboard and live quality record). `golden.sha256` beside this module is the
digest of the code before the speed work of issue #46, but for the Thurstonian ladder's last
bits, which changed when `rating._portable` made them the same on every CPU
(``python -m tests.unit.perf.golden`` prints it); outputs must stay byte-identical, on every
CPU.

`latent_digest` digests a smaller replay of the ladders whose models integrate over latent
performances (`rating._latent`), which `tests/unit/rating/test_portable.py` runs with numpy's
and OpenBLAS's CPU-specific code switched off and on."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.local.demo import football_events
from stream_rater.processor.quality import LIVE, WINDOW
from tests.unit.perf.workload import RULES, Run, parsed, run

DATA = Path(__file__).resolve().parents[3] / "stream_rater/data/international_football_results.csv.gz"
DIGEST = Path(__file__).with_name("golden.sha256")


#: Every model, some with their options; (name, model, params).
MODELS: list[tuple[str, str, dict[str, Any]]] = [
    ("ts", "trueskill", {}),
    (
        "ts-opts",
        "trueskill",
        {
            "time_tau": 0.5,
            "draw_probability": 0.0,
            "player_scores": True,
            "margin_scale": 1.0,
            "calibration": "temperature:1.2",
        },
    ),
    ("sph", "sph-elo", {}),
    ("elo", "elo", {"calibration": "platt:1.1,0.05"}),
    ("elo-sum", "elo", {"combine": "sum", "kind": "gaussian"}),
    ("pl", "plackett-luce", {}),
    ("th", "thurstonian", {}),
    ("duel-elo", "duelling-elo", {}),
    ("glicko", "glicko", {"c": 30.0}),
    ("glicko2", "glicko2", {}),
]


def ladders() -> Ladders:
    """Every model's ladder, and one with every rule and party effects and two shadows."""
    rules = {**RULES, "party_effects": True}
    shadows = (
        Ladder("all-rules~g2", "glicko2", rules, shadow_of="all-rules"),
        Ladder("all-rules~pl", "plackett-luce", rules, shadow_of="all-rules"),
    )
    return Ladders(
        [Ladder("football", "trueskill")]
        + [Ladder(name, model, params) for name, model, params in MODELS]
        + [Ladder("all-rules", "trueskill", rules, shadows=shadows)]
    )


def _player(rng: random.Random, pid: str, party: str | None) -> dict[str, Any]:
    player: dict[str, Any] = {"id": pid, "score": rng.randint(0, 9), "seconds_played": rng.choice([300, 600])}
    if rng.random() < 0.1:
        player["weight"] = 0.5
    if rng.random() < 0.05:
        player["rated"] = False
    if party is not None:
        player["party"] = party
    return player


def mixed(ladder: str, n: int, seed: int, effects: bool) -> list[dict[str, Any]]:
    """`n` records of `ladder`: duels, team games and free-for-alls with scores, weights,
    unrated players, parties, a home effect (`effects`), draws, late and repeated matches,
    short and unrated matches, and season starts."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        teams, size = rng.choice([(2, 1), (2, 1), (2, 3), (3, 1), (4, 2), (6, 1)])
        chosen = rng.sample(range(60), teams * size)
        ranks = [rng.randrange(teams) for _ in range(teams)]
        wire = [
            {
                "rank": ranks[t],
                "players": [
                    _player(rng, f"{ladder}-{p}", f"{i}-{t}" if size > 1 and k < 2 else None)
                    for k, p in enumerate(chosen[t * size : (t + 1) * size])
                ],
            }
            for t in range(teams)
        ]
        if effects and rng.random() < 0.3:
            wire[0]["effects"] = ["home"]
        record = {
            "match_id": f"{ladder}-{i}",
            "ladder": ladder,
            "finished_at": 1_500_000_000 + 3000 * i - rng.choice([0, 0, 0, 9000]),
            "teams": wire,
            "duration": rng.choice([30, 900]),
        }
        if rng.random() < 0.05:
            record["rated"] = False
        out.append(record)
        if rng.random() < 0.03:
            out.append(rng.choice(out))
        if i % 150 == 149:
            out.append(
                {
                    "kind": "season",
                    "match_id": f"{ladder}-s{i}",
                    "ladder": ladder,
                    "finished_at": 1_500_000_000 + 3000 * i,
                }
            )
    return out


def _canonical(run_: Run, names: list[str]) -> bytes:
    """The canonical JSON of `run_`'s events and, per ladder of `names`, its final states,
    effects, leaderboard and live quality."""
    store = run_.store

    async def states() -> dict[str, Any]:
        return {
            name: {
                "players": sorted((k, list(v)) for k, v in (await store.players(name)).items()),
                "effects": sorted((k, list(v)) for k, v in (await store.players(name, effects=True)).items()),
                "board": await store.leaderboard(name, 10_000),
                "quality": await store.quality(name, LIVE, WINDOW),
            }
            for name in names
        }

    document = {
        "results": [[r.match.match_id, r.duplicate, r.unrated, r.events] for r in run_.results],
        "skipped": run_.skipped,
        "states": asyncio.run(states()),
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), default=list).encode()


def golden_digest() -> str:
    """The sha256 of the golden replay's canonical JSON (module docstring)."""
    config = ladders()
    events = list(football_events(DATA, "football"))
    for k, (name, model, _) in enumerate(MODELS):
        events += mixed(name, 400, k, effects=model not in ("sph-elo", "duelling-elo"))
    events += mixed("all-rules", 600, 99, effects=True)
    done = run(parsed(events, config), config, batch_size=250)
    names = [*config, *(s.name for ladder in config.values() for s in ladder.shadows)]
    return hashlib.sha256(_canonical(done, names)).hexdigest()


def latent_digest() -> str:
    """The sha256 of the canonical JSON of a replay of the ladders whose models integrate over
    latent performances (`rating._latent`: the Thurstonian model's update, and the predictions
    of three teams or more of Plackett-Luce, TrueSkill and Elo)."""
    config = ladders()
    names = ["th", "pl", "ts", "elo"]
    events = [event for k, name in enumerate(names) for event in mixed(name, 300, k, effects=True)]
    return hashlib.sha256(_canonical(run(parsed(events, config), config, batch_size=250), names)).hexdigest()


if __name__ == "__main__":
    print(latent_digest() if sys.argv[1:] == ["latent"] else golden_digest())
