"""The dashboard served by a real worker, driven in headless Chromium (Debian's ``chromium``
package, never a browser that Playwright downloads). Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from itertools import combinations

import pytest

from tests.e2e.browser import ARTIFACTS, needs_chromium
from tests.helpers import stored_players

pytestmark = [pytest.mark.e2e, needs_chromium]
PLAYERS = ["ada", "bob", "cyd", "dee", "eve", "fay"]
PAIRS = list(combinations(PLAYERS, 2)) * 4


@pytest.fixture
def rated_worker(web_worker):
    """The worker after rating 60 matches in which the earlier of two players always wins."""
    events = [web_worker.duel(f"g-{i}", a, b, 1_700_000_000 + 3600 * i) for i, (a, b) in enumerate(PAIRS)]
    web_worker.publish(events)
    web_worker.wait_until(
        lambda: web_worker.metrics().total("stream_rater_matches_applied_total") >= len(events),
        "every match applied",
    )
    return web_worker


def test_dashboard_shows_leaderboard_charts_feed_and_player_history(rated_worker, browser_page):
    """After matches are rated the page lists the ladder's players in order, draws its charts and feed, and a player's page charts the history."""
    page = browser_page
    ARTIFACTS.mkdir(exist_ok=True)

    page.goto(f"{rated_worker.url}/#/ladder/{rated_worker.ladder}")
    page.wait_for_selector("body[data-loaded=true]")
    rows = page.locator("#leaderboard tbody tr")
    rows.nth(len(PLAYERS) - 1).wait_for()
    assert rows.count() == len(PLAYERS)
    names = page.locator("#leaderboard tbody td.player").all_inner_texts()
    assert set(names) == set(PLAYERS) and names[0] == PLAYERS[0] and names[-1] == PLAYERS[-1]
    page.wait_for_selector("#chart-calibration canvas")
    charts = ("#chart-distribution", "#chart-throughput", "#chart-latency", "#chart-errors", "#chart-quality")
    for chart in (*charts, "#chart-calibration"):
        assert page.locator(f"{chart} canvas").count() == 1, chart
    assert page.locator("#quality-tiles .tile .value").first.inner_text() == str(len(PAIRS))
    page.locator("#feed li").first.wait_for()
    assert page.locator("#status").inner_text() == "ready"
    # The feed shows the change players see (rating_delta), μ's change in its tooltip.
    status, body = rated_worker.get("/api/feed?limit=60")
    [*_, shown] = page.locator("#feed li").first.locator("span").all()
    newest = json.loads(body)["events"][0]
    assert status == 200 and float(shown.inner_text()) == pytest.approx(newest["rating_delta"], abs=0.006)
    assert float(shown.get_attribute("title").removeprefix("μ ")) == pytest.approx(newest["delta"], abs=0.006)
    # The inflation panel: the ranked players and their total as stored (TrueSkill's μ − 3σ).
    page.locator("#inflation-tiles .tile").first.wait_for()
    tiles = page.locator("#inflation-tiles .tile .value").all_inner_texts()
    with ThreadPoolExecutor(1) as thread:  # playwright's sync API runs an event loop in this one
        stored = thread.submit(stored_players, rated_worker.settings.redis_url, rated_worker.ladder).result()
    total = sum(s.mu - 3 * s.sigma for s in stored.values())
    assert tiles[0] == str(len(PLAYERS)) and float(tiles[2].replace(",", "")) == pytest.approx(
        total, abs=0.01
    )
    assert page.locator("#chart-inflation canvas").count() == 1
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    first = page.locator("#leaderboard tbody td.player a").first
    player = first.inner_text()
    first.click()
    page.wait_for_selector("#player-view:not([hidden]) #chart-history canvas")
    page.locator("#matches tbody tr").first.wait_for()
    assert player in page.locator("#player-title").inner_text()
    games = int(page.locator("#player-tiles .tile").nth(3).locator(".value").inner_text())
    kept = rated_worker.settings.redis_history()  # no archive: Redis's last changes alone
    assert page.locator("#matches tbody tr").count() == min(games, 25, kept)
    assert page.locator("#chart-history .u-legend").inner_text().count("μ") >= 1
    assert page.locator("#matches tbody td.expected").first.inner_text().startswith("win ")
    page.screenshot(path=str(ARTIFACTS / "player.png"), full_page=True)

    match_id = page.locator("#matches tbody tr").first.get_attribute("data-match")
    page.locator("#matches tbody tr").first.click()
    page.wait_for_selector("#explanation-card:not([hidden]) #explanation tbody tr")
    assert match_id in page.locator("#explanation-title").inner_text()
    results = page.locator("#explanation tbody tr td:nth-child(2)").all_inner_texts()
    assert sorted(results) == ["loss", "win"]
    page.screenshot(path=str(ARTIFACTS / "explanation.png"), full_page=True)
