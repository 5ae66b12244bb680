"""MkDocs hook: serve every page at its path in the repository.

The pages of docs/pages/ become `docs/pages/…`, and the guides that stay beside what they
describe are added at their own paths (README.md is the home page). A relative link written for
the repository's web view (`../deploy/README.md#the-archive`) then resolves in the site too, and
`mkdocs build --strict` fails on any that does not."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
#: Guides that live outside docs/ because their owners edit them beside the code they describe.
GUIDES = (
    "README.md",
    "deploy/README.md",
    "stream_rater/README.md",
    "stream_rater/bench/README.md",
    "stream_rater/processor/README.md",
)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """The docs_dir's files at their repository paths, the guides added, theme files kept."""
    docs_dir = Path(config.docs_dir).resolve()
    prefix = docs_dir.relative_to(ROOT).as_posix()
    site = Files([])
    for file in files:
        if Path(file.src_dir).resolve() == docs_dir:
            file = File(f"{prefix}/{file.src_uri}", str(ROOT), config.site_dir, config.use_directory_urls)
        site.append(file)
    for guide in GUIDES:
        site.append(File(guide, str(ROOT), config.site_dir, config.use_directory_urls))
    return site
