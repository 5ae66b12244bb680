"""Offline commands: ``replay`` matches through the core, ``verify`` a ladder against the
topic, ``evaluate`` predictions, and ``tune`` model parameters."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from contextlib import ExitStack, nullcontext
from typing import TYPE_CHECKING, TextIO

from stream_rater.cli.common import (
    KAFKA_SECURITY,
    Subcommands,
    bound_store,
    ladders_of,
    require,
    settings_flags,
    settings_of,
    store_flag,
    store_url,
    with_store,
)
from stream_rater.cli.inputs import bad_lines_code, input_flags, progress, valid_matches
from stream_rater.config.ladders import DEFAULT_LADDER, Ladders, parse_param
from stream_rater.contracts import MatchFinished
from stream_rater.contracts.codecs import encode_event

if TYPE_CHECKING:
    from stream_rater.kafka import LadderHistory
    from stream_rater.offline.replay import ReplaySummary


def register(sub: Subcommands) -> None:
    """Add ``replay``, ``verify``, ``evaluate`` and ``tune`` to the subcommands `sub`."""
    _add_replay(sub)
    _add_verify(sub)
    _add_evaluate(sub)
    _add_tune(sub)


def _add_replay(sub: Subcommands) -> None:
    """The ``replay`` subcommand: its flags and handler."""
    p = sub.add_parser(
        "replay",
        help="apply match files (or a ladder's matches from the topic) offline; print rating-changed events",
    )
    input_flags(p)
    store_flag(p, default="memory")
    p.add_argument("--out", help="write events here instead of stdout")
    p.add_argument(
        "--from-topic",
        action="store_true",
        help="read --ladder's matches from the matches topic (earliest retained offset to its "
        "end, in log order) instead of files; into a Redis --store this rebuilds a lost ladder and "
        "produces the rating changes of the matches the consumer group had not acknowledged; skips "
        "what the worker dead-letters, --max-clock-skew too (a file replay has no record "
        "timestamps and does not check it)",
    )
    settings_flags(
        p,
        [
            "broker",
            "topic_matches",
            "topic_updates",
            "consumer_group",
            "marker_ttl",
            "history_limit",
            "max_clock_skew",
            *KAFKA_SECURITY,
        ],
    )
    p.add_argument(
        "--history",
        action="append",
        default=[],
        metavar="FILE",
        help="with --from-topic: matches older than the topic retains, applied first (repeatable; "
        "--format); required once retention deleted the head of the ladder's partition (an empty "
        "file: it held none of the ladder's matches)",
    )
    p.set_defaults(func=cmd_replay)


def _add_verify(sub: Subcommands) -> None:
    """The ``verify`` subcommand: its flags and handler."""
    p = sub.add_parser(
        "verify",
        help="recompute a ladder from the matches topic and compare with the store; "
        "exit 1 if any player differs",
    )
    p.add_argument("--ladder", required=True, help="the ladder to verify")
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        help="largest |difference| of mu, sigma or peak (default 0: bit for bit, as a replay computes)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds to wait for the workers to commit what was read (default 30)",
    )
    store_flag(p)
    settings_flags(
        p,
        [
            "broker",
            "topic_matches",
            "topic_checkpoints",
            "checkpoint_sink",
            "consumer_group",
            "max_event_bytes",
            "max_clock_skew",
            "ladders_file",
            *KAFKA_SECURITY,
        ],
    )
    p.set_defaults(func=cmd_verify)


def _add_evaluate(sub: Subcommands) -> None:
    """The ``evaluate`` subcommand: its flags and handler."""
    p = sub.add_parser("evaluate", help="predict each match from the ratings just before it; print accuracy")
    input_flags(p)
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument(
        "--plot", metavar="FILE.png", help="save the calibration curve and wrong-order rate over time"
    )
    _modes_flags(p)
    p.add_argument(
        "--coupling",
        type=float,
        default=0.0,
        help="with --modes: the modes' coupling ρ in [0, 1] (default 0)",
    )
    p.set_defaults(func=cmd_evaluate)


def _modes_flags(p: argparse.ArgumentParser) -> None:
    """``--modes`` and ``--form`` of ``evaluate`` and ``tune``."""
    p.add_argument(
        "--modes",
        choices=("competition",),
        help="rate as a ladder with modes and report per mode; competition: football's competition "
        "class (friendly, qualifier, finals; --format football)",
    )
    p.add_argument(
        "--form",
        choices=("cross", "prior", "shared"),
        default="cross",
        help="with --modes: how modes share — cross (what a worker does, the default: a first match "
        "in a mode starts from the player's other modes, and every match moves their other modes), "
        "prior (the first match only) or shared (a shared skill plus per-mode offsets, offline only)",
    )


def _add_tune(sub: Subcommands) -> None:
    """The ``tune`` subcommand: its flags and handler."""
    p = sub.add_parser("tune", help="fit model parameters on the first part of the matches; report the rest")
    input_flags(p)
    p.add_argument(
        "--fit-fraction", type=float, default=0.3, help="share of the matches to fit on (default 0.3)"
    )
    p.add_argument(
        "--tune",
        metavar="NAME,NAME",
        help="parameters to fit (default: the model's usual ones not fixed by --param)",
    )
    p.add_argument(
        "--objective",
        default="log_loss",
        help="metric minimised on the fit part: log_loss (default), brier or wrong_order",
    )
    p.add_argument(
        "--max-trials",
        type=int,
        default=60,
        help="objective evaluations at most (default 60; 0: no search, e.g. to --calibrate given parameters)",
    )
    p.add_argument(
        "--calibrate",
        nargs="?",
        const="temperature",
        default="auto",
        choices=("temperature", "platt", "draw"),
        help="then fit a calibration of the predicted probabilities on the fit part — temperature "
        "(the flag alone), platt or, for a model that predicts draws, draw (the draw band alone; the "
        "others fit it too); without the flag: draw for a model that predicts draws, else temperature "
        "— the tuned ladder's calibration parameter, in the printed ladders-file lines",
    )
    p.add_argument(
        "--no-calibrate",
        dest="calibrate",
        action="store_const",
        const=None,
        help="fit no calibration (the tuned figures are the model's raw probabilities)",
    )
    _modes_flags(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_tune)


def cmd_replay(args: argparse.Namespace) -> int:
    """``replay``: validate, apply in order, print rating-changed events as JSON lines; from the
    topic into a store, the recovery of a lost store (`_rebuild`)."""
    from stream_rater.offline.replay import replay
    from stream_rater.processor import Processor

    ladders = ladders_of(args)
    if args.from_topic and store_url(args) not in ("memory", "memory://"):
        return _rebuild(args, ladders)
    with ExitStack() as stack:
        if args.history and not args.from_topic:
            raise ValueError("--history: only with --from-topic (give match files as FILE)")
        if args.from_topic:
            history = _topic_history(args, ladders, stack)
            matches, rejected = iter(history.matches), history.rejected
        else:
            matches, rejected = valid_matches(args, ladders, stack)
        out = stack.enter_context(open(args.out, "w", encoding="utf-8")) if args.out else sys.stdout
        summary = with_store(
            args,
            lambda store: replay(
                progress(matches, "replay"),
                Processor(ladders, store),
                batch_size=args.batch_size,
                on_result=lambda r: out.writelines(encode_event(e).decode() + "\n" for e in r.events),
                on_skip=lambda skip: print(skip.line(), file=sys.stderr),
            ),
        )
    summary.rejected = len(rejected)
    summary.read += len(rejected)
    print(summary.line(), file=sys.stderr)
    return bad_lines_code(args, rejected)


def _rebuild(args: argparse.Namespace, ladders: Ladders) -> int:
    """``replay --from-topic --store URL``: rebuild the ladder in the store from its latest
    usable checkpoint (or the topic's start) and produce the events the consumer group had not
    acknowledged (`offline.recovery`); the store keeps markers and histories as the workers'
    settings say."""
    from stream_rater.checkpoints import configured_sink
    from stream_rater.offline.recovery import recover
    from stream_rater.store import RedisTimeouts, open_store

    settings = settings_of(args)
    require(settings, "broker")
    if args.files:
        raise ValueError("--from-topic reads the topic: give no FILE")
    if not args.ladder:
        raise ValueError("--from-topic needs --ladder")
    with ExitStack() as stack:
        files = None
        if args.history:
            given = argparse.Namespace(**{**vars(args), "files": args.history, "strict": True})
            files = list(valid_matches(given, ladders, stack)[0])

    async def run(out: TextIO) -> tuple[ReplaySummary, int, str, list[str]]:
        store = open_store(
            store_url(args),
            history_limit=settings.redis_history(),
            marker_ttl=settings.marker_ttl,
            timeouts=RedisTimeouts.of(settings),
            prefix=settings.redis_prefix,
        )
        try:
            await bound_store(args, store)
            async with configured_sink(settings) as sink:
                summary, produced, start, history = await recover(
                    settings,
                    ladders,
                    args.ladder,
                    store,
                    sink,
                    batch_size=args.batch_size,
                    on_result=lambda r: out.writelines(encode_event(e).decode() + "\n" for e in r.events),
                    files=files,
                )
            return summary, produced, start.line() if start else "the topic's start", history.rejected
        finally:
            await store.close()

    with open(args.out, "w", encoding="utf-8") if args.out else nullcontext(sys.stdout) as out:
        summary, produced, start, rejected = asyncio.run(run(out))
    summary.rejected = len(rejected)
    summary.read += len(rejected)
    print(f"rebuilt from {start}", file=sys.stderr)
    print(summary.line(), file=sys.stderr)
    print(
        f"{produced} rating changes of matches at or after the consumer group {settings.consumer_group!r}'s "
        f"committed offsets produced to {settings.topic_updates!r}",
        file=sys.stderr,
    )
    return bad_lines_code(args, rejected)


def _topic_history(args: argparse.Namespace, ladders: Ladders, stack: ExitStack) -> LadderHistory:
    """``replay --from-topic``: the ladder's valid matches from the matches topic, in log order,
    after those of the ``--history`` files (which have no place in the topic); refused
    (`HistoryTruncated`) when retention deleted the head of the ladder's partition and no
    ``--history`` supplies it."""
    from stream_rater.kafka import deleted_heads, ladder_history, read_log, refuse_truncated

    if args.files:
        raise ValueError("--from-topic reads the topic: give no FILE")
    if not args.ladder:
        raise ValueError("--from-topic needs --ladder")
    settings = settings_of(args)
    require(settings, "broker")
    records, _ = asyncio.run(read_log(settings, settings.topic_matches))
    history = ladder_history(records, ladders, args.ladder, settings.limits())
    if not history.ordered:
        print(
            f"warning: split ladder {args.ladder!r}: records on partitions {sorted(history.positions)}; "
            "taken by broker timestamp, then partition and offset",
            file=sys.stderr,
        )
    heads = asyncio.run(deleted_heads(settings, args.ladder, partitions=history.positions))
    refuse_truncated(args.ladder, heads, supplied=bool(args.history))
    if args.history:
        files = argparse.Namespace(**{**vars(args), "files": args.history, "strict": True})
        earlier = list(valid_matches(files, ladders, stack)[0])
        history.matches[:0] = earlier
        history.where[:0] = [None] * len(earlier)
    return history


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify``: recompute a ladder from the topic, compare with the store; 1 if any differ."""
    from stream_rater.offline.verify import verify

    if not args.tolerance >= 0:  # NaN too
        raise ValueError(f"--tolerance: must be >= 0, got {args.tolerance}")
    settings = settings_of(args)
    require(settings, "broker")
    ladders = ladders_of(args)
    ladders.get(args.ladder)
    report = with_store(
        args,
        lambda store: verify(settings, ladders, args.ladder, store, tolerance=args.tolerance, wait=args.wait),
    )
    print("\n".join(report.lines()))
    return 1 if report.differences else 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``evaluate``: score each match's prediction from the ratings just before it."""
    from stream_rater.offline.evaluate import plot, score

    ladders = ladders_of(args)
    if args.modes:
        return _evaluate_modes(args, ladders)
    with ExitStack() as stack:
        matches, rejected = valid_matches(args, ladders, stack)
        _, summary, counts = score([progress(matches, "evaluate")], ladders, batch_size=args.batch_size)
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.report())
    if args.plot:
        ladder = ladders.get(args.ladder or DEFAULT_LADDER)
        plot(summary, args.plot, " ".join([ladder.model, *(f"{k}={v}" for k, v in ladder.params.items())]))
    counts.rejected = len(rejected)
    counts.read += len(rejected)
    print(counts.line(), file=sys.stderr)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    """``tune``: fit a ladder's parameters on the first part of the matches, report all parts."""
    from stream_rater.offline.tune import Scoring, SearchOptions, tune

    ladders = ladders_of(args)
    if args.modes:
        return _tune_modes(args, ladders)
    with ExitStack() as stack:
        matches, rejected = valid_matches(args, ladders, stack)
        parsed = list(progress(matches, "validate"))
    if rejected:
        print(f"{len(rejected)} bad lines skipped", file=sys.stderr)
    result = tune(
        parsed,
        ladders,
        args.ladder or DEFAULT_LADDER,
        args.tune.split(",") if args.tune else None,
        fixed=[parse_param(p)[0] for p in args.param],
        scoring=Scoring(args.fit_fraction, args.objective),
        options=SearchOptions(
            args.max_trials, args.batch_size, lambda trial: print(trial.line(), file=sys.stderr, flush=True)
        ),
        calibrate=_calibration_kind(args.calibrate, ladders, args.ladder or DEFAULT_LADDER),
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.report())
    return 0


