"""Array functions whose results are the same bits on every CPU, for the rating code.

A ladder's ratings must be exactly what a replay computes, and the replay may run on another
host than the worker (``verify``, a correction, a rerate, a failover to another machine).
numpy picks some of its loops by the CPU it runs on: on a CPU with AVX-512, float64 ``exp``
and ``log`` are numpy's own SIMD code and ``expm1`` Intel's SVML, which differ from the C
library's in the last bits; ``@`` and ``dot`` run the OpenBLAS kernel made for the CPU, each
summing in its own order (`tests/unit/rating/test_portable.py` shows a Thurstonian ladder's
states change with the kernel). The rating code calls these instead:

- `exp`, `log` and `expm1`: the C library's functions, element by element, through scipy's
  ufuncs, which have one loop for every CPU: ``inv_boxcox(x, 0)`` is exp(x), ``boxcox(x, 0)``
  log(x) and ``inv_boxcox1p(x, 0)`` expm1(x), each computed by the C library's function of
  that name (the test checks them against Python's `math` bit for bit). A Python loop over
  `math` would give the same bits at ten times the cost.
- `weighted_sums`: numpy's pairwise summation, which adds in the same order on every CPU.

The C library picks its code by CPU too, but the same on every x86-64 CPU with AVX2 and FMA
(docs: Order, "The same bits on every machine").
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import boxcox, inv_boxcox, inv_boxcox1p

Floats = NDArray[np.float64]


def exp(x: Any) -> Floats:
    """e**x, element by element, by the C library's ``exp``."""
    return inv_boxcox(x, 0.0)  # type: ignore[no-any-return]


def log(x: Any) -> Floats:
    """The natural logarithm, element by element, by the C library's ``log`` (−inf at 0)."""
    return boxcox(x, 0.0)  # type: ignore[no-any-return]


def expm1(x: Any) -> Floats:
    """e**x − 1, element by element, by the C library's ``expm1``."""
    return inv_boxcox1p(x, 0.0)  # type: ignore[no-any-return]


def weighted_sums(values: Floats, weights: Floats) -> Floats:
    """``values @ weights`` (the sum over the last axis of each row of `values` times
    `weights`), summed in the same order on every CPU."""
    return np.sum(values * weights, axis=-1)  # type: ignore[no-any-return]


def logsumexp(values: Floats) -> float:
    """log Σ e**v over `values` (finite somewhere), shifted by the largest so nothing overflows."""
    top = float(np.max(values))
    return top + float(log(np.sum(exp(values - top))))
