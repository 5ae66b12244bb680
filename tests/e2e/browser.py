"""Headless Chromium for the end-to-end tests (Debian's ``chromium`` package, never a browser
that Playwright downloads): the `browser_page` fixture, and ``test-artifacts/`` for screenshots."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: Marks a test module that drives Chromium: skipped where it is not installed (a failure under CI).
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} not found: apt-get install -y chromium"
)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture
def browser_page():
    """A Chromium page (1440×1000) that fails the test on JavaScript errors."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page
            assert not errors, f"JavaScript errors: {errors}"
        finally:
            browser.close()
