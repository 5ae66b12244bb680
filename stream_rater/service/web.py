"""The worker's HTTP server: Prometheus metrics, health probes, a JSON API and the read-only
dashboard (``web_static/``), on ``STREAM_RATER_WEB_HOST:STREAM_RATER_WEB_PORT``.

=====================================================  ==========================================
``GET /metrics``                                       Prometheus text format (`stream_rater.service.metrics`)
``GET /healthz``                                       200 while the event loop answers
``GET /readyz``                                        200 when partitions of the matches topic are
                                                       assigned here, the broker and Redis answer,
                                                       Redis does not refuse writes (OOM, READONLY,
                                                       …), no ladder is stopped by a lost store and no
                                                       partition is stalled (``stall_after``), else
                                                       503 with ``{"ready": false, "reason": ...}``
``GET /``                                              the dashboard (static page + ``/static/*``)
``GET /api/overview``                                  totals, lag per partition, per-second series
``GET /api/feed?limit=&ladder=``                       recent rating changes, newest first
``GET /api/ladders``                                   configured ladders and their models — the read API's
``GET /api/ladders/{ladder}/leaderboard?top=``         top players with display rating, μ, σ (stored
                                                       and as of now), games — the read API's
``GET /api/ladders/{ladder}/distribution?bins=``       histogram of display ratings
``GET /api/ladders/{ladder}/players/{player}?limit=``  state and rating history, newest first — the
                                                       read API's
``GET /api/ladders/{ladder}/matches/{match_id}``       why each player's rating moved (read API)
=====================================================  ==========================================

faust's own web stack always mounts a view at ``/`` (its "production index" when web stats
are off, the stats view otherwise; no setting removes it), so the worker registers this
server with `faust.App.web_server`, the hook by which an app owns the worker's HTTP server;
faust's built-in views are then not served at all. faust starts it once the app has started.
The read API (`stream_rater.service.query_api`, its leaderboard included) is mounted beside
these views.

The feed and the per-second series are this worker's own (in-memory ring buffers fed by
`BatchMetrics.finished` and by sampling the metrics every second); with several
workers each dashboard shows its share, while Prometheus aggregates across workers. Ladder
views read the shared store, so they are the same on every worker.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import faust
from aiohttp import web
from aiokafka.errors import KafkaError
from faust.types import TP
from mode import Service

from stream_rater.archive import archive_reader
from stream_rater.config.ladders import Ladder, Ladders, UnknownLadderError
from stream_rater.config.settings import Settings
from stream_rater.queries import Queries, whole_number
from stream_rater.service import metrics
from stream_rater.service.auth import protect
from stream_rater.service.batch_metrics import BatchMetrics, Recent
from stream_rater.service.faust_transport import broker_answers, held_partitions, stalled_partitions
from stream_rater.service.inflation import InflationMonitor, home_here
from stream_rater.service.ladder_health import LadderHealth
from stream_rater.service.query_api import query_routes
from stream_rater.store import ReadStore

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).with_name("web_static")

#: Seconds between consumer-lag measurements.
LAG_INTERVAL = 5.0
#: How long /readyz waits for Redis to answer a PING, in seconds.
PING_TIMEOUT = 2.0
#: The distribution is drawn from at most this many players (the top of the leaderboard).
DISTRIBUTION_LIMIT = 10_000

#: Running totals shown on the overview.
_TOTALS: dict[str, Any] = {
    "consumed": metrics.MATCHES_CONSUMED,
    "applied": metrics.MATCHES_APPLIED,
    "duplicates": metrics.MATCHES_DUPLICATE,
    "rejected": metrics.MATCHES_REJECTED,
    "dead_letters": metrics.DEAD_LETTERS,
    "rating_changes": metrics.RATING_CHANGES,
    "conflicts": metrics.COMMIT_CONFLICTS,
    "retries": metrics.BATCH_RETRIES,
}


def assigned_partitions(app: faust.App, topic: str) -> list[int]:
    """Partitions of `topic` assigned to this worker (none before the consumer started)."""
    try:
        assignment = app.consumer.assignment()
    except faust.exceptions.ConsumerNotStarted:
        return []
    return sorted(tp.partition for tp in assignment if tp.topic == topic)


def update_partition_gauges(app: faust.App, topic: str) -> None:
    """Set ``stream_rater_partitions_assigned`` (this worker's share of `topic`) and
    ``stream_rater_topic_partitions`` (its partition count as the consumer knows it, when it
    knows it): summed over workers, the first falls short of the second while a partition has
    no consumer."""
    metrics.PARTITIONS_ASSIGNED.labels(topic).set(len(assigned_partitions(app, topic)))
    try:
        count = app.consumer.topic_partitions(topic)
    except faust.exceptions.ConsumerNotStarted:
        count = None
    if count:
        metrics.TOPIC_PARTITIONS.labels(topic).set(count)


async def update_consumer_lag(
    app: faust.App, topic: str, next_offsets: Mapping[tuple[str, int], int]
) -> None:
    """Set ``stream_rater_consumer_lag`` per assigned partition of `topic`: end offset minus
    the next offset to process, clamped at 0; partitions assigned elsewhere since lose their
    series.

    The next offset to process comes from `next_offsets` (the batches this worker finished
    since the partition was assigned), else from the consumer's position, which runs ahead by
    the events fetched into the worker's buffers. The end offset is the larger of two lower
    bounds: the broker's answer to a ListOffsets request and the highwater of the last fetch
    response. Kafka answers the first exactly; the Tansu broker of the local runtime answers
    it far too low (1 for a partition holding 50 events), so there the lag relies on the fetch
    highwater, which lags behind while the worker's buffers are full: lag then reads too low.
    """
    consumer = app.consumer
    tps = [tp for tp in consumer.assignment() if tp.topic == topic]
    listed = await consumer.highwaters(*tps) if tps else {}
    current = set()
    for tp in tps:
        done = next_offsets.get((tp.topic, tp.partition))
        if done is None:
            done = await consumer.position(tp)
        ends = [end for end in (listed.get(tp), consumer.highwater(tp)) if end is not None]
        if done is not None and ends:
            metrics.CONSUMER_LAG.labels(topic, str(tp.partition)).set(max(0, max(ends) - done))
            current.add(str(tp.partition))
    for family in metrics.CONSUMER_LAG.collect():
        for sample in family.samples:
            labels = sample.labels
            if labels["topic"] == topic and labels["partition"] not in current:
                metrics.CONSUMER_LAG.remove(topic, labels["partition"])


class Dashboard:
    """The request handlers; reads the store, the ladders, the metrics and `Recent`."""

    def __init__(
        self,
        app: faust.App,
        store: ReadStore,
        ladders: Ladders,
        settings: Settings,
        recent: Recent,
        health: LadderHealth,
    ) -> None:
        """`health` says why ladders are not being applied or the store refuses writes."""
        self.app = app
        self.store = store
        self.ladders = ladders
        self.settings = settings
        self.recent = recent
        self.health = health
        self.started = time.time()
        self.inflation = InflationMonitor(store, ladders, settings.inflation_interval)
        #: Dependency → monotonic time of the first failed probe of its current outage.
        self._failing_since: dict[str, float] = {}

    def routes(self) -> web.Application:
        """An aiohttp application with every endpoint of the module docstring."""
        application = web.Application(middlewares=[_json_errors])
        application.add_routes(
            [
                web.get("/", self.index),
                web.get("/metrics", self.metrics),
                web.get("/healthz", self.healthz),
                web.get("/readyz", self.readiness),
                web.get("/api/overview", self.overview),
                web.get("/api/feed", self.feed),
                web.get("/api/ladders/{ladder}/distribution", self.distribution),
                *query_routes(
                    Queries(
                        self.store,
                        self.ladders,
                        self.settings.max_query_players,
                        history_limit=self.settings.redis_history(),
                        archive=archive_reader(self.settings),
                    )
                ),
                *self.inflation.routes(),
                web.static("/static", STATIC_DIR),
            ]
        )
        protect(application, self.settings)
        return application

    async def index(self, request: web.Request) -> web.StreamResponse:
        """The dashboard page."""
        return web.FileResponse(STATIC_DIR / "index.html")

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus scrape endpoint; evaluates readiness, the partition gauges and (when older
        than ``inflation_interval``) the ladders' rating totals first, so that every scrape has
        them current."""
        await self.readiness(request)
        update_partition_gauges(self.app, self.settings.topic_matches)
        await self.inflation.refresh(home_here(self.app, self.settings.topic_matches))
        body, content_type = metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def healthz(self, request: web.Request) -> web.Response:
        """Liveness: answering at all means the event loop runs."""
        return web.json_response({"status": "ok"})

    async def readiness(self, request: web.Request) -> web.Response:
        """`readyz`, and ``stream_rater_ready`` set from its answer (1 for 200, else 0)."""
        response = await self.readyz(request)
        metrics.READY.set(1 if response.status == 200 else 0)
        return response

    async def readyz(self, request: web.Request) -> web.Response:
        """Readiness: partitions assigned here, the broker and Redis answering, Redis not
        refusing writes, no ladder stopped by a lost store, no partition held
        (`faust_transport.held_partitions`)."""
        topic = self.settings.topic_matches
        partitions = assigned_partitions(self.app, topic)
        reasons = [] if partitions else [f"no partition of topic {topic!r} is assigned to this worker"]
        try:
            redis_ok = await asyncio.wait_for(self.store.ping(), PING_TIMEOUT)
        except TimeoutError:
            redis_ok = False
        reasons += self._outage(
            "store", redis_ok, f"the store does not answer PING within {PING_TIMEOUT:g} s"
        )
        reasons += self._outage(
            "broker",
            await broker_answers(self.app, PING_TIMEOUT),
            f"the broker does not answer a metadata request within {PING_TIMEOUT:g} s",
        )
        reasons += self.health.reasons()
        reasons += held_partitions(self.app)
        reasons += stalled_partitions(self.app)
        if reasons:
            return web.json_response({"ready": False, "reason": "; ".join(reasons)}, status=503)
        return web.json_response({"ready": True, "partitions": partitions})

    def _outage(self, dependency: str, answered: bool, reason: str) -> list[str]:
        """No reason while `dependency` answered; else `reason` and how long the probes of this
        /readyz have found it unanswering (since the first failed one in a row)."""
        if answered:
            self._failing_since.pop(dependency, None)
            return []
        since = self._failing_since.setdefault(dependency, time.monotonic())
        return [f"{reason} (unanswered for {time.monotonic() - since:.0f} s)"]

    async def overview(self, request: web.Request) -> web.Response:
        """What an operator looks at first: this worker, totals, lag, recent rates."""
        lag = [
            {"partition": int(s.labels["partition"]), "lag": s.value}
            for family in metrics.CONSUMER_LAG.collect()
            for s in family.samples
            if s.labels["topic"] == self.settings.topic_matches
        ]
        return web.json_response(
            {
                "worker": {
                    "consumer_group": self.settings.consumer_group,
                    "topic": self.settings.topic_matches,
                    "partitions": assigned_partitions(self.app, self.settings.topic_matches),
                    "uptime": time.time() - self.started,
                },
                "totals": {name: metrics.total(metric) for name, metric in _TOTALS.items()},
                "lag": sorted(lag, key=lambda row: row["partition"]),
                "series": self.recent.series(),
            }
        )

    async def feed(self, request: web.Request) -> web.Response:
        """The latest rating changes seen by this worker, newest first."""
        limit = _int_query(request, "limit", 50, maximum=self.recent.feed.maxlen or 0)
        ladder = request.query.get("ladder")
        events = [e for e in reversed(self.recent.feed) if ladder is None or e["ladder"] == ladder]
        return web.json_response({"events": events[:limit]})

    async def distribution(self, request: web.Request) -> web.Response:
        """A histogram of the ladder's display ratings (of its top `DISTRIBUTION_LIMIT`);
        ``bins`` defaults to √players within 5..40."""
        ladder = self._ladder(request)
        scores = [score for _, score in await self.store.leaderboard(ladder.name, DISTRIBUTION_LIMIT)]
        default_bins = min(40, max(5, round(math.sqrt(len(scores)))))
        bins = _int_query(request, "bins", default_bins, maximum=200)
        import numpy as np  # only here: about 0.45 CPU-s that every worker's start paid

        counts, edges = np.histogram(scores, bins=bins) if scores else (np.zeros(0), np.zeros(0))
        return web.json_response(
            {
                "ladder": ladder.name,
                "players": len(scores),
                "truncated": len(scores) >= DISTRIBUTION_LIMIT,
                "edges": [float(e) for e in edges],
                "counts": [int(c) for c in counts],
            }
        )

    def _ladder(self, request: web.Request) -> Ladder:
        try:
            return self.ladders.lookup(request.match_info["ladder"])
        except UnknownLadderError as exc:
            raise web.HTTPNotFound(reason=exc.message) from None


def _int_query(request: web.Request, name: str, default: int, *, maximum: int) -> int:
    """An integer query parameter in 1..maximum (400 otherwise)."""
    raw = request.query.get(name)
    if raw is None:
        return min(default, maximum)
    value = whole_number(raw)
    if not 1 <= value <= maximum:
        raise web.HTTPBadRequest(reason=f"{name} must be an integer from 1 to {maximum}")
    return value


@web.middleware
async def _json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """API errors as ``{"error": reason}`` JSON with the HTTP status."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if not request.path.startswith("/api/") or exc.status < 400:
            raise
        return web.json_response({"error": exc.reason}, status=exc.status)


class WebServer(Service):
    """Serves an aiohttp application inside the worker; marks the worker up while it runs."""

    def __init__(self, application: web.Application, host: str, port: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.application = application
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def on_start(self) -> None:
        """Bind and serve; set ``stream_rater_worker_up`` to 1."""
        self._runner = web.AppRunner(self.application, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        metrics.WORKER_UP.set(1)
        self.log.info("serving http://%s:%s/", self.host, self.port)

    async def on_stop(self) -> None:
        """Set ``stream_rater_worker_up`` to 0 and close the server."""
        metrics.WORKER_UP.set(0)
        if self._runner is not None:
            await self._runner.cleanup()


def register_web(
    app: faust.App,
    store: ReadStore,
    ladders: Ladders,
    settings: Settings,
    health: LadderHealth,
    sensor: BatchMetrics,
) -> None:
    """Make `app` serve this module's endpoints (readiness reports `health`) and measure
    consumer lag; the dashboard shows what `sensor` keeps of the batches (`BatchMetrics.recent`)."""
    recent = sensor.recent
    dashboard = Dashboard(app, store, ladders, settings, recent, health)
    app.web_server(WebServer(dashboard.routes(), settings.web_host, settings.web_port))

    async def sample_throughput() -> None:
        recent.sample()

    async def measure_consumer_lag() -> None:
        try:
            await update_consumer_lag(app, settings.topic_matches, recent.next_offsets)
        # Rebalancing; next tick. AssertionError: aiokafka's "Partition is not assigned" (highwater).
        except (KafkaError, AssertionError, faust.exceptions.ConsumerNotStarted) as exc:
            log.debug("consumer lag not measured: %r", exc)

    async def check_totals() -> None:  # trims idle players off the leaderboards, without scrapes too
        await dashboard.inflation.refresh(home_here(app, settings.topic_matches))

    # Called rather than used as decorators: faust's are untyped, and would untype the functions.
    app.timer(interval=1.0)(sample_throughput)
    app.timer(interval=LAG_INTERVAL)(measure_consumer_lag)
    app.timer(interval=settings.inflation_interval or 60.0)(check_totals)

    @app.on_partitions_assigned.connect
    async def forget_offsets(app: faust.App, /, *assigned: set[TP], **kwargs: Any) -> None:
        # A mode signal handler: faust sends the newly assigned partitions as the one argument.
        for partitions in assigned:
            recent.forget(partitions)
