"""What the end-to-end tests share: the extra environment of a worker subprocess that rates
one test's ladders."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stream_rater.local.demo import ladders_env


def worker_test_env(ladders: Sequence[str], datadir: Path, model: str = "trueskill") -> dict[str, str]:
    """Variables (beyond `demo.worker_env`'s) for a worker that rates `ladders` with `model`
    (default TrueSkill) and keeps faust's data under `datadir`."""
    return {**ladders_env(ladders, model), "STREAM_RATER_APP_DATADIR": str(datadir)}  # faust's own variable
