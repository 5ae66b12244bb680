"""``openapi.yaml`` is the read API's contract: schemathesis, with every check, sends requests
generated from it to a real ``stream-rater serve`` over ladders with rated players, with an
API token of the read scope (and without one, for the check that authentication is not
ignored), and every
answer must be one the contract allows (never a server error, schema-valid requests accepted,
invalid ones refused, bodies as described).

Reproduce by hand: ``schemathesis --config-file FILE run http://HOST:PORT/api/openapi.yaml
--checks all --seed SEED`` with ``SCHEMATHESIS_HOOKS=tests/e2e/openapi_hooks.py`` and the
configuration this test writes; a failure's output gives the seed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import yaml

from stream_rater.local.demo import stop_process, wait_ready
from stream_rater.local.runtime import free_port
from stream_rater.service.auth.tokens import new_token
from stream_rater.service.query_api import OPENAPI
from tests.helpers import duel

pytestmark = pytest.mark.e2e

HOOKS = Path(__file__).with_name("openapi_hooks.py")
#: Duels replayed into each ladder (ids m0 … m59).
MATCHES = 60
#: The modes of the TrueSkill ladder (issue 48): its matches are in the first, its default.
MODES = ["duel", "team"]
#: Test cases per operation and phase: a few hundred requests in all, some seconds.
MAX_EXAMPLES = 100


def example_players(spec: dict[str, Any]) -> list[str]:
    """Every player id in the contract's request examples, so the examples phase asks about
    rated players rather than new ones."""

    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)
        elif isinstance(value, dict):
            for key in ("players", "teams"):
                yield from strings(value.get(key))

    examples = (
        operation["requestBody"]["content"]["application/json"].get("example")
        for path in spec["paths"].values()
        for operation in path.values()
        if "requestBody" in operation
    )
    return sorted({player for example in examples for player in strings(example)})


def rated_ladders(tmp_path: Path, redis_url: str, prefix: str) -> list[str]:
    """Two ladders replayed into the store, a time-scaled TrueSkill one (σ grows while idle)
    with modes (`MODES`, its matches in the default one) and an Elo one (no σ, no modes), each
    with 60 duels among the example players."""
    ladders = [f"{prefix}-trueskill", f"{prefix}-elo"]
    (tmp_path / "ladders.toml").write_text(
        f'[ladders.{ladders[0]}]\nmodel = "trueskill"\ntime_tau = 0.01\ntime_unit = "days"\n'
        f'default_mode = "{MODES[0]}"\n\n'
        + "".join(f"[ladders.{ladders[0]}.modes.{mode}]\n" for mode in MODES)
        + f'\n[ladders.{ladders[1]}]\nmodel = "elo"\n'
    )
    players = example_players(yaml.safe_load(OPENAPI.read_text()))
    rng = random.Random(7)
    events = [
        duel(f"m{i}", a, b, ladder=ladder, at=1_700_000_000 + 3600 * i)
        for ladder in ladders
        for i, (a, b) in enumerate(rng.sample(players, 2) for _ in range(MATCHES))
    ]
    (tmp_path / "matches.jsonl").write_text("".join(json.dumps(event) + "\n" for event in events))
    replay = subprocess.run(
        [
            *(sys.executable, "-m", "stream_rater", "replay", str(tmp_path / "matches.jsonl")),
            *("--store", redis_url),
            *("--out", str(tmp_path / "out.jsonl"), "--ladders-file", str(tmp_path / "ladders.toml")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replay.returncode == 0, replay.stderr
    return ladders


def schemathesis_config(ladders: list[str], players: list[str]) -> str:
    """The run's configuration: the ladder path parameter is one of `ladders`, the player one
    and the leaderboard's ``around`` one of `players` (so a history is mostly found; a player
    with no trace, which the coverage phase makes up, is 404 as documented); a schema-valid
    request must get 200, or 413 over the server's player limit (a setting the schema cannot
    know), and a request that breaks the schema is rejected with a 4xx, 413 among them (too
    many players breaks the schema's maxItems too); predict, balance and leaderboard may also
    answer 400 for the rule JSON Schema cannot state, which `openapi_hooks` checks the request
    really breaks, and leaderboard 404 or 409 for ``around`` a player the ladder has never
    seen or does not rank, and 304 to an ``If-None-Match`` that names its answer (``*`` does:
    `openapi_hooks` checks it); any warning (such as every request answered 404) fails the run. A
    match id is one of the replayed matches' (`MATCHES`), and a schema-valid one the ladder
    never applied is rightly 404. Any read may answer 404 to a ``mode`` (the Elo ladder has
    none; the TrueSkill one has `MODES`), which `openapi_hooks` checks says so."""
    return f"""
[dictionaries]
ladders = {{values = {json.dumps(ladders)}}}
players = {{values = {json.dumps(players)}}}
matches = {{values = {json.dumps([f"m{i}" for i in range(MATCHES)])}}}
modes = {{values = {json.dumps(MODES)}}}

[parameters]
"path.ladder" = {{dictionary = "ladders"}}
"path.player" = {{dictionary = "players"}}
"path.match_id" = {{dictionary = "matches"}}
"query.around" = {{dictionary = "players"}}
"query.mode" = {{dictionary = "modes"}}

[warnings]
fail-on = true

[checks.positive_data_acceptance]
expected-statuses = ["200", "413"]

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]

