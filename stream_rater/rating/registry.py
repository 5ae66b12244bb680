"""Model names used in ladder configuration, mapped to their classes.

Classes are imported on first use so that this table is cheap to import.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from stream_rater.rating.base import RatingModel

MODEL_CLASSES: dict[str, str] = {
    "trueskill": "stream_rater.rating.trueskill:TrueSkill",
    "sph-elo": "stream_rater.rating.sph_elo:SphElo",
    "elo": "stream_rater.rating.elo:Elo",
    "plackett-luce": "stream_rater.rating.plackett_luce:PlackettLuce",
    "thurstonian": "stream_rater.rating.thurstonian:Thurstonian",
    "duelling-elo": "stream_rater.rating.duelling_elo:DuellingElo",
    "glicko": "stream_rater.rating.glicko:Glicko",
    "glicko2": "stream_rater.rating.glicko:Glicko2",
}


class UnknownModelError(ValueError):
    """A model name or a model parameter that does not exist."""


def model_class(name: str) -> type[RatingModel]:
    """The class registered under `name`; raises UnknownModelError otherwise."""
    try:
        module_name, _, attr = MODEL_CLASSES[name].partition(":")
    except KeyError:
        known = ", ".join(sorted(MODEL_CLASSES))
        raise UnknownModelError(f"unknown model {name!r} (known: {known})") from None
    cls: type[RatingModel] = getattr(importlib.import_module(module_name), attr)
    return cls


def model_parameters(name: str) -> dict[str, Any]:
    """The constructor keywords of model `name` with their defaults."""
    signature = inspect.signature(model_class(name).__init__)
    return {
        p.name: p.default
        for p in signature.parameters.values()
        if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def create_model(name: str, params: Mapping[str, Any] | None = None) -> RatingModel:
    """An instance of model `name`; unknown parameter names are an error, not ignored."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(model_parameters(name)))
    if unknown:
        allowed = ", ".join(sorted(model_parameters(name)))
        raise UnknownModelError(
            f"model {name!r} has no parameter {', '.join(map(repr, unknown))} (allowed: {allowed})"
        )
    return model_class(name)(**params)
