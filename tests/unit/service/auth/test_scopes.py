"""The scope each endpoint needs."""

from __future__ import annotations

import pytest

from stream_rater.service.auth.scopes import required_scopes


@pytest.mark.parametrize(
    ("method", "path", "scopes"),
    [
        ("GET", "/healthz", set()),
        ("GET", "/readyz", set()),
        ("POST", "/auth/session", set()),
        ("GET", "/metrics", {"metrics"}),
        ("GET", "/", {"dashboard"}),
        ("GET", "/static/app.js", {"dashboard"}),
        ("GET", "/api/overview", {"dashboard"}),
        ("GET", "/api/feed", {"dashboard"}),
        ("GET", "/api/ladders/duel/distribution", {"dashboard"}),
        ("GET", "/api/ladders/duel/inflation", {"dashboard"}),
        ("GET", "/api/ladders/duel/leaderboard", {"read", "dashboard"}),
        ("GET", "/api/ladders", {"read", "dashboard"}),
        ("POST", "/api/ladders/duel/predict", {"read"}),
        ("GET", "/api/openapi.yaml", {"read"}),
        ("GET", "/anything-else", {"read"}),
    ],
)
def test_each_endpoint_needs_its_scope(method: str, path: str, scopes: set[str]):
    assert required_scopes(method, path) == scopes
