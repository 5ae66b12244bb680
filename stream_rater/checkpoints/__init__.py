"""Ladder checkpoints: a ladder's replay state with the offsets it stands for, so that a void
replays only the matches after the checkpoint before the voided one, and a lost store is
rebuilt from the latest one (README "Checkpoints").

- `format` — what a checkpoint holds, its chunks and manifest, its digest;
- `sink` — where checkpoints go (`CheckpointSink`): a compacted Kafka topic, or memory;
- `state` — a ladder's state taken out of a store and seeded into one, by public store calls;
- `replica` — a ladder replayed in memory from a checkpoint;
- `select` — which checkpoint a replay may start from;
- `writer` — the `Checkpointer`: a replica caught up with the live ladder, verified, written.
"""

from stream_rater.checkpoints.format import Checkpoint, LadderState, Manifest, TornCheckpoint
from stream_rater.checkpoints.replica import Replica
from stream_rater.checkpoints.select import ReplayNeeds, choose, latest_usable
from stream_rater.checkpoints.sink import CheckpointSink, KafkaSink, MemorySink, configured_sink
from stream_rater.checkpoints.state import seed
from stream_rater.checkpoints.writer import Checkpointer, Round, Unverified

__all__ = [
    "Checkpoint",
    "CheckpointSink",
    "Checkpointer",
    "KafkaSink",
    "LadderState",
    "Manifest",
    "MemorySink",
    "Replica",
    "ReplayNeeds",
    "Round",
    "TornCheckpoint",
    "Unverified",
    "configured_sink",
    "choose",
    "latest_usable",
    "seed",
]
