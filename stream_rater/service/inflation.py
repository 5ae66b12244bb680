"""The inflation monitor's totals: per ladder, how many players are ranked and active and the
sum and mean of their display ratings, as Prometheus gauges (`metrics`), read at every scrape.

The commits keep the leaderboard's sum as they write it (``lb:sum``, `ReadStore.rating_totals`),
and the leaderboard holds only eligible players (idle ones are trimmed off it), so a read costs
O(1) whatever the ladder's size: ranked and active are the same players, the eligible ones,
both kept for the gauges' names. Every ``inflation_interval`` seconds the worker whose
partitions include the ladder's home partition (`home_here`: the cost does not grow with the
number of workers) also trims the players gone idle off the leaderboard (a ladder with no
commits for a while) and recounts the totals exactly from every entry, in bounded steps
(`ReadStore.recount_totals`): ``stream_rater_rating_sum_drift`` is the running sum less that
recount (a few ulps; more means the running sum went wrong: `stream-rater migrate` recounts it).
The per-match figure, the points each match created, is counted from the events as they are
produced (`processor.points_created`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import faust
from aiohttp import web
from prometheus_client import REGISTRY

from stream_rater.config.ladders import Ladders, UnknownLadderError
from stream_rater.kafka import home_partition
from stream_rater.service import metrics
from stream_rater.store import RatingTotals, ReadStore

log = logging.getLogger(__name__)


class InflationMonitor:
    """Keeps each configured ladder's rating-total gauges, checked against a recount every
    `interval` seconds."""

    def __init__(
        self, store: ReadStore, ladders: Ladders, interval: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.ladders = ladders
        self.interval = interval
        self.clock = clock
        self._computed: dict[str, float] = {}
        #: Ladder → when its running totals were last checked against a recount.
        self._checked: dict[str, float] = {}
        #: Ladder → its last totals and when they were computed.
        self.latest: dict[str, tuple[RatingTotals, float]] = {}

    async def refresh(self, owns: Callable[[str], bool] = lambda ladder: True) -> None:
        """Read the totals of every ladder this worker `owns` (and check them against a recount
        when the last check is older than the interval), and drop the gauges of the others
        (another worker publishes them); a store that fails leaves the last ones (and their
        timestamp) as they were."""
        for name, ladder in self.ladders.items():
            if not owns(name):
                if self._computed.pop(name, None) is not None:
                    unpublish(name)
                continue
            now = self.clock()
            since = ladder.rules.active_since(now)
            try:
                totals = await self.store.rating_totals(name, since)
                if now - self._checked.get(name, -math.inf) >= self.interval:
                    await self._check(name, since, totals)
                    self._checked[name] = now
            except Exception as exc:  # a scrape must answer while the store does not
                log.warning("rating totals of ladder %r not computed: %r", name, exc)
                return
            publish(name, totals, now)
            self.latest[name] = (totals, now)
            self._computed[name] = now

    async def _check(self, ladder: str, since: float | None, totals: RatingTotals) -> None:
        """Trim the ladder's idle players off its leaderboard and set the drift of its running
        sum from an exact recount."""
        if since is not None:
            await self.store.trim_board(ladder, since)
        recount = await self.store.recount_totals(ladder, since)
        metrics.RATING_SUM_DRIFT.labels(ladder).set(totals.ranked_sum - recount.ranked_sum)

    def routes(self) -> list[web.RouteDef]:
        """``GET /api/ladders/{ladder}/inflation``: the totals (refreshed if stale), the
        points this worker counted created and removed, and the season and generation, for
        the dashboard's inflation panel."""
        return [web.get("/api/ladders/{ladder}/inflation", self._answer)]

    async def _answer(self, request: web.Request) -> web.Response:
        try:
            ladder = self.ladders[request.match_info["ladder"]]
        except UnknownLadderError as exc:
            return web.json_response({"error": exc.message}, status=404)
        await self.refresh()
        totals, at = self.latest.get(ladder.name, (RatingTotals(0, 0.0, 0, 0.0), None))
        seasons = await self.store.seasons(ladder.name)
        generations = await self.store.generations(ladder.name)
        body: dict[str, Any] = {
            "ladder": ladder.name,
            "computed_at": at,
            "ranked": {
                "players": totals.ranked,
                "sum": totals.ranked_sum,
                "mean": _mean(totals.ranked_sum, totals.ranked),
            },
            "active": {
                "players": totals.active,
                "sum": totals.active_sum,
                "mean": _mean(totals.active_sum, totals.active),
            },
            "points_created": _counted("stream_rater_rating_points_created_total", ladder.name),
            "points_removed": _counted("stream_rater_rating_points_removed_total", ladder.name),
            "season": len(seasons) + 1,
            "generation": generations.live,
        }
        return web.json_response(body)


def home_here(app: faust.App, topic: str) -> Callable[[str], bool]:
    """Whether a ladder's home partition of `topic` (where its matches go) is assigned to this
    worker, so that one worker — the one rating the ladder — computes its totals; every
    ladder while the consumer does not know the topic's partitions yet."""
    try:
        count = app.consumer.topic_partitions(topic)
        assigned = {tp.partition for tp in app.consumer.assignment() if tp.topic == topic}
    except faust.exceptions.ConsumerNotStarted:
        count = None
    if not count:
        return lambda ladder: True
    return lambda ladder: home_partition(ladder, count) in assigned


def unpublish(ladder: str) -> None:
    """Remove `ladder`'s totals gauges from this worker's metrics."""
    for gauge in _GAUGES:
        try:
            gauge.remove(ladder)
        except KeyError:
            pass


def publish(ladder: str, totals: RatingTotals, at: float) -> None:
    """Set `ladder`'s gauges from `totals` computed at `at` (a mean of no players is NaN)."""
    metrics.RANKED_PLAYERS.labels(ladder).set(totals.ranked)
    metrics.RANKED_RATING_SUM.labels(ladder).set(totals.ranked_sum)
    metrics.RANKED_RATING_MEAN.labels(ladder).set(
        totals.ranked_sum / totals.ranked if totals.ranked else math.nan
    )
    metrics.ACTIVE_PLAYERS.labels(ladder).set(totals.active)
    metrics.ACTIVE_RATING_SUM.labels(ladder).set(totals.active_sum)
    metrics.ACTIVE_RATING_MEAN.labels(ladder).set(
        totals.active_sum / totals.active if totals.active else math.nan
    )
    metrics.RATING_TOTALS_AGE.labels(ladder).set(at)


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


def _counted(sample: str, ladder: str) -> float:
    """This worker's value of the counter `sample` for `ladder` (0 before its first match)."""
    return REGISTRY.get_sample_value(sample, {"ladder": ladder}) or 0.0


_GAUGES = (
    metrics.RANKED_PLAYERS,
    metrics.RANKED_RATING_SUM,
    metrics.RANKED_RATING_MEAN,
    metrics.ACTIVE_PLAYERS,
    metrics.ACTIVE_RATING_SUM,
    metrics.ACTIVE_RATING_MEAN,
    metrics.RATING_TOTALS_AGE,
    metrics.RATING_SUM_DRIFT,
)