[[operations]]
include-path-regex = "/(predict|balance)$"
checks.positive_data_acceptance.expected-statuses = ["200", "400", "404", "413"]

[[operations]]
include-path-regex = "/(players|quality)$"
checks.positive_data_acceptance.expected-statuses = ["200", "404", "413"]

[[operations]]
include-path-regex = "/(players/[^/]+|matches/.*)$"
checks.positive_data_acceptance.expected-statuses = ["200", "404"]

[[operations]]
include-path-regex = "/leaderboard$"
checks.positive_data_acceptance.expected-statuses = ["200", "304", "400", "404", "409", "413"]
"""


def test_serve_answers_as_its_openapi_contract_says(
    redis_url: str, redis_client: redis.Redis, unique_name: str, tmp_path: Path, archive_url: str
):
    """Every check of schemathesis passes on every operation of the served contract that
    `serve` serves (all but those tagged worker; `redis_client` deletes the ladders' keys
    afterwards), with an archive (migrated, empty: histories come from it, pages by
    ``before`` included; tests/e2e/test_read_api.py has the answers from Redis)."""
    ladders = rated_ladders(tmp_path, redis_url, unique_name)
    players = example_players(yaml.safe_load(OPENAPI.read_text()))
    (tmp_path / "schemathesis.toml").write_text(schemathesis_config(ladders, players))
    assert (
        subprocess.run(
            [sys.executable, "-m", "stream_rater", "archive", "--migrate", "--archive-url", archive_url]
        ).returncode
        == 0
    )
    token, entry = new_token("contract", frozenset({"read"}), 100_000.0)  # no 429 mid-run
    (tmp_path / "tokens").write_text(entry.line() + "\n")
    port = free_port()
    server = subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "stream_rater",
                "serve",
                "--store",
                redis_url,
                "--archive-url",
                archive_url,
            ),
            *("--web-port", str(port)),
            *("--ladders-file", str(tmp_path / "ladders.toml")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={
            **os.environ,
            "STREAM_RATER_API_TOKENS_FILE": str(tmp_path / "tokens"),
            "STREAM_RATER_API_BURST": "100000",
        },
    )
    try:
        wait_ready(server, f"http://127.0.0.1:{port}/readyz", timeout=60)
        run = subprocess.run(
            [
                *(sys.executable, "-m", "schemathesis.cli", "--no-color"),
                *("--config-file", str(tmp_path / "schemathesis.toml"), "run"),
                f"http://127.0.0.1:{port}/api/openapi.yaml",
                *("--checks", "all", "--max-examples", str(MAX_EXAMPLES)),
                *("--exclude-tag", "worker"),  # a worker's own views: `serve` has none
                *("--header", f"Authorization: Bearer {token}"),  # its ignored_auth check goes without
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)},
        )
    finally:
        assert stop_process(server) in (0, -15)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "No issues found" in run.stdout, run.stdout


def _positive_case(path: str, body: dict[str, Any], positive: bool = True) -> SimpleNamespace:
    """A schemathesis case as `openapi_hooks` reads one: its path, body and generation mode."""
    mode = SimpleNamespace(is_positive=positive)
    return SimpleNamespace(path=path, body=body, meta=SimpleNamespace(generation=SimpleNamespace(mode=mode)))


def test_positive_bodies_are_made_to_keep_the_rules_the_schema_cannot_state():
    """What keeps a phase from seeing every positive ``predict`` or ``balance`` refused (stop
    63's CI): the bodies hypothesis shrinks to, one player into two teams and ``[["0"], ["0"]]``,
    come out keeping the rules `openapi_hooks` checks every 400 against; a negative case is
    left as drawn."""
    from tests.e2e import openapi_hooks as hooks

    def mapped(path: str, body: dict[str, Any], positive: bool = True) -> Any:
        return hooks.positive_bodies_keep_the_unstated_rules(None, _positive_case(path, body, positive))

    one = mapped("/api/ladders/{ladder}/balance", {"players": ["0"], "team_sizes": [908983971, 188360]})
    assert one.body == {"players": ["0", "pad"], "team_sizes": [1, 1]}
    parties = mapped(
        "/api/ladders/{ladder}/balance",
        {"players": list("abcde"), "team_sizes": [1, 1], "parties": [["x", "y", "z"], ["q", "r", "s"]]},
    )
    assert parties.body["team_sizes"] == [3, 2] and parties.body["parties"] == [["a", "b", "c"]]
    assert not hooks._sizes_not_adding_up(one) and not hooks._sizes_not_adding_up(parties)
    twice = mapped("/api/ladders/{ladder}/predict", {"teams": [["0"], ["0"]], "parties": [["zz", "0"]]})
    assert twice.body == {"teams": [["0"], ["0-"]], "parties": [["0", "0-"]]}
    assert not hooks._player_on_two_teams(twice)
    negative = {"teams": [["0"], ["0"]]}
    assert mapped("/api/ladders/{ladder}/predict", negative, positive=False).body is negative
