"""Tools around the core that run without the stream worker, each through the same
`Processor` or Kafka plumbing the service uses:

- `adapters` — match files (JSONL, football CSV, player rows) → match-finished objects;
- `replay` — match files through a `Processor`, rating-changed events to a sink;
- `verify` — recompute a ladder from the matches topic and compare with the live store;
- `evaluate` — prediction accuracy of a model on a match history;
- `tune` — fit a ladder's model parameters to a match history;
- `dead_letters` — list the dead-letter topic and redrive records to the matches topic.
"""
