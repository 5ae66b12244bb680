"""The integer parameters of the read API take decimal digits only (schemathesis found
``last=%0B1``, a vertical tab before the digit, answered as ``last=1``)."""

from __future__ import annotations

import pytest

from stream_rater.queries import QueryError, limit_of, n_of, top_of, whole_number


@pytest.mark.parametrize(("value", "number"), [("12", 12), ("0", 0), (7, 7), (-3, -3)])
def test_an_int_or_its_decimal_digits_is_that_number(value, number):
    assert whole_number(value) == number


@pytest.mark.parametrize(
    "value", ["\x0b1", " 1", "1 ", "+1", "-1", "1_0", "1.0", "\u0661", "", True, 1.0, None]
)
def test_anything_else_is_no_number(value):
    assert whole_number(value) == -1


@pytest.mark.parametrize(
    "check", [lambda v: top_of(v), lambda v: n_of(v), lambda v: limit_of(v, "limit", 5, 9)]
)
def test_the_api_parameters_refuse_whitespace_around_digits(check):
    assert check("3") == 3
    with pytest.raises(QueryError):
        check("\x0b3")
