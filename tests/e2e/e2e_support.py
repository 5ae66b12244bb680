"""What the end-to-end tests share: the extra environment of a worker subprocess that rates
one test's ladders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stream_rater.local.demo import ladders_env


def worker_test_env(
    ladders: Sequence[str], datadir: Path, model: str = "trueskill", params: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Variables (beyond `demo.worker_env`'s) for a worker that rates `ladders` with `model`
    (default TrueSkill) and ladder parameters `params`, and keeps faust's data under `datadir`."""
    env = {**ladders_env(ladders, model), "STREAM_RATER_APP_DATADIR": str(datadir)}  # faust's own variable
    for name in ladders:
        for param, value in (params or {}).items():
            env[f"STREAM_RATER_LADDER_{name.upper().replace('-', '_')}__{param.upper()}"] = str(value)
    return env
