"""The code-health gates run with the suite, so CI fails on them: ruff's lint and format checks
and mypy, each configured in pyproject.toml (the import contracts are tests/unit/project/test_layers.py).

They run the tools installed beside this interpreter (the ``dev`` extra), on the whole tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def run_module(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m <argv>`` in the repository root with this interpreter."""
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("ruff", "check", "stream_rater", "tests"),
        ("ruff", "format", "--check", "stream_rater", "tests"),
        ("mypy",),
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_gate_passes(argv: tuple[str, ...]) -> None:
    result = run_module(*argv)
    assert result.returncode == 0, f"`{' '.join(argv)}` failed:\n{result.stdout}{result.stderr}"
