"""The rating code's array functions give the same bits on every CPU (stream_rater.rating._portable):
each is the C library's function, as Python's `math` computes it, and a replay of the ladders
that integrate over latent performances digests the same with numpy's and OpenBLAS's
CPU-specific code switched off as on."""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stream_rater.rating import _portable

ROOT = Path(__file__).resolve().parents[3]


def _sample() -> np.ndarray:
    rng = np.random.default_rng(46)
    return np.concatenate(
        [rng.uniform(-745.0, 709.0, 20_000), rng.normal(size=20_000), [-np.inf, 0.0, -0.0, 1e-300]]
    )


def test_exp_and_expm1_are_the_c_librarys_bit_for_bit() -> None:
    x = _sample()
    assert _portable.exp(x).tobytes() == np.array([math.exp(v) for v in x]).tobytes()
    finite = x[np.isfinite(x)]
    assert _portable.expm1(finite).tobytes() == np.array([math.expm1(v) for v in finite]).tobytes()


def test_log_is_the_c_librarys_bit_for_bit_and_minus_infinity_at_zero() -> None:
    y = np.abs(_sample()[:-4]) + 1e-300
    assert _portable.log(y).tobytes() == np.array([math.log(v) for v in y]).tobytes()
    assert _portable.log(np.array([0.0]))[0] == -math.inf


def test_weighted_sums_and_logsumexp() -> None:
    values = np.arange(12.0).reshape(3, 4)
    assert _portable.weighted_sums(values, np.array([1.0, 0.0, 2.0, 0.5])).tolist() == [5.5, 19.5, 33.5]
    assert _portable.logsumexp(np.array([1000.0, 1000.0])) == pytest.approx(1000.0 + math.log(2.0), abs=1e-12)


#: Environments that switch CPU-specific code off: numpy's dispatched loops (AVX2, AVX-512,
#: ...: numpy accepts a feature the CPU lacks) and OpenBLAS's kernel (the SSE3 one of 2004,
#: which every x86-64 CPU runs).
_OFF = {
    "numpy baseline": {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"},
    "OpenBLAS Prescott": {"OPENBLAS_CORETYPE": "Prescott"},
}


def _latent_digest(env: dict[str, str]) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "tests.unit.perf.golden", "latent"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return run.stdout.strip()


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the switches are x86-64's")
def test_latent_ladders_replay_to_the_same_bits_with_cpu_specific_code_switched_off() -> None:
    here = _latent_digest({})
    assert len(here) == 64
    assert {name: _latent_digest(env) for name, env in _OFF.items()} == dict.fromkeys(_OFF, here)


#: numpy functions whose float64 loops differ by CPU (numpy's own AVX-512 code, Intel's SVML,
#: OpenBLAS kernels): the rating code calls `_portable`'s instead, and neither multiplies
#: matrices by ``@`` nor calls scipy's ``logsumexp`` (numpy's ``exp`` and ``log``).
_CPU_SPECIFIC = {
    "exp",
    "log",
    "expm1",
    "log1p",
    "log2",
    "log10",
    "exp2",
    "power",
    "dot",
    "matmul",
    "einsum",
    "linalg",
}
#: Modules of the package allowed them: the calibration fit, whose answer is rounded
#: (`Calibration.rounded`) for the operator to set.
_ALLOWED = {"calibration.py"}


def test_the_rating_code_calls_no_cpu_specific_numpy_function() -> None:
    found = []
    for path in sorted((ROOT / "stream_rater/rating").glob("*.py")):
        if path.name in _ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "np":
                if node.attr in _CPU_SPECIFIC:
                    found.append(f"{path.name}:{node.lineno} np.{node.attr}")
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                found.append(f"{path.name}:{node.lineno} @")
            elif isinstance(node, ast.ImportFrom) and node.module == "scipy.special":
                found += [f"{path.name}:{node.lineno} {a.name}" for a in node.names if a.name == "logsumexp"]
    assert not found
