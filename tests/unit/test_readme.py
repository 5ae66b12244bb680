"""The README stays true to the code: its test command is what CI runs, its configuration
table lists every setting with its flag and default."""

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
