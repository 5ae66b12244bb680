"""What many test files share: the one set of match-event builders (`match`, `duel`, parsed or
not), a rating-changed event, running the CLI, waiting for a condition, reading a topic until enough has arrived, a ladder's stored players.
Import it as ``from tests.helpers import ...`` (``tests`` is a package)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import MatchFinished, parse_match
from stream_rater.processor.quality import LIVE
from stream_rater.store import PlayerState, open_store
from stream_rater.waiting import wait_until, wait_until_async

_T = TypeVar("_T")

#: `finished_at` of the events `duel` makes unless told otherwise (epoch seconds, Nov 2023).
FINISHED_AT = 1_700_000_000.0

#: A valid rating-changed event (wire form).
RATING_CHANGED: dict[str, Any] = {
    "event_id": "h2-281884:p1",
    "match_id": "h2-281884",
    "ladder": "halo2-ffa",
    "player_id": "p1",
    "model": "trueskill",
    "before": {"mu": 25.0, "sigma": 8.333, "rating": 0.001},
    "after": {"mu": 27.6, "sigma": 7.2, "rating": 6.0},
    "rating": 6.0,
    "delta": 2.6,
    "rating_delta": 5.999,
    "games": 1,
    "finished_at": "2004-08-06T18:13:50Z",
    "processed_at": "2004-08-06T18:13:51.25Z",
}


def match(
    match_id: str,
    *teams: Sequence[str],
    ladder: str = "default",
    ranks: Sequence[float] | None = None,
    at: float | str = FINISHED_AT,
) -> dict:
    """A valid match-finished event (wire form): one team per sequence of player ids, team i
    ranked `ranks[i]` (default: i, the order given)."""
    return {
        "match_id": match_id,
        "ladder": ladder,
        "finished_at": at,
        "teams": [
            {"rank": rank, "players": [{"id": player} for player in team]}
            for rank, team in zip(range(len(teams)) if ranks is None else ranks, teams)
        ],
    }


def duel(
    match_id: str,
    first: str,
    second: str,
    *,
    ladder: str = "default",
    ranks: tuple[int, int] = (0, 1),
    at: float | str = FINISHED_AT,
) -> dict:
    """A valid 1-vs-1 match-finished event (wire form): `first` against `second`, ranked `ranks`
    (default: `first` wins; equal ranks are a draw)."""
    return match(match_id, [first], [second], ladder=ladder, ranks=ranks, at=at)


def parsed_match(ladders: Ladders, match_id: str, *teams: Sequence[str], **fields: Any) -> MatchFinished:
    """`match` validated against `ladders`: the form the processor takes."""
    return parse_match(match(match_id, *teams, **fields), ladders)


def parsed_duel(ladders: Ladders, match_id: str, first: str, second: str, **fields: Any) -> MatchFinished:
    """`duel` validated against `ladders`: the form the processor takes."""
    return parse_match(duel(match_id, first, second, **fields), ladders)


def cli(
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
    timeout: float = 120.0,
    unset: Collection[str] = (),
) -> subprocess.CompletedProcess:
    """Run ``python -m stream_rater ARGS`` (with `env` added to the environment and the variables
    in `unset` removed from it) and capture its output; with `check`, a non-zero exit fails the test."""
    result = subprocess.run(
        [sys.executable, "-m", "stream_rater", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None
        if env is None and not unset
        else {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset},
    )
    if check and result.returncode != 0:
        pytest.fail(f"exit {result.returncode}: {result.stderr}")
    return result


def assert_gone(pids: Iterable[int]) -> None:
    """Every PID in ``pids`` has exited and been reaped."""
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def wait_for(condition: Callable[[], _T | None], what: str, timeout: float = 120.0) -> _T:
    """Poll `condition` until it holds (`stream_rater.waiting.wait_until`); its value."""
    return wait_until(condition, what, timeout, interval=0.1)


async def consume_until(
    consumer: AIOKafkaConsumer, enough: Callable[[list[ConsumerRecord]], bool], what: str, timeout: float
) -> list[ConsumerRecord]:
    """Records fetched by `consumer` (assigned and positioned by the caller) until
    `enough(records)`; `TimeoutError` naming `what` after `timeout` seconds."""
    records: list[ConsumerRecord] = []

    async def fetched_enough() -> bool:
        if enough(records):
            return True
        for batch in (await consumer.getmany(timeout_ms=200)).values():
            records.extend(batch)
        return enough(records)

    await wait_until_async(fetched_enough, what, timeout, interval=0)
    return records


def stored_players(redis_url: str, ladder: str, prefix: str = "sr") -> dict[str, PlayerState]:
    """The ladder's players as stored in the Redis at `redis_url` under the key `prefix`."""

    async def read() -> dict[str, PlayerState]:
        store = open_store(redis_url, prefix=prefix)
        try:
            return await store.players(ladder)
        finally:
            await store.close()

    return asyncio.run(read())


def stored_quality(redis_url: str, ladder: str, prefix: str = "sr") -> dict[str, float]:
    """The ladder's live prediction-quality sums as stored in the Redis at `redis_url`."""

    async def read() -> dict[str, float]:
        store = open_store(redis_url, prefix=prefix)
        try:
            return (await store.quality(ladder, LIVE, 0))[0]
        finally:
            await store.close()

    return asyncio.run(read())


def stored_watermarks(redis_url: str, ladders: list[str], prefix: str = "sr") -> dict[str, int]:
    """Each ladder's watermark in the Redis at `redis_url`: the matches applied to its live
    generation (one read, whatever the ladder's size; a full scan of format 2's buckets is not)."""

    async def read() -> dict[str, int]:
        store = open_store(redis_url, prefix=prefix)
        try:
            return {ladder: (await store.read(ladder, [], [], [])).watermark for ladder in ladders}
        finally:
            await store.close()

    return asyncio.run(read())


async def topic_config(
    bootstrap: str, topic: str, admin: AIOKafkaAdminClient | None = None
) -> dict[str, str]:
    """``topic``'s effective configuration as the broker describes it (with `admin`, or a
    client of its own)."""
    if admin is None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return await topic_config(bootstrap, topic, admin)
        finally:
            await admin.close()
    (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    (resource,) = response.resources
    return {entry[0]: entry[1] for entry in resource[4]}


#: The weight that marks a match `poison_model` makes the model throw on.
POISON_WEIGHT = 0.37


def poisoned(event: dict) -> dict:
    """`event` with its first player's weight set to `POISON_WEIGHT`."""
    first = {**event["teams"][0]["players"][0], "weight": POISON_WEIGHT}
    return {**event, "teams": [{**event["teams"][0], "players": [first]}, *event["teams"][1:]]}


def poison_model(monkeypatch: pytest.MonkeyPatch, ladders: Ladders, ladder: str) -> None:
    """Make `ladder`'s model raise ZeroDivisionError on every `poisoned` match: the input a
    model cannot rate, decided by the match alone, as the worker and a replay both see it."""
    model = ladders.get(ladder).rating_model
    real = model.rate_match

    def rate_match(teams: Any, outcome: Any) -> Any:
        if outcome.weights and any(POISON_WEIGHT in team for team in outcome.weights):
            raise ZeroDivisionError("poison")
        return real(teams, outcome)

    monkeypatch.setattr(model, "rate_match", rate_match)


def gone(pid: int) -> bool:
    """Whether `pid` runs no more (exited: a zombie not yet reaped by its new parent counts)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
