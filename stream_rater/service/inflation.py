"""The inflation monitor's totals: per ladder, how many players are ranked and active and the
sum and mean of their display ratings, as Prometheus gauges (`metrics`), refreshed when a
scrape finds them older than ``inflation_interval`` seconds.

Why computed from the leaderboard and not kept as running sums: the active population changes
with the clock alone (a player stops counting ``leaderboard_active_days`` after their last
match, with no write), and re-rates, seasons and voids swap or rewrite whole leaderboards; a
sum kept from each commit's deltas would need the commit script to read every old score and
would still miss the first two. The leaderboard holds exactly the ranked players' display
ratings, so one pass over it in bounded steps (`ReadStore.rating_totals`) is exact and costs
O(ranked players) per refresh and nothing per match, in steps of `TOTALS_STEP` entries (a few
milliseconds of Redis each), by the one worker whose partitions include the ladder's home
partition (`home_here`): the cost does not grow with the number of workers. Measured: README
"Inflation monitor". The per-match figure, the points each match created, is counted from
the events as they are produced (`processor.points_created`).
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
    """Keeps each configured ladder's rating-total gauges at most `interval` seconds old."""

    def __init__(
        self, store: ReadStore, ladders: Ladders, interval: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.ladders = ladders
        self.interval = interval
        self.clock = clock
        self._computed: dict[str, float] = {}
        #: Ladder → its last totals and when they were computed.
        self.latest: dict[str, tuple[RatingTotals, float]] = {}

    async def refresh(self, owns: Callable[[str], bool] = lambda ladder: True) -> None:
        """Recompute the totals of every ladder this worker `owns` whose gauges are older than
        the interval, and drop the gauges of the others (another worker publishes them); a
        store that fails leaves the last ones (and their timestamp) as they were."""
        for name, ladder in self.ladders.items():
            if not owns(name):
                if self._computed.pop(name, None) is not None:
                    unpublish(name)
                continue
            now = self.clock()
            if now - self._computed.get(name, -math.inf) < self.interval:
                continue
            try:
                totals = await self.store.rating_totals(name, ladder.rules.active_since(now))
            except Exception as exc:  # a scrape must answer while the store does not
                log.warning("rating totals of ladder %r not computed: %r", name, exc)
                return
            publish(name, totals, now)
            self.latest[name] = (totals, now)
            self._computed[name] = now

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
)
