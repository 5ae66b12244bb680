"""The archiver's failure labels: the SQLSTATE class, or the error's type."""

from __future__ import annotations

from stream_rater.service.archiver import _reason


def test_failures_are_labelled_by_sqlstate_class_or_type():
    class Refused(Exception):
        sqlstate = "25006"

    assert (_reason(Refused()), _reason(OSError())) == ("sqlstate_25", "OSError")
