"""Configuration, above the wire contracts and the rating math it names:

- `settings` — service settings from ``STREAM_RATER_*`` environment variables, each with a
  CLI flag;
- `ladders` — which rating model, with which parameters, each ladder uses (TOML file and
  environment), every model built once at load time.
"""
