"""Who a request comes from (`Principal`) and what it may do: the scope each endpoint needs.

=============  ====================================================================
``read``       the read API: ``/api/ladders…`` (GET and POST), ``/api/openapi.yaml`` and
               its browsable docs ``/api/docs…`` (the page and its files)
``dashboard``  the page (``/``, ``/static/*``) and its feeds (``/api/overview``,
               ``/api/feed``, ``…/distribution``, ``…/inflation``), and the read API's
               GETs the page shows (leaderboards, players, matches)
``metrics``    ``/metrics`` (or a request from ``STREAM_RATER_API_METRICS_NETWORKS``)
=============  ====================================================================

``/healthz`` and ``/readyz`` are open: probes carry no credential.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SCOPES = ("read", "dashboard", "metrics")
#: The paths anyone may ask: the probes, and signing in and out of the dashboard.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/auth/session", "/auth/login", "/auth/callback"})

_DASHBOARD_ONLY = re.compile(
    r"^/(static/.*|api/overview|api/feed|api/ladders/[^/]+/(distribution|inflation))?$"
)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: `identity` names it in rate limits and logs (``token:NAME``
    or ``jwt:SUBJECT``), `rate` is its own request rate if it has one, `expires` the epoch
    second its credential ends (None: a token, until revoked)."""

    identity: str
    scopes: frozenset[str]
    rate: float | None
    expires: float | None


def required_scopes(method: str, path: str) -> frozenset[str]:
    """The scopes of which a request needs one (empty: an open path)."""
    if path in OPEN_PATHS:
        return frozenset()
    if path == "/metrics":
        return frozenset({"metrics"})
    if _DASHBOARD_ONLY.match(path):
        return frozenset({"dashboard"})
    if method in ("GET", "HEAD") and path.startswith("/api/ladders"):
        return frozenset({"read", "dashboard"})
    return frozenset({"read"})
