"""The worker's web layer without Kafka: the JSON API on an in-memory store, the probes, the
feed and throughput buffers, the consumer-lag gauge and the metric naming conventions."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import faust
import pytest
import redis.exceptions
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiokafka.errors import KafkaConnectionError
from faust.exceptions import ConsumerNotStarted
from faust.types import TP
from prometheus_client import REGISTRY

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.processor import BatchResult, MatchResult, Processor
from stream_rater.queries import Queries
from stream_rater.service import metrics
from stream_rater.service.batch_metrics import BatchMetrics, Recent
from stream_rater.service.ladder_health import LadderHealth
from stream_rater.service.query_api import OPENAPI, serve_app
from stream_rater.service.web import Dashboard, register_web, update_consumer_lag
from stream_rater.store.memory import MemoryStore
from tests.helpers import parsed_duel

LADDERS = Ladders([Ladder("default", "trueskill"), Ladder("chess", "elo")])
TOPIC = "matches-web"


#: A valid 1-vs-1 match on `LADDERS`: the first player wins.
duel = partial(parsed_duel, LADDERS)


class FakeConsumer:
    """The slice of faust's consumer that the web layer uses."""

    def __init__(
        self,
        positions: dict[TP, int],
        listed: dict[TP, int] | None = None,
        fetched: dict[TP, int] | None = None,
    ) -> None:
        self.positions = positions
        self.listed = listed or {}
        self.fetched = fetched or {}

    def assignment(self) -> set[TP]:
        return set(self.positions)

    def topic_partitions(self, topic: str) -> int | None:
        """The partition count the consumer's metadata gives `topic` (4 for the matches topic)."""
        return 4 if topic == TOPIC else None

    async def highwaters(self, *tps: TP) -> dict[TP, int]:
        return {tp: self.listed[tp] for tp in tps if tp in self.listed}

    def highwater(self, tp: TP) -> int | None:
        return self.fetched.get(tp)

    async def position(self, tp: TP) -> int:
        return self.positions[tp]


class NotStarted:
    def assignment(self) -> set[TP]:
        raise ConsumerNotStarted("not yet")

    def topic_partitions(self, topic: str) -> int | None:
        return None


class DownStore(MemoryStore):
    async def ping(self) -> bool:
        return False


class Broker:
    """faust's producer as readiness uses it: metadata answers unless the broker is `down`."""

    def __init__(self, down: bool = False) -> None:
        self.client = self
        self.down = down

    def _ensure_producer(self) -> Broker:
        return self

    async def fetch_all_metadata(self) -> None:
        if self.down:
            raise KafkaConnectionError("broker frozen")


async def serve(
    consumer: object,
    store: MemoryStore,
    recent: Recent | None = None,
    *,
    broker: Broker | None = None,
    health: LadderHealth | None = None,
    held: dict[TP, str] | None = None,
    stalled: list[str] | None = None,
) -> TestClient:
    dashboard = Dashboard(
        SimpleNamespace(
            consumer=consumer, producer=broker or Broker(), held=held or {}, stalled=lambda: stalled or []
        ),
        store,
        LADDERS,
        Settings(topic_matches=TOPIC, history_limit=50),
        recent or Recent(),
        health or LadderHealth(),
    )
    client = TestClient(TestServer(dashboard.routes()))
    await client.start_server()
    return client


@pytest.fixture
async def rated() -> MemoryStore:
    """A store where ann beat bob twice and cat once (default ladder) and one chess game."""
    store = MemoryStore()
    await Processor(LADDERS, store).process(
        [
            duel("m1", "ann", "bob", at=1_700_000_000.0),
            duel("m2", "ann", "cat", at=1_700_000_100.0),
            duel("m3", "ann", "bob", at=1_700_000_200.0),
            duel("c1", "kim", "lee", ladder="chess"),
        ]
    )
    return store


@pytest.fixture
async def client(rated):
    client = await serve(FakeConsumer({TP(TOPIC, 0): 0, TP(TOPIC, 1): 0, TP("other", 0): 0}), rated)
    yield client
    await client.close()


