"""The correction request (topic ``rating-corrections``): an operator's or another system's
"void these matches", "un-void them" or "re-rate this ladder with these parameters", which a
worker carries out as `stream-rater void` / `unvoid` / `rerate` would."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stream_rater.contracts._checks import _fail, _join, _kind, _no_unknown, _required, _string

#: What each kind of request does; a void or un-void names its matches, a re-rate does not.
KINDS = ("void", "unvoid", "rerate")

#: Longest accepted reason, in characters.
MAX_REASON = 1000


@dataclass(frozen=True, slots=True)
class CorrectionRequest:
    """One correction of one ladder. `params` override the ladder's model parameters from
    now on (a re-rate only); `request_id` is the sender's own id, echoed in logs."""

    kind: str
    ladder: str
    match_ids: tuple[str, ...] = ()
    reason: str = ""
    params: dict[str, bool | int | float | str] = field(default_factory=dict)
    request_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The wire form; empty optional fields left out."""
        wire: dict[str, Any] = {"kind": self.kind, "ladder": self.ladder}
        if self.match_ids:
            wire["match_ids"] = list(self.match_ids)
        if self.reason:
            wire["reason"] = self.reason
        if self.params:
            wire["params"] = dict(self.params)
        if self.request_id is not None:
            wire["request_id"] = self.request_id
        return wire

    @classmethod
    def from_dict(cls, d: Any, max_id_length: int = 128) -> CorrectionRequest:
        """Validate a decoded request; raises `ValidationError` naming the field."""
        if not isinstance(d, dict):
            _fail("request", f"must be an object, got {_kind(d)}")
        _no_unknown(d, _FIELDS, "")
        kind = _required(d, "kind", "")
        if kind not in KINDS:
            _fail("kind", f"must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
        ladder = _string(_required(d, "ladder", ""), "", "ladder", max_id_length)
        ids = d.get("match_ids", [])
        if not isinstance(ids, list):
            _fail("match_ids", f"must be an array, got {_kind(ids)}")
        match_ids = tuple(_string(m, "match_ids", i, max_id_length) for i, m in enumerate(ids))
        if kind == "rerate" and match_ids:
            _fail("match_ids", "a re-rate voids nothing: send kind 'void' or 'unvoid'")
        if kind != "rerate" and not match_ids:
            _fail("match_ids", f"a {kind} names at least one match")
        reason = d.get("reason", "")
        if type(reason) is not str or len(reason) > MAX_REASON:
            _fail("reason", f"must be a string of at most {MAX_REASON} characters")
        params = d.get("params", {})
        if not isinstance(params, dict):
            _fail("params", f"must be an object, got {_kind(params)}")
        if params and kind != "rerate":
            _fail("params", "only a re-rate changes parameters")
        for name, value in params.items():
            if type(value) not in (bool, int, float, str):
                _fail(_join("params", name), f"must be a number, boolean or string, got {_kind(value)}")
        request_id = d.get("request_id")
        if request_id is not None:
            _string(request_id, "", "request_id", max_id_length)
        return cls(kind, ladder, match_ids, reason, dict(params), request_id)


_FIELDS = frozenset({"kind", "ladder", "match_ids", "reason", "params", "request_id"})
