"""Corrections: void matches, re-rate a ladder into a new generation, switch over live.

- `rerate.rerate` — the job (lock, build beside the live generation, freeze, atomic switch,
  correction events); the protocol is in its module docstring.
- `history.TopicHistory` — a ladder's history: match files (for what the topic no longer
  retains) followed by the matches topic from its earliest retained offset, in log order.
"""
