"""The README stays true to the code: its test command is what CI runs, its layout table is the
tree, its configuration table lists every setting with its flag and default."""

import re
from dataclasses import fields
from pathlib import Path

from stream_rater.config.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_ci_runs_exactly_the_readme_test_command():
    """The README's test command appears verbatim as a line of .ci/run."""
    blocks = README.split("```sh\n")
    test_command = blocks[2].split("\n```")[0].strip()
    assert test_command.endswith("python -m pytest")
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_configuration_table_lists_every_setting():
    """Each Settings field has a README row with its variable, flag, default and help."""
    for f in fields(Settings):
        row = f"| `{env_name(f.name)}` | `--{f.name.replace('_', '-')}` | `{f.default!r}` | {f.metadata['help']} |"
        assert row in README, f"README lacks: {row}"


def layout_rows() -> dict[str, str]:
    """The README's code layout table: the path each row is about (``stream_rater/x/`` or
    ``stream_rater/x.py``) → the row's text."""
    table = README.split("Code layout —", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in table.splitlines()[2:]:
        where = line.split("|")[2]
        rows[re.search(r"`(stream_rater/[^`]*)`", where).group(1)] = where
    return rows


def test_the_layout_table_names_every_module_and_only_modules_that_exist():
    """Each top-level module of the package has a row; a package's row names each of its public
    modules and scripts; every file a row names exists."""
    rows = layout_rows()
    package = ROOT / "stream_rater"
    tops = {
        f"stream_rater/{p.name}/" if p.is_dir() else f"stream_rater/{p.name}"
        for p in package.iterdir()
        if not p.name.startswith("_") and p.name not in ("data", "py.typed")
    }
    assert set(rows) == tops
    for top, row in rows.items():
        if not top.endswith("/"):
            continue
        named = set(re.findall(r"`([\w.]+\.(?:py|lua|yaml))`", row))
        for name in named:
            assert (ROOT / top / name).is_file(), f"{top}{name} is in the README but not in the tree"
        public = {
            p.name
            for p in (ROOT / top).iterdir()
            if p.suffix in (".py", ".lua") and not p.name.startswith("_")
        }
        assert public <= named, f"README's row of {top} lacks {sorted(public - named)}"
