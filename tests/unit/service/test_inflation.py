"""The inflation monitor on a memory store: gauges equal to the eligible players' totals, checked
against a recount once per interval, kept when the store fails, and the dashboard's
``/api/ladders/{ladder}/inflation`` answer."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.processor import Processor
from stream_rater.service.inflation import InflationMonitor
from stream_rater.store.memory import MemoryStore
from tests.helpers import parsed_duel

LADDERS = Ladders([Ladder("infl", "elo", {"leaderboard_active_days": 1})])
DAY = 86_400.0
T0 = 1_700_000_000.0


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(f"stream_rater_{name}", {"ladder": "infl"})


async def rated_store() -> MemoryStore:
    """a beats b long ago; c beats d a moment before `T0 + 10 days`."""
    store = MemoryStore()
    await Processor(LADDERS, store).process(
        [
            parsed_duel(LADDERS, "m1", "a", "b", ladder="infl", at=T0),
            parsed_duel(LADDERS, "m2", "c", "d", ladder="infl", at=T0 + 10 * DAY - 60),
        ]
    )
    return store


async def test_the_gauges_equal_the_eligible_totals_and_the_drift_follows_the_interval():
    """Ranked and active: c and d (a and b went idle and left the leaderboard), read at every
    refresh; the running sum is checked against a recount (drift 0 here) once per interval."""
    store = await rated_store()
    now = [T0 + 10 * DAY]
    monitor = InflationMonitor(store, LADDERS, interval=60.0, clock=lambda: now[0])
    recounts = []
    recount = store.recount_totals

    async def counted(ladder, since):
        recounts.append(ladder == "infl")
        return await recount(ladder, since)

    store.recount_totals = counted  # type: ignore[method-assign]
    await monitor.refresh()
    states = await store.players("infl")
    assert gauge("ranked_players") == 2 and gauge("ranked_rating_sum") == states["c"].mu + states["d"].mu
    assert gauge("ranked_rating_mean") == gauge("ranked_rating_sum") / 2
    assert gauge("active_players") == 2 and gauge("active_rating_sum") == gauge("ranked_rating_sum")
    assert gauge("rating_totals_timestamp_seconds") == now[0] and gauge("rating_sum_drift") == 0.0
    await Processor(LADDERS, store).process([parsed_duel(LADDERS, "m3", "e", "f", ladder="infl", at=now[0])])
    now[0] += 30
    await monitor.refresh()
    assert (gauge("ranked_players"), sum(recounts)) == (4, 1)
    now[0] += 31
    await monitor.refresh()
    assert (gauge("active_players"), sum(recounts)) == (4, 2)


async def test_a_failing_store_keeps_the_last_totals():
    """The store failing during a refresh: the gauges keep their last values, no exception."""
    store = await rated_store()
    monitor = InflationMonitor(store, LADDERS, interval=0.0, clock=lambda: T0 + 10 * DAY)
    await monitor.refresh()

    async def broken(*args, **kwargs):
        raise ConnectionError("store down")

    store.rating_totals = broken  # type: ignore[method-assign]
    await monitor.refresh()
    assert gauge("ranked_players") == 2


async def test_the_inflation_endpoint_answers_the_totals_season_and_generation():
    """The dashboard panel's JSON: ranked and active totals and means, the points counted,
    the season and the live generation; an unknown ladder is 404."""
    store = await rated_store()
    monitor = InflationMonitor(store, LADDERS, interval=0.0, clock=lambda: T0 + 10 * DAY)
    application = web.Application()
    application.add_routes(monitor.routes())
    async with TestClient(TestServer(application)) as client:
        response = await client.get("/api/ladders/infl/inflation")
        body = await response.json()
        assert response.status == 200
        assert body["ranked"] == {
            "players": 2,
            "sum": gauge("ranked_rating_sum"),
            "mean": gauge("ranked_rating_mean"),
        }
        assert body["active"]["players"] == 2 and (body["season"], body["generation"]) == (1, 0)
        assert body["computed_at"] == T0 + 10 * DAY
        assert (await client.get("/api/ladders/nosuch/inflation")).status == 404


async def test_a_ladder_rated_elsewhere_has_its_gauges_dropped_here():
    """Only the worker holding a ladder's home partition publishes its totals: when another
    worker owns it, this one's gauges for it go away."""
    store = await rated_store()
    monitor = InflationMonitor(store, LADDERS, interval=0.0, clock=lambda: T0 + 10 * DAY)
    await monitor.refresh()
    assert gauge("ranked_players") == 2
    await monitor.refresh(lambda ladder: False)
    assert gauge("ranked_players") is None and gauge("active_rating_mean") is None
