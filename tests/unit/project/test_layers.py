"""The layering of stream_rater/README.md holds: the import-linter contracts in pyproject.toml are kept, and
each of them breaks (so the suite, and CI with it, fails) when the package violates it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

LAYERS = "Layers: dependencies point down, pure math at the bottom, the CLI on top"
NO_TRANSPORT = "The core is transport-agnostic: no faust, mode or aiokafka below the service"
ACYCLIC = "No import cycles between sibling modules at any depth"


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on pyproject.toml's contracts, for the `stream_rater` in `package_parent`
    (also the working directory: ``python -c`` puts that first on the path)."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
            "--no-logo",
            str(ROOT / "pyproject.toml"),
        ],
        cwd=package_parent,
        env={**os.environ, "PYTHONPATH": str(package_parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contracts_are_kept() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in (LAYERS, NO_TRANSPORT, ACYCLIC):
        assert f"{name} KEPT" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("rating/base.py", "import stream_rater.cli", LAYERS),
        ("contracts/codecs.py", "from stream_rater.config.ladders import Ladders", LAYERS),
        ("processor/core.py", "import aiokafka", NO_TRANSPORT),
        ("store/base.py", "from stream_rater.store.memory import MemoryStore", ACYCLIC),
    ],
)
def test_a_violation_breaks_its_contract(tmp_path: Path, module: str, line: str, broken: str) -> None:
    """A copy of the package with one forbidden import added fails the check."""
    copy = tmp_path / "stream_rater"
    shutil.copytree(ROOT / "stream_rater", copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / module).open("a") as f:
        f.write(f"\n{line}\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    assert f"{broken} BROKEN" in result.stdout, result.stdout
