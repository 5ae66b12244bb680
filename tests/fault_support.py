"""What the tests of the worker's fault handling share: the refusals Redis answers with, and
a `LadderHealth` that records what it is told."""

from __future__ import annotations

import redis.exceptions

from stream_rater.processor import StoreLost
from stream_rater.service.ladder_health import LadderHealth

#: What redis-py raises for Redis's refusals, as the real redis-server words them (a refusal
#: inside a commit script keeps its code; older servers wrap it in a script error).
REFUSALS = [
    (
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'. script: 3f1a"),
        "OOM",
    ),
    (redis.exceptions.ReadOnlyError("You can't write against a read only replica. script: 3f1a"), "READONLY"),
    (
        redis.exceptions.ResponseError("MISCONF Errors writing to the AOF file: No space left on device"),
        "MISCONF",
    ),
    (redis.exceptions.ResponseError("NOREPLICAS Not enough good replicas to write."), "NOREPLICAS"),
    (
        redis.exceptions.MasterDownError("Link with MASTER is down and replica-serve-stale-data is 'no'."),
        "MASTERDOWN",
    ),
    (redis.exceptions.ResponseError("BUSY Redis is busy running a script."), "BUSY"),
    (redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), "LOADING"),
    (redis.exceptions.TryAgainError("Multiple keys request during rehashing of slot"), "TRYAGAIN"),
    (redis.exceptions.ClusterDownError("The cluster is down"), "CLUSTERDOWN"),
    (
        redis.exceptions.ResponseError(
            "Error running script (call to f_3f1a): @user_script:12: -OOM command not allowed when used memory"
        ),
        "OOM",
    ),
]


class RecordingHealth(LadderHealth):
    """A `LadderHealth` that keeps the losses reported to it and the ladders said to be back."""

    def __init__(self) -> None:
        super().__init__()
        self.reported: list[StoreLost] = []
        self.back: list[str] = []

    def report_loss(self, exc: StoreLost) -> None:
        self.reported.append(exc)
        super().report_loss(exc)

    def recovered(self, ladder: str) -> None:
        self.back.append(ladder)
        super().recovered(ladder)