async def test_leaderboard_lists_players_best_first_with_their_states(client):
    """The leaderboard gives rank, display rating (μ−3σ for TrueSkill), μ, σ and games, best first."""
    body = await (await client.get("/api/ladders/default/leaderboard?top=2")).json()
    assert body["model"] == "trueskill"
    assert [(r["rank"], r["player_id"], r["games"]) for r in body["rows"]] == [(1, "ann", 3), (2, "cat", 1)]
    top = body["rows"][0]
    assert top["rating"] == pytest.approx(top["mu"] - 3 * top["sigma"])


async def test_elo_ladder_rows_have_no_sigma(client):
    """An Elo ladder's rows show the rating as μ and no σ."""
    body = await (await client.get("/api/ladders/chess/leaderboard")).json()
    assert [(r["player_id"], r["sigma"], r["rating"] == r["mu"]) for r in body["rows"]] == [
        ("kim", None, True),
        ("lee", None, True),
    ]


async def test_distribution_counts_every_player_once(client):
    """The rating histogram has `bins` bins whose counts add up to the ladder's players."""
    body = await (await client.get("/api/ladders/default/distribution?bins=4")).json()
    assert (body["players"], sum(body["counts"]), len(body["edges"]), body["truncated"]) == (3, 3, 5, False)
    default = await (await client.get("/api/ladders/default/distribution")).json()
    assert len(default["counts"]) == 5


async def test_player_has_state_and_history_newest_first(client):
    """A player's page data is the current state plus the rating-changed events, newest first."""
    body = await (await client.get("/api/ladders/default/players/ann?limit=2")).json()
    assert body["state"]["games"] == 3
    assert [e["match_id"] for e in body["history"]] == ["m3", "m2"]
    assert body["history"][0]["after"]["mu"] == body["state"]["mu"]


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("/api/ladders/nope/leaderboard", 404, "unknown ladder 'nope'"),
        ("/api/ladders/default/players/zed", 404, "no player 'zed'"),
        ("/api/ladders/default/leaderboard?top=0", 400, "top: must be an integer from 1 to 500"),
        ("/api/feed?limit=many", 400, "limit must be an integer"),
    ],
)
async def test_api_errors_are_json(client, path, status, error):
    """Unknown ladders or players and bad query parameters answer with a JSON error and status."""
    response = await client.get(path)
    assert response.status == status
    assert error in (await response.json())["error"]


async def test_root_serves_the_dashboard_and_its_vendored_assets(client):
    """``/`` is the dashboard page (not faust's index) and every asset it loads is served locally."""
    response = await client.get("/")
    html = await response.text()
    assert response.content_type == "text/html" and "<title>stream_rater</title>" in html
    for asset in (
        "/static/uPlot.iife.min.js",
        "/static/uPlot.min.css",
        "/static/app.js",
        "/static/style.css",
    ):
        assert asset in html
        assert (await client.get(asset)).status == 200, asset
    assert "http" not in html.replace("http-equiv", ""), "no CDN or other remote URL"


async def test_metrics_are_served_in_prometheus_text_format(client):
    """/metrics answers in the Prometheus text format with the service's metrics."""
    response = await client.get("/metrics")
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    assert "stream_rater_matches_consumed_total" in await response.text()


async def test_healthz_answers_while_the_loop_runs(client):
    """/healthz answers 200 with a JSON status."""
    response = await client.get("/healthz")
    assert (response.status, await response.json()) == (200, {"status": "ok"})


async def test_ready_lists_only_the_matches_topic_partitions(client):
    """/readyz is 200 with this worker's partitions of the matches topic when Redis answers."""
    response = await client.get("/readyz")
    assert (response.status, await response.json()) == (200, {"ready": True, "partitions": [0, 1]})


ASSIGNED = FakeConsumer({TP(TOPIC, 0): 0})


