"""stream_rater — an event-driven streaming skill-rating service.

Layers, top to bottom; a module imports only from the layers below it (stream_rater/README.md
"Layers", enforced by the import-linter contracts in pyproject.toml):

- ``cli`` (and ``__main__``) — the ``stream-rater`` command;
- ``bench`` — benchmarks and load tests (engines, read API, capacity, end to end, scale, soak);
- ``local`` — an embedded broker and Redis for development, the demo;
- ``service`` — the faust worker: batch pipeline, corrections consumer, web server, metrics;
- ``corrections`` (voids, re-rates) and ``offline`` (replay, verify, evaluate, tune, dead
  letters, input adapters), independent of each other;
- ``queries`` (read-only questions about live ratings) and ``processor`` (validated matches
  → state commits + rating-changed events), independent of each other;
- ``kafka`` (plain aiokafka clients, no faust) and ``store`` (player state: Redis, memory),
  independent of each other;
- ``config`` — settings and ladders;
- ``contracts`` — the wire events: validation and codecs;
- ``rating`` — pure rating math.
"""

__version__ = "0.1.0"
