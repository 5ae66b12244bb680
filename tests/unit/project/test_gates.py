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


#: The most lines a module or a function of the package may have: a reader holds a function in
#: their head, and a module is one owner's. ruff's complexity rules ([tool.ruff.lint] C901,
#: PLR0915) bound the rest.
MODULE_LINES, FUNCTION_LINES = 500, 60


def test_no_module_over_500_lines_and_no_function_over_60() -> None:
    """Every module of the package is at most 500 lines and every function at most 60, but a
    pure-math kernel kept whole, whose ``def`` line carries a ``noqa`` saying so."""
    import ast

    over = []
    for path in sorted((ROOT / "stream_rater").rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        name = path.relative_to(ROOT)
        if len(lines) > MODULE_LINES:
            over.append(f"{name}: {len(lines)} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                kept_whole = "noqa: PLR0915" in lines[node.lineno - 1]
                if length > FUNCTION_LINES and not kept_whole:
                    over.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert over == [], "\n".join(over)


def test_an_empty_selection_is_a_usage_error_never_no_tests_ran():
    """pytest's "no tests ran" (exit 5) would let CI pass on nothing: an empty selection ends
    as a usage error (4), through pytest-xdist (as the suite runs: one worker is enough to make
    xdist's controller decide the exit code) as without it."""
    for processes in ("1", "0"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-n",
                processes,
                "-k",
                "no_test_is_named_so",
                "tests/unit/test_cli.py",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 4, done.stdout + done.stderr
        assert "no tests were collected" in done.stderr
