"""The faust-streaming application: topics, the rating agent, and the worker entry point.

One agent, concurrency 1 (faust's ``concurrency>1`` can lose messages on a crash), rates
``matches`` (a task beside it carries out the correction requests of ``rating-corrections``,
`service.corrections`). Its records reach it a fetched batch at a time through a
`faust_transport.BatchBuffer` rather than as per-message stream events; it takes batches of
up to ``batch_size`` — at once when nothing is being committed, so a lone match on an idle
worker goes on without waiting for company, and otherwise as many as arrived while the batch
before was committed — and hands them to a `BatchPipeline`, which overlaps consecutive batches
and acknowledges each only after its Redis commit and its rating-changed events are durable.
On SIGTERM the batches in hand are finished before the agent stops; a stop that takes longer
than ``stop_timeout`` ends the process anyway (`StopWatch`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import faust
from faust.types import TP

from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import ENV_PREFIX, Settings
from stream_rater.kafka import (
    Record,
    client_options,
    committed_offsets,
    create_service_topics,
    group_options,
    read_partition,
    send_batched,
)
from stream_rater.processor import Processor
from stream_rater.service import faust_lifecycle
from stream_rater.service.auto_rebuild import AutoRebuild, TopicRebuild
from stream_rater.service.batch_handler import BatchHandler, Retrying, Topics
from stream_rater.service.batch_metrics import BatchMetrics
from stream_rater.service.corrections import CorrectionHandler
from stream_rater.service.faust_transport import App, BatchBuffer, aiokafka_producer
from stream_rater.service.gc_tuning import settle_gc
from stream_rater.service.ladder_health import LadderHealth
from stream_rater.service.pipeline import BatchPipeline
from stream_rater.service.stall_watch import StallWatch
from stream_rater.service.store_loss import LossGuard
from stream_rater.service.timed_store import TimedStore
from stream_rater.service.wait_dump import consumer_lines, dump, task_line
from stream_rater.service.web import register_web
from stream_rater.store import ReadStore, RedisTimeouts, StateStore, open_store
from stream_rater.store.deployment import EARLIEST_FORMAT, STORE_FORMAT, bind

log = logging.getLogger(__name__)


def broker_credentials(settings: Settings) -> Any:
    """faust credentials for the configured Kafka security settings (None = plaintext): the
    same mapping as the plain clients' `kafka.client_options`, in faust's types."""
    options = client_options(settings)
    context = options.get("ssl_context")
    if options["security_protocol"].startswith("SASL"):
        return faust.SASLCredentials(
            username=options["sasl_plain_username"],
            password=options["sasl_plain_password"],
            mechanism=options["sasl_mechanism"],
            ssl_context=context,
        )
    return None if context is None else faust.SSLCredentials(context)


def create_app(
    settings: Settings, ladders: Ladders, store: StateStore | None = None, suspect_empty: bool = False
) -> faust.App:
    """A configured worker app. `store` defaults to the Redis at ``settings.redis_url``;
    `suspect_empty` see `Processor` and `store_looks_lost`."""
    app = _faust_app(settings)
    batches = app.batch_buffers[settings.topic_matches] = BatchBuffer(
        app, maxsize=max(4096, settings.batch_size * 4), topic=settings.topic_matches
    )
    timed = TimedStore(store or open_worker_store(settings))
    stopping = asyncio.Event()

    async def send(records: list[Record]) -> None:
        # faust's own producer (it is started, flushed and stopped with the app), fed whole
        # batches: faust's Producer only offers per-record sends.
        await send_batched(aiokafka_producer(app), records)

    health = ladder_health(settings, ladders)
    sensor = BatchMetrics(ladders)
    register_web(app, timed, ladders, settings, health, sensor)
    guard = loss_guard(settings, ladders, timed, health)
    handler = BatchHandler(
        Processor(ladders, timed, suspect_empty=suspect_empty, known_states=settings.known_states),
        send,
        topics=Topics(updates=settings.topic_updates, dlq=settings.topic_dlq),
        limits=settings.limits(),
        retrying=Retrying(stopping=stopping.is_set),
        health=health,
        sensor=sensor,
        guard=guard,
    )

    @app.on_partitions_assigned.connect
    async def check_for_lost_store(app: faust.App, /, *assigned: set[TP], **kwargs: Any) -> None:
        # A mode signal handler: faust sends the newly assigned partitions as the one argument.
        for partitions in assigned:
            guard.assigned(tp.partition for tp in partitions if tp.topic == settings.topic_matches)

    # A lost ladder parks its partition's records; a rebalance drops them (BatchPipeline).
    stall = _stall_timer(app, settings, lambda: set(pipeline.parked))
    pipeline = BatchPipeline(
        handler,
        ack=stall.acking(batches.ack),
        pause=batches.pause,
        resume=batches.resume,
        release=batches.release,
    )
    batches.on_clear.append(pipeline.abandon)
    app.in_flight += [pipeline.in_flight, batches.in_flight, guard.in_flight]  # what SIGUSR1 logs
    app.in_flight.append(lambda: consumer_lines(app, settings.topic_matches))
    _rating_agent(app, settings, batches, pipeline, stopping)
    _correction_task(
        app,
        CorrectionHandler(settings, ladders, send, lambda: open_worker_store(settings)),
        stopping,
        health.rebuilder,
    )
    return app


def _faust_app(settings: Settings) -> App:
    """The faust app of a worker: its consumer group, broker, serializers, timeouts and web server."""
    app = App(
        settings.consumer_group,
        broker=settings.broker,
        broker_credentials=broker_credentials(settings),
        env_prefix=ENV_PREFIX,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.partitions,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=group_options(settings)["heartbeat_interval_ms"] / 1000,
        broker_commit_interval=1.0,
        producer_acks=-1,  # all in-sync replicas, as `kafka.PRODUCER_ACKS`
        producer_linger=0.0,  # `kafka.send_batched` hands over whole batches: lingering only adds latency
        producer_max_batch_size=256 * 1024,
        web_enabled=True,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_router_enabled=False,
        web_tables_enabled=False,
        TableManager=faust_lifecycle.TableManager,
        loghandlers=[],
        datadir=os.path.join(tempfile.gettempdir(), f"stream-rater-{settings.consumer_group}"),
    )
    app.fetch_max_wait = settings.fetch_max_wait
    app.switch_interval = settings.switch_interval
    return app


def _stall_timer(app: App, settings: Settings, parked: Callable[[], set[int]]) -> StallWatch:
    """The worker's `StallWatch`, checked every few seconds: each newly stalled partition is
    logged as a warning with what the worker waits on (`wait_dump`). Partitions `parked` (a
    lost ladder) or held (undecodable) are left out: readiness says why already."""
    stall = StallWatch(settings.stall_after)

    async def watch_stalls() -> None:
        consumer = app.consumer
        committed = getattr(consumer, "_committed_offset", {})  # faust's: what it committed last
        held = parked() | {tp.partition for tp in app.held}
        try:
            assigned = {
                tp.partition: (committed.get(tp), consumer.highwater(tp))
                for tp in consumer.assignment()
                if tp.topic == settings.topic_matches and tp.partition not in held
            }
        except (AssertionError, faust.exceptions.ConsumerNotStarted):  # aiokafka's "Partition is not
            return  # assigned": a rebalance in the consumer's thread moved the assignment; next tick
        newly = stall.check(assigned)
        if newly:
            log.warning("%s; what the worker waits on follows", "; ".join(stall.stalled[p] for p in newly))
            dump(worker_loops(app), app.in_flight)

    app.stalled = stall.reasons
    if settings.stall_after > 0:
        app.timer(interval=min(5.0, settings.stall_after / 2))(watch_stalls)
    return stall


def worker_loops(app: faust.App) -> list[tuple[str, asyncio.AbstractEventLoop]]:
    """The worker's event loop (running) and its consumer thread's, named, for `wait_dump`."""
    loops = [("worker", asyncio.get_running_loop())]
    thread_loop = getattr(getattr(app.consumer, "_thread", None), "thread_loop", None)
    if thread_loop is not None:
        loops.append(("consumer-thread", thread_loop))
    return loops


def _rating_agent(
    app: App, settings: Settings, batches: BatchBuffer, pipeline: BatchPipeline, stopping: asyncio.Event
) -> None:
    """Register the agent that rates `matches`: faust subscribes the topic for it and runs it,
    but the records arrive a fetched batch at a time through `batches`, not as the stream's
    per-message events. `BatchPipeline` overlaps batches: the next one is taken while this one
    commits. On cancellation (SIGTERM) the batches in hand are finished before the agent stops
    (parked ones are left unacknowledged)."""
    matches = app.topic(settings.topic_matches, partitions=settings.partitions)

    @app.agent(matches, concurrency=1)
    async def rate(stream: faust.StreamT[Any]) -> None:
        try:
            while True:
                messages = await batches.take(
                    settings.batch_size, settings.batch_seconds, pipeline.committed()
                )
                if messages:
                    await pipeline.submit(messages)
        except asyncio.CancelledError:
            stopping.set()
            await pipeline.stop()
            raise


def _correction_task(
    app: App, corrections: CorrectionHandler, stopping: asyncio.Event, rebuilder: AutoRebuild | None
) -> None:
    """Register the task that carries out correction requests (its own consumer group, not an
    agent: see service/corrections.py), and the shutdown hook that cancels it and the
    automatic rebuilder."""
    carrying_out: set[asyncio.Task[Any]] = set()

    async def carry_out_corrections() -> None:
        carrying_out.add(cast(asyncio.Task[Any], asyncio.current_task()))
        await corrections.consume()

    app.task(carry_out_corrections)

    @app.on_before_shutdown.connect  # type: ignore[arg-type]  # mode's handler type fits no function
    async def _flag_stopping(app: faust.App, *args: Any, **kwargs: Any) -> None:
        # faust stops its producer before it cancels the app's tasks; a correction still
        # running then could not send its events, so it is cancelled here. Its request's
        # offset is not committed: the next owner of the corrections topic carries it out.
        stopping.set()
        bound = min(CORRECTIONS_STOP_SECONDS, CORRECTIONS_STOP_SHARE * corrections.settings.stop_timeout)
        await cancel_within(carrying_out, bound, "the correction task")
        if rebuilder is not None:
            await rebuilder.stop()


#: How long the stop waits for the cancelled correction task to end. Its consumer's stop
#: (leave the group, close the fetcher and the connections) takes milliseconds, but aiokafka
#: waits for each connection's ``connection_lost``, which for TLS comes once the close_notify
#: exchange ends, or after uvloop's fixed 30 s ``ssl_shutdown_timeout`` when the broker does
#: not answer it: the whole ``stop_timeout``. The group is left by then; the rest is cleanup
#: the process's exit does. At most `CORRECTIONS_STOP_SHARE` of ``stop_timeout``, which the
#: rest of the stop needs too (a consumer still joining its group at the stop held it 4 s).
CORRECTIONS_STOP_SECONDS, CORRECTIONS_STOP_SHARE = 5.0, 0.2


async def cancel_within(tasks: Iterable[asyncio.Task[Any]], seconds: float, what: str) -> None:
    """Cancel `tasks` and wait at most `seconds` for them to end. One still running then is
    left behind (the stop goes on; its end closes the event loop) with a warning that names
    `what` and the await it is stuck in (`wait_dump.task_line`)."""
    running = [task for task in tasks if not task.done()]
    if not running:
        return
    log.info("stopping %s", what)
    for task in running:
        task.cancel()
    _, stuck = await asyncio.wait(running, timeout=seconds)
    for task in stuck:
        log.warning(
            "%s has not ended %.1f s after it was cancelled; the stop goes on without it (%s)",
            what,
            seconds,
            task_line(task, "waits in"),
        )


def ladder_health(settings: Settings, ladders: Ladders) -> LadderHealth:
    """The worker's `LadderHealth`: with ``on_store_loss = rebuild``, each lost ladder it is told
    of is rebuilt from the topic by the worker (`AutoRebuild`, `TopicRebuild`)."""
    if settings.on_store_loss != "rebuild":
        return LadderHealth(settings)
    return LadderHealth(settings, TopicRebuild(settings, ladders, lambda: open_worker_store(settings)))


def loss_guard(settings: Settings, ladders: Ladders, store: ReadStore, health: LadderHealth) -> LossGuard:
    """The handler's `LossGuard`: a lost store noticed at assignment, lost ladders held, each
    reported to `health`."""
    return LossGuard(
        store,
        ladders,
        lambda partitions: committed_offsets(settings, settings.topic_matches, partitions),
        lambda partition, start, end: read_partition(settings, settings.topic_matches, partition, start, end),
        health=health,
        limits=settings.limits(),
    )


def open_worker_store(settings: Settings) -> StateStore:
    """The store at `settings.redis_url` as the worker's settings configure it."""
    return open_store(
        settings.redis_url,
        history_limit=settings.redis_history(),
        marker_ttl=settings.marker_ttl,
        timeouts=RedisTimeouts.of(settings),
        prefix=settings.redis_prefix,
        known_boards=settings.known_states,
    )


