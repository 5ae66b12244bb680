"""The store's packing (ormsgpack, msgpack where ormsgpack refuses) gives msgpack's bytes for
every value it is handed: the stored format does not depend on which library packed it."""

from __future__ import annotations

import msgpack
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from stream_rater.store.packing import pack

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.binary()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=6)
    ),
    max_leaves=30,
)


@given(_VALUES)
def test_any_value_packs_to_msgpacks_bytes(value: object) -> None:
    assert pack(value) == msgpack.packb(value, use_bin_type=True)


class _Rating(float):
    """A float subclass, as a model's numpy float is: ormsgpack refuses it, msgpack packs it."""


def test_a_value_ormsgpack_refuses_is_packed_by_msgpack_the_same() -> None:
    value = [np.float64(25.5), _Rating(1.25), {"mu": np.float64(-3.0)}]
    assert (
        pack(value)
        == msgpack.packb(value, use_bin_type=True)
        == msgpack.packb([25.5, 1.25, {"mu": -3.0}], use_bin_type=True)
    )
