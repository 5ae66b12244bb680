"""The guard in front of an aiohttp application (no worker needed): a scrape allowed from a
configured network, the refusal of a bad configuration at start."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from stream_rater.config.settings import Settings
from stream_rater.service.auth import Guard, protect
from stream_rater.service.auth.tokens import new_token


async def scrape(settings: Settings, headers: dict[str, str] | None = None) -> int:
    """The status of ``GET /metrics`` from loopback on an application `settings` protect."""

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="stream_rater_up 1\n")

    application = web.Application()
    application.router.add_get("/metrics", metrics)
    protect(application, settings)
    async with TestClient(TestServer(application)) as client:
        return (await client.get("/metrics", headers=headers)).status


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[str, str]:
    token, entry = new_token("prometheus", frozenset({"metrics"}), None)
    (tmp_path / "tokens").write_text(entry.line() + "\n")
    return token, str(tmp_path / "tokens")


async def test_a_scrape_from_a_configured_network_needs_no_credential(tokens: tuple[str, str]):
    token, path = tokens
    assert await scrape(Settings(api_tokens_file=path, api_metrics_networks="127.0.0.0/8")) == 200
    assert await scrape(Settings(api_tokens_file=path, api_metrics_networks="10.0.0.0/8")) == 401
    assert await scrape(Settings(api_tokens_file=path), {"Authorization": f"Bearer {token}"}) == 200


async def test_no_authentication_on_loopback_leaves_the_application_open():
    assert await scrape(Settings()) == 200


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"web_host": "0.0.0.0"}, "not a loopback address"),
        ({"api_jwks": "https://idp.example.test/jwks.json"}, "STREAM_RATER_API_ISSUER"),
        ({"api_metrics_networks": "10.0.0.0/33"}, "STREAM_RATER_API_METRICS_NETWORKS"),
        ({"api_tokens_file": "/nonexistent/tokens"}, "STREAM_RATER_API_TOKENS_FILE"),
    ],
)
def test_a_bad_configuration_is_refused_at_start(fields: dict[str, str], why: str):
    with pytest.raises(ValueError, match=why):
        Guard(Settings(**fields))
