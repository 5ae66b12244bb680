"""What validating a match-finished event is given: size `Limits` and the configured ladders.

The ladders are seen through two small protocols (`LadderRules`, `LadderTable`) so that the
contracts layer does not import the config layer above it (`config.ladders` implements them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, overload


class LadderRules(Protocol):
    """What validation needs of a configured ladder (`config.ladders.Ladder` is one)."""

    @property
    def name(self) -> str:
        """The ladder's name."""

    @property
    def model(self) -> str:
        """Its model's name."""

    @property
    def model_class(self) -> Any:
        """The model's class: its ``needs_scores`` and ``supports_effects`` flags."""

    @property
    def modes(self) -> Mapping[str, Any]:
        """Its declared modes by name (empty: a ladder without modes; `contracts.modes`)."""

    @property
    def default_mode(self) -> str | None:
        """The mode of its matches that name none (None: such a match is refused)."""


class LadderTable(Protocol):
    """The configured ladders (`config.ladders.Ladders` is one): `get` raises a `KeyError`
    whose text says which ladders exist, or returns `default` (only None is passed)."""

    @overload
    def get(self, name: str) -> LadderRules: ...

    @overload
    def get(self, name: str, default: None) -> LadderRules | None: ...


@dataclass(frozen=True)
class Limits:
    """Size limits on one match-finished event (string lengths in characters), and how far its
    ``finished_at`` may lie after its record's Kafka timestamp (`max_clock_skew` seconds, 0 =
    unchecked; `codecs.decode_match` checks it where a record has a timestamp)."""

    max_event_bytes: int = 64 * 1024
    max_teams: int = 64
    max_players: int = 256
    max_id_length: int = 128
    max_effects: int = 8
    max_clock_skew: float = 300.0


DEFAULT_LIMITS = Limits()
