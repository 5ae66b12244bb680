"""Pure rating math: one module per model, one shared shape (`base.RatingModel`).

No I/O and nothing else of ours is imported here; every model takes prior `Rating` states and
an outcome and returns posterior states, finite for every input the event schema allows.

Model classes load on first use (PEP 562), so importing the package — as every command
does — costs nothing until a model is needed; some models pull in scipy.
"""

from typing import Any

from stream_rater.rating.base import Outcome, Rating, RatingModel
from stream_rater.rating.registry import MODEL_CLASSES, UnknownModelError, create_model, model_class

_MODELS = {path.rpartition(":")[2]: name for name, path in MODEL_CLASSES.items()}

__all__ = [
    "DuellingElo",
    "Elo",
    "Glicko",
    "Glicko2",
    "MODEL_CLASSES",
    "Outcome",
    "PlackettLuce",
    "Rating",
    "RatingModel",
    "SphElo",
    "Thurstonian",
    "TrueSkill",
    "UnknownModelError",
    "create_model",
    "model_class",
]


def __getattr__(name: str) -> Any:
    if name in _MODELS:
        return model_class(_MODELS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
