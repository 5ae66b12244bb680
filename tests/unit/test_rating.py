"""The public names of `stream_rater.rating`."""

import stream_rater.rating as rating
from stream_rater.rating.registry import MODEL_CLASSES, model_class


def test_all_is_sorted_and_every_name_resolves():
    """`__all__` is sorted, and each name in it is an attribute of the package."""
    assert rating.__all__ == sorted(rating.__all__)
    for name in rating.__all__:
        assert getattr(rating, name) is not None


def test_every_registered_model_is_exported_under_its_name():
    """Each model name of the registry resolves to a class exported by the package with that `name`."""
    for name in MODEL_CLASSES:
        cls = model_class(name)
        assert cls.name == name
        assert cls.__name__ in rating.__all__ and getattr(rating, cls.__name__) is cls