def _calibration_kind(asked: str | None, ladders: Ladders, ladder: str) -> str | None:
    """``tune``'s calibration: as asked, or by default (``auto``) the draw band for a model that
    predicts draws (the best held-out ECE on the football data) and temperature otherwise."""
    from stream_rater.rating.scoring import predicts_draws

    if asked != "auto":
        return asked
    return "draw" if predicts_draws(ladders.get(ladder).rating_model) else "temperature"


def _moded_matches(args: argparse.Namespace) -> list[tuple[str, MatchFinished]]:
    """``--modes competition``: the football files' matches with their competition class."""
    from stream_rater.bench.modes import football_modes

    if args.format != "football" or not args.files or args.files == ["-"]:
        raise ValueError("--modes competition: give football files (--format football FILE…)")
    return [m for path in args.files for m in football_modes(path, home_effect=args.home_effect)]


def _evaluate_modes(args: argparse.Namespace, ladders: Ladders) -> int:
    """``evaluate --modes``: the ladder with modes' metrics over all modes, then per mode."""
    from stream_rater.offline.modes import mode_models, score_modes

    matches = _moded_matches(args)
    ladder = ladders.get(args.ladder or DEFAULT_LADDER)
    models = mode_models(ladder, {mode: {} for mode in sorted({m for m, _ in matches})})
    result = score_modes([matches], models, args.coupling, form=args.form)
    whole, modes = result.whole[0], result.modes[0]
    if args.json:
        print(json.dumps({"all": whole.to_dict(), **{m: s.to_dict() for m, s in modes.items()}}, indent=2))
        return 0
    print(whole.report())
    print(f"\n{'mode':<12}{'matches':>9}{'wrong order':>13}{'log-loss':>10}{'Brier':>8}{'ECE':>8}")
    for mode, s in modes.items():
        print(
            f"{mode:<12}{s.matches:>9}{s.metric('wrong_order'):>13.3%}{s.metric('log_loss'):>10.4f}"
            f"{s.metric('brier'):>8.4f}{s.expected_calibration_error or 0.0:>8.4f}"
        )
    return 0


def _tune_modes(args: argparse.Namespace, ladders: Ladders) -> int:
    """``tune --modes``: the coupling and each mode's calibration (`offline.tune.tune_modes`)."""
    from stream_rater.offline.tune import Scoring
    from stream_rater.offline.tune_modes import tune_modes

    name = args.ladder or DEFAULT_LADDER
    result = tune_modes(
        _moded_matches(args),
        ladders.get(name),
        form=args.form,
        scoring=Scoring(args.fit_fraction, args.objective),
        calibrate=_calibration_kind(args.calibrate, ladders, name),
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.report())
    return 0
