"""Ladder and model parameters typed from their text: a ``--param name=value`` flag, an
environment value (`config.ladders`)."""

from __future__ import annotations

import math


def parse_value(text: str) -> bool | int | float | str:
    """A parameter value typed from its text: ``true``/``false`` (any case) → bool, then
    int, then float (NaN refused), else the string itself; quotes force a string."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    if math.isnan(number):
        raise ValueError(f"{text!r}: NaN is not a parameter value")
    return number


def parse_param(text: str) -> tuple[str, bool | int | float | str]:
    """A CLI ``--param name=value`` string → ``(name, typed value)``; raises ValueError."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise ValueError(f"expected name=value with a parameter name, got {text!r}")
    return name, parse_value(value)
