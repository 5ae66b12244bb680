"""`demo`'s report lines."""

from __future__ import annotations

from stream_rater.local.demo import verify_line
from stream_rater.offline.verify import VerifyReport


def test_the_demo_words_its_verify_result_as_verify_does():
    """One wording everywhere: the demo's line ends as `verify`'s summary line does."""
    report = VerifyReport("football", 100, 7, [], ordered=True, rejected=0, caught_up=True)
    assert verify_line(report).endswith("7 players, none differ from the replay")
    assert report.lines()[-1].endswith("; 7 players, none differ from the replay")
