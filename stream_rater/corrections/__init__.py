"""Corrections: void matches, re-rate a ladder into a new generation, switch over live.

- `rerate.Correction` — what to correct (void, un-void, re-rate with new parameters), as the
  CLI's flags or a worker's correction request say it.
- `rerate.Rerate` — the job (lock, build beside the live generation, freeze, atomic switch,
  correction events), one method per phase of the protocol in its module docstring.
- `history.TopicHistory` — a ladder's history: match files (for what the topic no longer
  retains) followed by the matches topic from its earliest retained offset, in log order.
- `history.apply_correction` — a `Correction` carried out from that history: the one entry
  point of the CLI and the workers.
"""
