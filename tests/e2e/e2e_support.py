"""What the end-to-end tests share: the environment of a worker subprocess for one test's
topics and ladder, and 1-vs-1 match events."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stream_rater.config.settings import Settings, env_name

DEFAULT_FINISHED_AT = 1_700_000_000.0


def worker_test_env(
    settings: Settings, ladders: Sequence[str], datadir: Path, model: str = "trueskill"
) -> dict[str, str]:
    """Variables (beyond `demo.worker_env`'s) for a worker on `settings`' topics and batch
    size that rates `ladders` with `model` (default TrueSkill) and keeps faust's data under
    `datadir`."""
    return {
        env_name("topic_matches"): settings.topic_matches,
        env_name("topic_updates"): settings.topic_updates,
        env_name("topic_dlq"): settings.topic_dlq,
        env_name("topic_corrections"): settings.topic_corrections,
        env_name("batch_size"): str(settings.batch_size),
        **{"STREAM_RATER_LADDER_" + ladder.upper().replace("-", "_"): model for ladder in ladders},
        "STREAM_RATER_APP_DATADIR": str(datadir),  # faust's own, via its env_prefix
    }


def duel(
    ladder: str,
    match_id: str,
    first: str,
    second: str,
    *,
    second_rank: int = 1,
    at: float = DEFAULT_FINISHED_AT,
) -> dict:
    """A valid match-finished event: `first` beats `second` (a draw with ``second_rank=0``)."""
    return {
        "match_id": match_id,
        "ladder": ladder,
        "finished_at": at,
        "teams": [
            {"rank": 0, "players": [{"id": first}]},
            {"rank": second_rank, "players": [{"id": second}]},
        ],
    }