async def test_a_held_partition_still_assigned_makes_the_worker_not_ready():
    """A partition held for a batch that cannot be decoded is a 503 with its reason while it is
    assigned here; once the group moved it elsewhere, it is that worker's to report."""
    reason = (
        "matches-web[0]@7: a fetched record batch cannot be decoded (Invalid CRC); that partition is held"
    )
    held = {TP(TOPIC, 0): reason}
    for consumer, status in ((ASSIGNED, 503), (FakeConsumer({TP(TOPIC, 1): 0}), 200)):
        client = await serve(consumer, MemoryStore(), held=held)
        try:
            response = await client.get("/readyz")
            body = await response.json()
        finally:
            await client.close()
        assert response.status == status, body
        assert (reason in body.get("reason", "")) == (status == 503), body


async def test_a_stalled_partition_makes_the_worker_not_ready():
    """A partition with records waiting and none applied for ``stall_after`` (`StallWatch`) is
    a 503 naming it."""
    reason = "partition 0 stalled: records 0 to 9 wait, and none was applied for 60 s (stall_after 60 s)"
    client = await serve(ASSIGNED, MemoryStore(), stalled=[reason])
    try:
        response = await client.get("/readyz")
        body = await response.json()
    finally:
        await client.close()
    assert response.status == 503 and reason in body["reason"], body


@pytest.mark.parametrize(
    ("consumer", "store", "broker", "stopped", "reasons"),
    [
        (NotStarted(), MemoryStore(), Broker(), {}, ["no partition of topic 'matches-web'"]),
        (
            FakeConsumer({TP("other", 0): 0}),
            MemoryStore(),
            Broker(),
            {},
            ["no partition of topic 'matches-web'"],
        ),
        (ASSIGNED, DownStore(), Broker(), {}, ["the store does not answer PING"]),
        (NotStarted(), DownStore(), Broker(), {}, ["no partition", "the store does not answer"]),
        (ASSIGNED, MemoryStore(), Broker(down=True), {}, ["the broker does not answer a metadata request"]),
        (
            ASSIGNED,
            MemoryStore(),
            Broker(),
            {"eu": "ladder 'eu': the store shows 0 matches applied, 9 were"},
            ["not applying: ladder 'eu': the store shows 0"],
        ),
    ],
)
async def test_not_ready_is_503_with_the_reason(consumer, store, broker, stopped, reasons):
    """/readyz is 503 with a JSON reason without assigned partitions, when the store or the
    broker does not answer, or while a ladder is stopped by a lost store."""
    health = LadderHealth()
    health.stopped.update(stopped or {})
    client = await serve(consumer, store, broker=broker, health=health)
    try:
        response = await client.get("/readyz")
        body = await response.json()
    finally:
        await client.close()
    assert response.status == 503 and body["ready"] is False
    assert all(reason in body["reason"] for reason in reasons), body


