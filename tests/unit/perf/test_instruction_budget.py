"""The instruction budget (issue #46): each workload's instructions per match, counted by
callgrind in total and per function group (`tests.unit.perf.callgrind.MARKERS`), stays
within `budget.json`. A failure names each group over its budget, so the step that grew is
the one to look at. ``python -m tests.unit.perf.callgrind`` re-sets the budget from the
current code (figures plus 7 %): do so only for a cost the change means to add."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.unit.perf.callgrind import BUDGET, MARKERS, MATCHES, VALGRIND, count
from tests.unit.perf.workload import CASES

#: Under CI=true a skip fails (tests/conftest.py): .ci/run installs valgrind.
pytestmark = pytest.mark.skipif(shutil.which(VALGRIND) is None, reason="valgrind is not installed")


def over_budget(case: str, counted: dict[str, float], budget: dict[str, int]) -> list[str]:
    """One line per group of `counted` over its `budget`."""
    return [
        f"{case}: {group} ({MARKERS[group][1]}) {counted[group]:,.0f} instructions per match > "
        f"budget {budget[group]:,} (+{counted[group] / budget[group] - 1:.1%})"
        for group in MARKERS
        if counted[group] > budget[group]
    ]


@pytest.mark.parametrize("case", list(CASES))
def test_instructions_per_match_within_budget(case: str) -> None:
    budget = json.loads(BUDGET.read_text())[case]
    counted = count(case, MATCHES)
    assert all(counted[g] > 0 for g in MARKERS), f"a group went uncounted (markers lost?): {counted}"
    over = over_budget(case, counted, budget)
    figures = ", ".join(f"{g} {counted[g]:,.0f}/{budget[g]:,}" for g in MARKERS)
    assert not over, "\n".join([*over, f"{case}, counted/budget per match: {figures}"])


def test_over_budget_names_the_group_that_grew() -> None:
    budget = dict.fromkeys(MARKERS, 100)
    counted = dict.fromkeys(MARKERS, 100.0) | {"events": 150.0}
    (line,) = over_budget("duel", counted, budget)
    assert line.startswith("duel: events (planner._events") and "(+50.0%)" in line
