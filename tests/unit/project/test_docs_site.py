"""The documentation site builds with `mkdocs build --strict` (docs/mkdocs.yml): every page in the
navigation, no broken link or anchor, and the README stays a landing page of at most 300 lines."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "docs" / "mkdocs.yml"
README_MAX_LINES = 300


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of `config` into `site`, as CI runs it (not `-q`: it hides the
    warnings that strict mode counts, and the build passes whatever they say)."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_site_builds_strictly(tmp_path):
    result = build(CONFIG, tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "deploy" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path):
    """The strict build is not vacuous: a copy of the site with one link to a missing anchor fails
    (the guides outside docs/ are linked into the copy, not copied)."""
    copy = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", copy, ignore=shutil.ignore_patterns("site"))
    for name in ("README.md", "deploy", "stream_rater"):
        (tmp_path / name).symlink_to(ROOT / name)
    page = copy / "pages" / "development.md"
    page.write_text(page.read_text() + "\nSee [nowhere](tutorial.md#no-such-heading), [x](nofile.md).\n")
    result = build(copy / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "'#no-such-heading'" in result.stderr and "'docs/pages/nofile.md' is not found" in result.stderr


def test_the_readme_is_a_landing_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move text into docs/pages/"
