"""Pure rating math: one module per model, one shared shape (`base.RatingModel`).

No I/O and nothing else of ours is imported here; every model takes prior `Rating` states and
an outcome and returns posterior states, finite for every input the event schema allows.
"""

from stream_rater.rating.base import Outcome, Rating, RatingModel
from stream_rater.rating.duelling_elo import DuellingElo
from stream_rater.rating.elo import Elo
from stream_rater.rating.plackett_luce import PlackettLuce
from stream_rater.rating.registry import MODEL_CLASSES, UnknownModelError, create_model, model_class
from stream_rater.rating.sph_elo import SphElo
from stream_rater.rating.thurstonian import Thurstonian
from stream_rater.rating.trueskill import TrueSkill

__all__ = [
    "DuellingElo",
    "Elo",
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
