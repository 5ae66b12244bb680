"""Schemathesis hooks of `test_openapi_contract` (loaded by the CLI through ``SCHEMATHESIS_HOOKS``).

Two rules of the read API cannot be stated in JSON Schema, so a request the schema allows may
break them and is rightly answered 400, as ``openapi.yaml`` documents: a player on two teams
(``predict``) and team sizes that do not add up to the players (``balance``). The test's
configuration lets those two operations answer schema-valid data with 400, and the check here
keeps that narrow: such a 400 must come with a request that really breaks the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import schemathesis


def _player_on_two_teams(body: dict[str, Any]) -> bool:
    everyone = [player for team in body["teams"] for player in team]
    return len(set(everyone)) != len(everyone)


def _sizes_not_adding_up(body: dict[str, Any]) -> bool:
    return sum(body["team_sizes"]) != len(body["players"])


#: Path suffix → the unstated rule a schema-valid request to it may break.
UNSTATED_RULES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "/predict": _player_on_two_teams,
    "/balance": _sizes_not_adding_up,
}


@schemathesis.check
def refuses_only_unstated_rules(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 400 to schema-valid data must be for breaking the operation's unstated rule."""
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 400:
        return None
    rule = next((rule for suffix, rule in UNSTATED_RULES.items() if case.path.endswith(suffix)), None)
    if rule is None or not rule(case.body):
        raise AssertionError(f"schema-valid request refused: {response.text}")
    return None
