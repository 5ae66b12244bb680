"""The wire contracts (README "Event contracts") — the one place each event's shape is defined.

- `match` — match-finished events (topic ``matches``): dataclasses, Kafka key, validation.
- `rating_changed` — rating-changed events (topic ``rating-updates``): builder, validation.
- `correction_request` — correction requests (topic ``rating-corrections``): void, un-void,
  re-rate.
- `timestamps` — RFC 3339 / epoch seconds on the wire.
- `codecs` — bytes ↔ events, JSON or msgpack.
- ``schemas/*.schema.json`` — the same contracts as JSON Schema for other languages; tests
  keep them in step with the validators.
"""

from stream_rater.contracts._checks import ValidationError
from stream_rater.contracts.correction_request import CorrectionRequest
from stream_rater.contracts.match import (
    DEFAULT_LADDER,
    DEFAULT_LIMITS,
    Limits,
    MatchFinished,
    Player,
    SeasonStart,
    Team,
    match_key,
    parse_match,
)
from stream_rater.contracts.rating_changed import (
    RatingChanged,
    as_cross,
    correction_changed,
    rating_changed,
    season_changed,
    with_mode,
)
from stream_rater.contracts.timestamps import format_timestamp, parse_timestamp

__all__ = [
    "CorrectionRequest",
    "DEFAULT_LADDER",
    "DEFAULT_LIMITS",
    "Limits",
    "MatchFinished",
    "Player",
    "RatingChanged",
    "SeasonStart",
    "Team",
    "ValidationError",
    "correction_changed",
    "as_cross",
    "format_timestamp",
    "match_key",
    "parse_match",
    "parse_timestamp",
    "rating_changed",
    "season_changed",
    "with_mode",
]
