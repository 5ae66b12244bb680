"""Reading the live ratings from the store: ``ratings``, ``leaderboard``, ``predict``, ``balance``, and the
read API ``serve``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from stream_rater.cli.common import (
    API_AUTH,
    Subcommands,
    ladders_of,
    settings_flags,
    settings_of,
    store_flag,
    store_for,
    with_store,
)
from stream_rater.config.rules import READ_FLAGS


def register(sub: Subcommands) -> None:
    """Add ``ratings``, ``leaderboard``, ``predict``, ``balance``, ``explain`` and ``serve`` to
    the subcommands `sub`."""
    p = sub.add_parser("ratings", help="every player's state as JSON lines")
    p.add_argument("--ladder", default="default")
    p.add_argument("--effects", action="store_true", help="list the ladder's context effects instead")
    store_flag(p)
    settings_flags(p, ["ladders_file"])
    p.set_defaults(func=cmd_ratings)

    p = sub.add_parser(
        "leaderboard",
        help="the top of a ladder by display rating, or the rows around a player (eligible players: "
        "README 'Ladder rules')",
    )
    p.add_argument("--ladder", default="default")
    p.add_argument("--top", type=int, default=20, help="rows, 1 to 500 (default 20)")
    p.add_argument("--season", type=int, help="the final leaderboard of this ended season (1 = the first)")
    p.add_argument("--around", metavar="PLAYER", help="the rows around this player instead of the top")
    p.add_argument(
        "--n", type=int, default=5, help="with --around: rows above and below the player (default 5)"
    )
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    store_flag(p)
    settings_flags(p, ["ladders_file"])
    p.set_defaults(func=cmd_leaderboard)

    _register_teams(sub)
    p = sub.add_parser("explain", help="why each player's rating moved in one match")
    p.add_argument("match_id", metavar="MATCH_ID")
    p.add_argument("--ladder", default="default")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    store_flag(p)
    settings_flags(p, ["ladders_file", "history_limit", "archive_url"])
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("serve", help="the read-only HTTP read API (no consumer): players, predict, balance")
    store_flag(p)
    settings_flags(
        p,
        [
            "web_host",
            "web_port",
            "ladders_file",
            "max_query_players",
            "history_limit",
            "archive_url",
            *API_AUTH,
        ],
    )
    p.set_defaults(func=cmd_serve)


def _register_teams(sub: Subcommands) -> None:
    """Add ``predict`` and ``balance``: questions about proposed teams."""
    p = sub.add_parser("predict", help="win/draw probabilities and match quality of proposed teams")
    p.add_argument(
        "teams", nargs="+", metavar="A,B", help="one argument per team: player ids joined by commas"
    )
    p.add_argument("--ladder", default="default")
    p.add_argument(
        "--party",
        action="append",
        default=[],
        metavar="A,B",
        help="players who queued together (repeatable): their team gets the ladder's party:<size> effect",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    store_flag(p)
    settings_flags(p, ["ladders_file", "max_query_players"])
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("balance", help="the fairest split of players into teams, parties kept together")
    p.add_argument("players", nargs="+", metavar="PLAYER", help="the pool, one player id per argument")
    p.add_argument("--sizes", required=True, metavar="N,N", help="the team sizes, joined by commas")
    p.add_argument("--ladder", default="default")
    p.add_argument(
        "--party", action="append", default=[], metavar="A,B", help="players who queued together (repeatable)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    store_flag(p)
    settings_flags(p, ["ladders_file", "max_query_players"])
    p.set_defaults(func=cmd_balance)


def cmd_ratings(args: argparse.Namespace) -> int:
    """``ratings``: every stored player (or effect) of a ladder as JSON lines."""
    from stream_rater.rating.base import Rating

    model = ladders_of(args).lookup(args.ladder).rating_model
    states = with_store(args, lambda store: store.players(args.ladder, effects=args.effects))
    for player_id, s in sorted(states.items()):
        row = {
            "player_id": player_id,
            "mu": s.mu,
            "sigma": s.sigma,
            "rating": model.display(Rating(s.mu, s.sigma)),
            "games": s.games,
            "last_played": s.last_played,
            "version": s.version,
        }
        print(json.dumps(row))
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    """``leaderboard``: the top N eligible players of a ladder (or of an ended season), best
    first, with their peak ratings."""
    import time

    from stream_rater.queries import NotRanked, Queries, QueryError, UnknownPlayer, top_of

    ladders = ladders_of(args)
    ladders.lookup(args.ladder)
    try:
        top_of(args.top)
    except QueryError as e:
        raise ValueError(f"--{e}") from None
    if args.around is not None and args.season is not None:
        raise ValueError("--around: not with --season")

    def ask(store: Any) -> Any:
        queries = Queries(store, ladders)
        if args.around is not None:
            return queries.around(args.ladder, args.around, args.n, time.time())
        return queries.leaderboard(args.ladder, args.top, time.time(), args.season)

    try:
        answer = with_store(args, ask)
    except (UnknownPlayer, NotRanked) as e:
        raise ValueError(f"--around: {e}") from None
    except QueryError as e:
        raise ValueError(f"--{e}") from None
    if args.json:
        print(json.dumps(answer))
        return 0
    print(f"season {answer['season']}" if args.around is None else f"{answer['ranked']} ranked")
    print(f"{'#':>4}  {'player':<32} {'rating':>9} {'mu':>9} {'sigma':>8} {'games':>6} {'peak':>9}")
    for row in answer["rows"]:
        sigma = "" if row["sigma"] is None else f"{row['sigma']:8.3f}"
        peak = "" if row["peak"] is None else f"{row['peak']:9.3f}"
        mark = " ?" if any(row[name] for name in READ_FLAGS) else ""  # a player not ranked yet
        print(
            f"{row['rank']:>4}  {row['player_id']:<32} {row['rating']:9.3f} {row['mu']:9.3f} "
            f"{sigma:>8} {row['games']:>6} {peak:>9}{mark}"
        )
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    """``predict``: each team's chance to finish first, the draw chance and the quality."""
    import time

    from stream_rater.queries import Queries, team_arguments

    settings = settings_of(args)
    ladders = ladders_of(args)
    answer: dict[str, Any] = with_store(
        args,
        lambda store: Queries(store, ladders, settings.max_query_players).predict(
            args.ladder, team_arguments(args.teams), time.time(), parties=team_arguments(args.party) or None
        ),
    )
    if args.json:
        print(json.dumps({k: answer[k] for k in ("ladder", "teams", "draw_probability", "quality")}))
        return 0
    for team in answer["teams"]:
        new = f"  (new: {', '.join(team['new'])})" if team["new"] else ""
        new += f"  (+ {', '.join(team['effects'])})" if team["effects"] else ""
        print(f"{','.join(team['players']):<40} wins {100 * team['win_probability']:6.2f} %{new}")
    if answer["draw_probability"] is not None:
        print(f"{'draw':<40}      {100 * answer['draw_probability']:6.2f} %")
    print(f"match quality {answer['quality']:.4f}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """``explain``: before, after, expected and actual per player of one match, and what
    besides the result moved each rating (idle time, a season reset, corrections since)."""
    from stream_rater.archive import archive_reader
    from stream_rater.explain import explain_match

    ladder = ladders_of(args).get(args.ladder)
    limit = settings_of(args).redis_history()
    archive = archive_reader(settings_of(args))
    answer = with_store(args, lambda store: explain_match(store, ladder, args.match_id, limit, archive))
    if args.json:
        print(json.dumps(answer))
        return 0
    print(f"match {answer['match_id']} on ladder {answer['ladder']} ({answer['model']})")
    for row in answer["players"]:
        print(_explained(row))
    return 0


def _explained(row: dict[str, Any]) -> str:
    """One player's explanation as text lines."""
    actual = row["actual"]
    happened = actual.get("result") or f"rank {actual['rank']}, ahead of {100 * actual['ahead']:.0f} %"
    if not row["found"]:
        return f"{row['player_id']}: {happened}; its event has left the player's history"
    expected = row["expected"] or {}
    hoped = (
        f"win {100 * expected['win']:.1f} %, draw {100 * expected['draw']:.1f} %"
        if "win" in expected
        else f"ahead {100 * expected.get('ahead', 0):.1f} %, rank {expected.get('rank', 0):.2f}"
    )
    moved = f"mu {row['before']['mu']:.3f} -> {row['after']['mu']:.3f} ({row['delta']:+.3f})"
    shown = f"rating {row['rating']:.3f}" + (
        f" ({row['rating_delta']:+.3f})" if row.get("rating_delta") is not None else ""
    )
    lines = [f"{row['player_id']}: {happened} (expected {hoped}); {moved}, {shown}"]
    if row["idle"]:
        idle = row["idle"]
        lines.append(
            f"  idle {idle['seconds'] / 86400:.1f} days: sigma {idle['sigma_stored']:.3f} grew to "
            f"{idle['sigma_as_of_match']:.3f}"
        )
    if row["season_reset"]:
        lines.append(f"  season reset before it: {row['season_reset']}")
    for c in row["corrections"]:
        voided = " (voided this match)" if c["voided_this_match"] else ""
        lines.append(f"  corrected since by {c['id']}: {c['reason']}{voided}")
    return "\n".join(lines)


def cmd_serve(args: argparse.Namespace) -> int:
    """``serve``: the read API over the store, without consuming anything."""
    from contextlib import AsyncExitStack

    from aiohttp import web

    import stream_rater.rating.balance  # noqa: F401  # numpy, before the first balance request
    from stream_rater.archive import archive_reader
    from stream_rater.queries import Queries
    from stream_rater.service.auth import check_exposure, protect
    from stream_rater.service.gc_tuning import settle_gc
    from stream_rater.service.query_api import serve_app, serving_loop

    settings = settings_of(args)
    check_exposure(settings)
    ladders = ladders_of(args)

    async def application() -> web.Application:
        stores = AsyncExitStack()
        store = await stores.enter_async_context(store_for(args))
        queries = Queries(
            store, ladders, settings.max_query_players, settings.redis_history(), archive_reader(settings)
        )
        served = serve_app(queries, store)
        protect(served, settings)

        async def close_store(_: web.Application) -> None:
            await stores.aclose()

        served.on_cleanup.append(close_store)
        return served

    settle_gc()
    web.run_app(
        application(),
        host=settings.web_host,
        port=settings.web_port,
        print=None,
        access_log=None,
        loop=serving_loop(),
    )
    return 0


def cmd_balance(args: argparse.Namespace) -> int:
    """``balance``: the split of the pool into teams of ``--sizes`` with the best quality."""
    import time

    from stream_rater.queries import Queries, team_arguments

    try:
        sizes = [int(n) for n in args.sizes.split(",")]
    except ValueError:
        raise ValueError(f"--sizes: expected team sizes joined by commas, got {args.sizes!r}") from None
    settings = settings_of(args)
    ladders = ladders_of(args)
    answer: dict[str, Any] = with_store(
        args,
        lambda store: Queries(store, ladders, settings.max_query_players).balance(
            args.ladder, args.players, sizes, time.time(), parties=team_arguments(args.party) or None
        ),
    )
    if args.json:
        print(json.dumps(answer))
        return 0
    for team in answer["teams"]:
        print(",".join(team))
    print(f"match quality {answer['quality']:.4f} ({answer['search']}, {answer['seconds']:.3f} s)")
    return 0
