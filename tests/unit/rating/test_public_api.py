"""The public names of `stream_rater.rating`."""

import stream_rater.rating as rating
from stream_rater.rating.registry import MODEL_CLASSES, model_class


def test_all_is_sorted_and_complete():
    """`__all__` is sorted and names every public attribute of the package."""
    public = {n for n in vars(rating) if not n.startswith("_")} - {
        "base", "registry", "trueskill", "sph_elo", "elo", "plackett_luce", "thurstonian", "duelling_elo",
    }
    assert rating.__all__ == sorted(rating.__all__)
    assert set(rating.__all__) == public


def test_every_registered_model_is_exported_under_its_name():
    """Each model name of the registry resolves to a class exported by the package with that `name`."""
    for name in MODEL_CLASSES:
        cls = model_class(name)
        assert cls.name == name
        assert getattr(rating, cls.__name__) is cls