async def store_looks_lost(settings: Settings, ladders: Iterable[str]) -> bool:
    """True when the store holds no ladder although the consumer group has committed offsets
    of the matches topic: what was applied is gone (a Redis restarted without persistence,
    FLUSHDB). The worker then applies no ladder until it is rebuilt from the topic.

    First the store and the worker's `ladders` are bound to the matches topic
    (`store.deployment.bind`): a ladder of another topic or a store of a newer stored format
    raises `StoreRefused`, and the worker does not start. A store with neither a ladder nor a
    deployment record, whose consumer group has committed no offsets, is new: it is recorded
    in this release's stored format; any other store without a record, in format 2, which the
    release before reads too (`store.deployment`)."""
    store = open_worker_store(settings)
    try:
        empty = not await store.ladders()
        partitions = range(settings.partitions)
        committed = await committed_offsets(settings, settings.topic_matches, partitions) if empty else {}
        lost = any(committed.values())
        await bind(
            store,
            settings.topic_matches,
            list(ladders),
            new=STORE_FORMAT if empty and not lost else EARLIEST_FORMAT,
        )
    finally:
        await store.close()
    if lost:
        log.error(
            "the store at %s holds no ladder, but consumer group %r has committed offsets %s of %r: "
            "its data was lost; no ladder is applied until rebuilt with "
            "`stream-rater replay --from-topic --ladder L --store URL`",
            settings.redis_url,
            settings.consumer_group,
            committed,
            settings.topic_matches,
        )
        return True
    return False


