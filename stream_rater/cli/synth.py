"""``synth``: synthetic team games with per-player scores from known, drifting skills
(`stream_rater.offline.synth`), and how well TrueSkill recovers the skills with and
without the per-player evidence."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from contextlib import ExitStack
from dataclasses import fields
from typing import Any

from stream_rater.cli.common import Subcommands


def register(sub: Subcommands) -> None:
    """Add ``synth`` to the subcommands `sub`; one flag per `SynthConfig` field."""
    from stream_rater.offline.synth import SynthConfig

    p = sub.add_parser(
        "synth",
        help="generate team games whose per-player scores and margins depend on drifting true "
        "skills; print match-finished events as JSON lines",
    )
    for f in fields(SynthConfig):
        p.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=type(f.default),
            default=f.default,
            help=f"default {f.default:g}",
        )
    p.add_argument("--out", help="write the events here instead of stdout")
    p.add_argument("--truth", metavar="FILE.csv", help="write player_id,true_skill after the last match here")
    p.add_argument(
        "--placebo",
        action="store_true",
        help="shuffle the per-player scores within each team (same team scores)",
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="print the skill recovery of TrueSkill order-only, with player_scores, with margins, and "
        "the placebo instead of the events",
    )
    p.add_argument(
        "--compare-parties",
        action="store_true",
        help="print the learned party effect and TrueSkill's wrong-order rate and log-loss without "
        "and with party_effects, on the data (--party-share, --party-bonus) and on its placebo (bonus 0)",
    )
    p.set_defaults(func=cmd_synth)


def cmd_synth(args: argparse.Namespace) -> int:
    """``synth``: generate; write the events and the truth, or compare the ladders."""
    from stream_rater.offline.synth import SynthConfig, generate, shuffle_scores

    config = SynthConfig(**{f.name: getattr(args, f.name) for f in fields(SynthConfig)})
    data = generate(config)
    events = shuffle_scores(data.events, config.seed) if args.placebo else data.events
    if args.compare:
        print(_comparison(data.events, data.truth, config.seed))
        return 0
    if args.compare_parties:
        print(_party_comparison(config))
        return 0
    with ExitStack() as stack:
        out = stack.enter_context(open(args.out, "w", encoding="utf-8")) if args.out else sys.stdout
        out.writelines(json.dumps(e, separators=(",", ":")) + "\n" for e in events)
        if args.truth:
            writer = csv.writer(stack.enter_context(open(args.truth, "w", encoding="utf-8", newline="")))
            writer.writerow(["player_id", "true_skill"])
            writer.writerows(data.truth.items())
    return 0


def _comparison(events: list[dict[str, Any]], truth: dict[str, float], seed: int) -> str:
    """The recovery table of ``--compare``."""
    from stream_rater.config.ladders import Ladder, Ladders
    from stream_rater.offline.synth import final_means, recovery, shuffle_scores

    setups: dict[str, dict[str, Any]] = {
        "order only": {},
        "player_scores": {"player_scores": True},
        "margin_scale=1": {"margin_scale": 1.0},
        "player_scores + margin_scale=1": {"player_scores": True, "margin_scale": 1.0},
    }
    ladders = Ladders([Ladder(f"setup-{i}", "trueskill", params) for i, params in enumerate(setups.values())])
    placebo = shuffle_scores(events, seed)
    lines = [f"{'TrueSkill':<32} {'corr(mu, true skill)':>21} {'placebo':>8}"]
    for i, name in enumerate(setups):
        real = recovery(final_means(events, ladders, f"setup-{i}"), truth)
        shuffled = recovery(final_means(placebo, ladders, f"setup-{i}"), truth)
        lines.append(f"{name:<32} {real:>21.4f} {shuffled:>8.4f}")
    return "\n".join(lines)


def _party_comparison(config: Any) -> str:
    """The table of ``--compare-parties``."""
    from stream_rater.offline.synth import party_study

    lines = [
        f"{'data':<8} {'party effect':>16} {'wrong order':>22} {'log-loss':>22}",
        f"{'':<8} {'(mu ± sigma)':>16} {'plain -> parties':>22} {'plain -> parties':>22}",
    ]
    for name, row in party_study(config).items():
        wrong = f"{row['plain_wrong_order']:.4f} -> {row['parties_wrong_order']:.4f}"
        loss = f"{row['plain_log_loss']:.4f} -> {row['parties_log_loss']:.4f}"
        effect = f"{row['effect']:+.2f} ± {row['effect_sigma']:.2f}"
        lines.append(f"{name:<8} {effect:>16} {wrong:>22} {loss:>22}")
    return "\n".join(lines)
