"""Building blocks of the hand-written validators: the error type and field checks whose
messages name the field path and the reason (``teams[1].players[0].seconds_played: must be
> 0``)."""

from __future__ import annotations

from typing import Any, NoReturn


class ValidationError(ValueError):
    """An event that breaks the contract; `path` names the field, `reason` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type[ValidationError], tuple[str, str]]:
        return type(self), (self.path, self.reason)


_EXACT_INT = 2**53  # integers up to this size are exactly floats


_JSON_KINDS = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    list: "array",
    dict: "object",
    bytes: "binary",
}


def _fail(path: str, reason: str) -> NoReturn:
    raise ValidationError(path, reason)


def _kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _show(value: str, limit: int = 40) -> str:
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "…"


def _join(prefix: str, key: Any) -> str:
    """The path of `key` (a field name or an array index) inside `prefix`."""
    if type(key) is int:
        return f"{prefix}[{key}]"
    if isinstance(key, str) and key.isidentifier():
        return f"{prefix}.{key}" if prefix else key
    return f"{prefix}[{_show(key) if isinstance(key, str) else repr(key)}]"


def _within(prefix: str, error: ValidationError) -> NoReturn:
    """Re-raise `error`, whose path is relative to the object at `prefix`, with its full
    path (what `_join` would have made): nested validators build no path unless they fail."""
    path = error.path
    if not path:
        full = prefix
    elif path[0] == "[":
        full = prefix + path
    else:
        full = f"{prefix}.{path}"
    raise ValidationError(full, error.reason) from None


def _no_unknown(obj: dict[Any, Any], allowed: frozenset[str], prefix: str) -> None:
    if not allowed.issuperset(obj):
        _fail(_join(prefix, min(obj.keys() - allowed, key=repr)), "unknown field")


def _required(obj: dict[Any, Any], key: str, prefix: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        _fail(_join(prefix, key), "is required")


def _string(value: Any, prefix: str, key: str | int, limit: int | None) -> str:
    if type(value) is not str:
        _fail(_join(prefix, key), f"must be a string, got {_kind(value)}")
    if not value:
        _fail(_join(prefix, key), "must not be empty")
    if limit is not None and len(value) > limit:
        _fail(_join(prefix, key), f"is {len(value)} characters, limit {limit}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            _fail(_join(prefix, key), "is not valid Unicode (lone surrogate)")
    return value


def _finite(value: Any, prefix: str, key: str) -> float:
    kind = type(value)
    if kind is float:
        if value - value == 0.0:
            return value  # type: ignore[no-any-return]
        _fail(_join(prefix, key), "must be a finite number")
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            _fail(_join(prefix, key), "must be a finite number")
    _fail(_join(prefix, key), f"must be a number, got {_kind(value)}")


def _optional_finite(obj: dict[str, Any], key: str) -> float | None:
    """``obj[key]`` as a finite number, None when absent or null; error paths relative to `obj`."""
    value = obj.get(key)
    return None if value is None else _finite(value, "", key)