def gauge(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


async def test_each_scrape_sets_readiness_and_the_partition_gauges(rated):
    """/metrics evaluates readiness as /readyz does (``stream_rater_ready`` 1, then 0 once the
    store stops answering) and exports this worker's partitions of the matches topic and the
    topic's partition count, whose sums across workers show a partition without a consumer."""
    client = await serve(FakeConsumer({TP(TOPIC, 0): 0, TP(TOPIC, 2): 0, TP("other", 0): 0}), rated)
    try:
        await client.get("/metrics")
        assert gauge("stream_rater_ready") == 1
        assert gauge("stream_rater_partitions_assigned", topic=TOPIC) == 2
        assert gauge("stream_rater_topic_partitions", topic=TOPIC) == 4
    finally:
        await client.close()
    client = await serve(NotStarted(), DownStore())
    try:
        text = await (await client.get("/metrics")).text()
        assert "stream_rater_ready 0.0" in text
        assert gauge("stream_rater_partitions_assigned", topic=TOPIC) == 0
        metrics.READY.set(1)
        assert (await client.get("/readyz")).status == 503 and gauge("stream_rater_ready") == 0
    finally:
        await client.close()


async def test_not_ready_while_the_store_refuses_writes_and_ready_once_it_accepts_them():
    """Redis answering PING but refusing writes (OOM here) makes /readyz 503 naming the
    refusal and how long it has lasted; once a commit succeeds (`lift`) it is 200 again."""
    now = [100.0]
    health = LadderHealth(clock=lambda: now[0])
    refusal = health.refusal
    client = await serve(ASSIGNED, MemoryStore(), health=health)
    try:
        refusal.note(redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."))
        now[0] = 112.0
        response = await client.get("/readyz")
        assert (response.status, await response.json()) == (
            503,
            {
                "ready": False,
                "reason": "the store refuses writes: OOM command not allowed when used memory > 'maxmemory'. "
                "(for 12 s)",
            },
        )
        refusal.lift()
        assert (await client.get("/readyz")).status == 200
    finally:
        await client.close()


async def test_feed_keeps_new_changes_newest_first_and_skips_duplicates(rated):
    """The feed holds the rating changes of newly applied matches (not re-emitted duplicates), newest first, filterable by ladder."""
    recent = Recent(feed_size=3)
    [first, second] = [duel("f1", "ann", "bob"), duel("f2", "cat", "dan", ladder="chess")]
    events = [
        {"ladder": m.ladder, "player_id": p, "match_id": m.match_id} for m in (first, second) for p in "xy"
    ]
    recent.record(
        [],
        BatchResult(
            [
                MatchResult(first, events[:2], duplicate=False),
                MatchResult(
                    duel("old", "a", "b"), [{"ladder": "default", "match_id": "old"}], duplicate=True
                ),
                MatchResult(second, events[2:], duplicate=False),
            ]
        ),
    )
    client = await serve(NotStarted(), rated, recent)
    try:
        everything = await (await client.get("/api/feed")).json()
        chess = await (await client.get("/api/feed?ladder=chess&limit=1")).json()
    finally:
        await client.close()
    assert [(e["match_id"], e["player_id"]) for e in everything["events"]] == [
        ("f2", "y"),
        ("f2", "x"),
        ("f1", "y"),
    ]
    assert [(e["match_id"], e["player_id"]) for e in chess["events"]] == [("f2", "y")]


def test_samples_are_per_second_rates_of_the_counters():
    """Each sample is the counters' increase per second since the previous one, with the mean batch latency."""
    recent = Recent()
    recent.sample(now=100.0)
    metrics.MATCHES_CONSUMED.inc(30)
    metrics.MATCHES_APPLIED.labels("default").inc(20)
    metrics.PROCESSING_LATENCY.observe(0.1)
    metrics.PROCESSING_LATENCY.observe(0.3)
    recent.sample(now=102.0)
    recent.sample(now=103.0)
    series = recent.series()
    assert series["t"] == [102.0, 103.0]
    assert series["consumed"] == [15.0, 0.0] and series["applied"] == [10.0, 0.0]
    assert series["latency"][0] == pytest.approx(0.2) and series["latency"][1] is None


async def test_assigned_partitions_lose_their_offsets_when_faust_signals_them():
    """register_web's handler of faust's on_partitions_assigned signal forgets exactly the
    partitions it is sent (their progress may be stale)."""
    app = faust.App("t-web-signal", broker="memory://")
    sensor = BatchMetrics(LADDERS)
    register_web(app, MemoryStore(), LADDERS, Settings(), LadderHealth(), sensor)
    recent = sensor.recent
    recent.next_offsets.update({(TOPIC, 0): 5, (TOPIC, 1): 7})
    await app.on_partitions_assigned.send({TP(TOPIC, 0)})
    assert recent.next_offsets == {(TOPIC, 1): 7}


async def test_consumer_lag_takes_the_larger_end_offset_clamps_and_drops_revoked_partitions():
    """Lag is max(listed end, fetch highwater) − position per assigned partition, never negative, and revoked partitions lose their series."""
    p0, p1, p2 = TP(TOPIC, 0), TP(TOPIC, 1), TP(TOPIC, 2)
    app = SimpleNamespace(
        consumer=FakeConsumer(
            positions={p0: 10, p1: 50, p2: 7, TP("other", 0): 0},
            listed={p0: 1, p1: 40, TP("other", 0): 99},  # a broker answering too low (Tansu) on p0
            fetched={p0: 25},
        )
    )
    await update_consumer_lag(app, TOPIC, {})
    assert lag_series() == {"0": 15.0, "1": 0.0}  # p2 has no known end offset yet
    app.consumer = FakeConsumer(positions={p1: 50}, listed={p1: 53})
    await update_consumer_lag(app, TOPIC, {})
    assert lag_series() == {"1": 3.0}


async def test_consumer_lag_counts_fetched_but_unprocessed_events():
    """Once a batch of a partition is done, lag is measured from the next offset to process, not the fetch position."""
    recent = Recent()
    batch = [SimpleNamespace(topic=TOPIC, partition=0, offset=o) for o in (4, 5, 3)]
    recent.record(batch, BatchResult())
    assert recent.next_offsets == {(TOPIC, 0): 6}
    app = SimpleNamespace(consumer=FakeConsumer(positions={TP(TOPIC, 0): 90}, listed={TP(TOPIC, 0): 100}))
    await update_consumer_lag(app, TOPIC, recent.next_offsets)
    assert lag_series() == {"0": 94.0}
    recent.forget([TP(TOPIC, 0)])  # reassigned: the old progress may be stale
    await update_consumer_lag(app, TOPIC, recent.next_offsets)
    assert lag_series() == {"0": 10.0}


def lag_series() -> dict[str, float]:
    return {
        s.labels["partition"]: s.value
        for family in metrics.CONSUMER_LAG.collect()
        for s in family.samples
        if s.labels["topic"] == TOPIC
    }


def test_metrics_follow_the_naming_conventions():
    """Service metrics are counters named ``*_total``, histograms in seconds (or sizes), and no label can hold a player id."""
    allowed_labels = {
        "ladder",
        "reason",
        "error",
        "operation",
        "topic",
        "partition",
        "generation",
        "outcome",
        "scorer",  # the prediction-quality counters: live, or a shadow model's name
        "bin",  # their calibration bin
        "le",
    }
    families = [f for f in REGISTRY.collect() if f.name.startswith("stream_rater_")]
    assert len(families) >= 14
    for family in families:
        names = {s.name for s in family.samples}
        if family.type == "counter":
            assert f"{family.name}_total" in names or not names
        if family.type == "histogram":
            assert family.name.endswith("_seconds") or family.name == "stream_rater_batch_size"
        assert {label for s in family.samples for label in s.labels} <= allowed_labels, family.name


def served_operations(application: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route of an aiohttp application, HEAD (aiohttp's twin of each
    GET) aside."""
    return {
        (route.method.lower(), route.resource.canonical)
        for route in application.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }


def test_every_served_endpoint_is_in_openapi():
    """The routes a worker and `serve` register are the operations of openapi.yaml, the
    dashboard's page and static files aside; those tagged `worker` are exactly the ones `serve`
    lacks."""
    spec = yaml.safe_load(OPENAPI.read_text())
    documented = {(m, p) for p, operations in spec["paths"].items() for m in operations}
    worker_only = {
        (m, p)
        for p, operations in spec["paths"].items()
        for m, o in operations.items()
        if "worker" in o.get("tags", [])
    }
    store = MemoryStore()
    dashboard = Dashboard(
        SimpleNamespace(consumer=NotStarted(), producer=Broker(), held={}, stalled=list),
        store,
        LADDERS,
        Settings(),
        Recent(),
        LadderHealth(),
    )
    worker = served_operations(dashboard.routes()) - {("get", "/"), ("get", "/static")}
    served = served_operations(serve_app(Queries(store, LADDERS), store))
    assert worker | served == documented, sorted((worker | served) ^ documented)
    assert worker - served == worker_only, sorted((worker - served) ^ worker_only)
