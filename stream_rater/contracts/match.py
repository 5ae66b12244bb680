"""The match-finished event (topic ``matches``) as frozen dataclasses, its Kafka key, and the
validation that turns a decoded object into a `MatchFinished`.

The parts: the dataclasses and their wire form (`_match_types`), the limits and the ladder
protocols validation is given (`_match_limits`), the full validation (`_match_parse`) and the
fast path for the common shape (`_match_fast`); this module is their public face.

Validation is hand-written (no jsonschema at run time) so that it stays fast on the hot
path, and every error names the field path and the reason, e.g.
``teams[1].players[0].seconds_played: must be > 0``. The JSON Schemas in
``stream_rater/contracts/schemas`` describe the same contract for other languages; a test keeps
the two in step.

Choices where the README's event contracts leave room:

- An optional field given as ``null`` means the same as leaving it out (Jackson and
  friends write nulls by default); a required field given as ``null`` is an error.
- All teams give a ``rank`` or none does. A ranked team may also carry a ``score``,
  which is kept but does not decide the order. Without ranks, each team needs a
  ``score`` or a score for every one of its players.
- Teams ranked by score get competition ranks (scores 9, 5, 5, 1 → ranks 1, 2, 2, 4).
- ``finished_at`` strings are RFC 3339 date-times with ``Z`` or a numeric offset
  (``T``, ``t`` or a space between date and time); digits past the microsecond are
  truncated; leap seconds (``:60``) are rejected. Times are kept as float epoch seconds
  rounded to the microsecond and must lie in years 0001–9999 (UTC).
- ``weight`` is accepted on every ladder; models that do not use it ignore it.
- Effect names follow the id rules (non-empty, at most ``max_id_length`` characters).
- Strings that are not valid Unicode (a lone surrogate from a JSON ``\\ud800`` escape)
  are rejected, since they could not be written to Kafka or Redis later.
"""

from __future__ import annotations

from typing import Any

from stream_rater.contracts._match_fast import _parse_plain
from stream_rater.contracts._match_limits import DEFAULT_LIMITS, LadderRules, LadderTable, Limits
from stream_rater.contracts._match_parse import SEASON_OVERRIDES, _parse_any
from stream_rater.contracts._match_types import DEFAULT_LADDER, MatchFinished, Player, SeasonStart, Team

__all__ = [
    "DEFAULT_LADDER",
    "DEFAULT_LIMITS",
    "LadderRules",
    "LadderTable",
    "Limits",
    "MatchFinished",
    "Player",
    "SEASON_OVERRIDES",
    "SeasonStart",
    "Team",
    "match_key",
    "parse_match",
]


def match_key(ladder: str) -> bytes:
    """The Kafka key of a match-finished record: its ladder.

    Every match of a ladder then lands on one partition, whose order is the order in which
    the ladder's matches are applied — by every worker, and by a replay of the topic.
    """
    return ladder.encode()


def parse_match(obj: Any, ladders: LadderTable, limits: Limits = DEFAULT_LIMITS) -> MatchFinished:
    """Validate a decoded match-finished object against the contract and `ladders`.

    Raises `ValidationError` naming the first offending field; nothing else escapes.
    """
    match = _parse_plain(obj, ladders, limits)
    return _parse_any(obj, ladders, limits) if match is None else match
