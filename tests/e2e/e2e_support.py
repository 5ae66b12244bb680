"""What the end-to-end tests share: the environment of a worker subprocess for one test's
topics and ladder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stream_rater.config.settings import Settings, env_name


def worker_test_env(settings: Settings, ladders: Sequence[str], datadir: Path) -> dict[str, str]:
    """Variables (beyond `demo.worker_env`'s) for a worker on `settings`' topics and batch
    size that rates the TrueSkill `ladders` and keeps faust's data under `datadir`."""
    return {
        env_name("topic_matches"): settings.topic_matches,
        env_name("topic_updates"): settings.topic_updates,
        env_name("topic_dlq"): settings.topic_dlq,
        env_name("topic_corrections"): settings.topic_corrections,
        env_name("batch_size"): str(settings.batch_size),
        **{"STREAM_RATER_LADDER_" + ladder.upper().replace("-", "_"): "trueskill" for ladder in ladders},
        "STREAM_RATER_APP_DATADIR": str(datadir),  # faust's own, via its env_prefix
    }
