"""API tokens: ``token new`` makes one for the read API, the dashboard or a metrics scrape."""

from __future__ import annotations

import argparse
import sys

from stream_rater.cli.common import Subcommands
from stream_rater.config.settings import env_name


def register(sub: Subcommands) -> None:
    """Add ``token new`` to `sub`."""
    p = sub.add_parser("token", help="API tokens for the read API, the dashboard and /metrics")
    actions = p.add_subparsers(dest="action", required=True)
    new = actions.add_parser(
        "new",
        help="print a new random token once, and the line that lets it in",
        description="Print a new random API token once, on stdout, and on stderr the line to add to "
        f"the tokens file ({env_name('api_tokens_file')}), which keeps only the token's SHA-256. The "
        "servers read the file again when it changes: removing the line revokes the token.",
    )
    new.add_argument(
        "--name", required=True, help="who the token is for (one word; rate limits and logs show it)"
    )
    new.add_argument(
        "--scopes",
        required=True,
        help="read, dashboard and/or metrics, joined by commas (e.g. read,dashboard)",
    )
    new.add_argument(
        "--rate", type=float, help="requests per second for this token (default: STREAM_RATER_API_RATE)"
    )
    new.set_defaults(func=cmd_token_new)


def cmd_token_new(args: argparse.Namespace) -> int:
    """``token new``: the token on stdout, the tokens file's line on stderr."""
    from stream_rater.service.auth import new_token

    scopes = frozenset(s.strip() for s in args.scopes.split(",") if s.strip())
    token, entry = new_token(args.name, scopes, args.rate)
    print(token)
    print(
        f"add this line to the tokens file ({env_name('api_tokens_file')}); the token is not shown again:\n"
        f"{entry.line()}",
        file=sys.stderr,
    )
    return 0