#: Exit code of a worker that did not stop within its ``stop_timeout``: sysexits' EX_TEMPFAIL
#: (a temporary failure; start it again), unlike 1 for a crash.
EXIT_STOP_TIMEOUT = 75


#: The loggers whose latest line a stop that takes too long reports (`Worker.waiting_for`):
#: faust's and mode's steps, aiokafka's (a consumer leaving its group) and the service's own.
STEP_LOGGERS = ("faust", "mode", "aiokafka", "stream_rater")


class LastLine(logging.Handler):
    """Remembers the latest message logged (faust and mode log each step of a stop, aiokafka
    and the service some of theirs)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.line = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.line = record.getMessage()


class StopWatch:
    """Ends the process if a stop takes too long.

    `arm` (once; later calls do nothing) starts a daemon thread that, unless the process has
    exited by then, logs what the stop was still waiting for (`waiting_for()`) and exits with
    `EXIT_STOP_TIMEOUT` at once, `timeout` seconds less a small margin after the stop began.
    Forcing the exit is safe: offsets are committed only after the Redis commit, so whatever
    was not committed is redelivered, and redelivered matches are applied once.
    """

    def __init__(
        self,
        timeout: float,
        waiting_for: Callable[[], str],
        exit: Callable[[int], object] = os._exit,
    ) -> None:
        self.timeout = timeout
        self.waiting_for = waiting_for
        self._exit = exit
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def deadline(self) -> float:
        """Seconds after `arm` at which the process is ended: `timeout` less 10 % (at most 1 s),
        so that it is gone before a supervisor waiting `timeout` seconds kills it."""
        return max(0.0, self.timeout - min(1.0, self.timeout / 10))

    def arm(self) -> None:
        """Start the watch (a stop began)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="stop-watch", daemon=True)
                self._thread.start()

    def _watch(self) -> None:
        time.sleep(self.deadline)
        log.critical(
            "not stopped %.1f s after the stop began (stop_timeout %.1f s); still waiting for %s; "
            "exiting with code %d: what was not committed is redelivered",
            self.deadline,
            self.timeout,
            self.waiting_for(),
            EXIT_STOP_TIMEOUT,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        self._exit(EXIT_STOP_TIMEOUT)


class Worker(faust_lifecycle.Worker):
    """faust's worker (`faust_lifecycle.Worker`); when it begins to stop (SIGTERM, SIGINT, or
    the app ending) the `StopWatch` is armed, and the steps logged from then on
    (`STEP_LOGGERS`) are remembered."""

    def __init__(self, app: faust.App, stop_timeout: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.last_step = LastLine()
        self.stop_watch = StopWatch(stop_timeout, self.waiting_for)

    async def stop(self) -> None:
        """Arm the stop watch, then faust's stop."""
        for name in STEP_LOGGERS:
            logging.getLogger(name).addHandler(self.last_step)
        self.stop_watch.arm()
        await super().stop()

    def on_sigusr1(self) -> None:
        """SIGUSR1: log what the worker waits on (`wait_dump`) instead of mode's dump of
        every frame's locals."""
        app = cast(App, self.app)
        dump(worker_loops(app), app.in_flight)

    def waiting_for(self) -> str:
        """What the stop is at: the last step logged and the records taken but not acknowledged."""
        step = repr(self.last_step.line) if self.last_step.line else "(nothing logged)"
        try:
            unacked = len(self.app.consumer.unacked)
        except Exception:  # read from the watch's thread, as the process ends: best effort
            unacked = -1
        held = f"{unacked} records taken and not acknowledged" if unacked >= 0 else "unknown records"
        return f"the last step logged {step}, {held}"


def use_uvloop() -> None:
    """Make every event loop the process creates from now on uvloop's (libuv: its transports
    and scheduling in C), the worker's and its Kafka consumer thread's alike; asyncio's stays
    where uvloop is not installed (Windows)."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run_worker(settings: Settings, ladders: Ladders) -> None:
    """Create missing topics, then run a worker in the foreground until SIGTERM/SIGINT
    (faust handles the signals; `Worker` bounds the stop by ``stop_timeout``). faust itself
    only creates its internal topics, and a broker that auto-creates the input topic would
    pick its own partition count."""
    use_uvloop()
    asyncio.run(create_service_topics(settings))
    suspect_empty = asyncio.run(store_looks_lost(settings, ladders))
    app = create_app(settings, ladders, suspect_empty=suspect_empty)
    settle_gc()
    worker = Worker(app, settings.stop_timeout, loglevel=settings.log_level.upper(), quiet=True)
    worker.execute_from_commandline()
