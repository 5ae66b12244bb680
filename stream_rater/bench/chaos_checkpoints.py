"""The checkpoints of ``stream-rater bench chaos``: ``stream-rater checkpoint --loop`` runs for
the whole run beside the workers (its own TCP proxy to Redis), so every broker and Redis fault
of the schedule lands while checkpoints are replayed, verified and produced; the faults aimed at
it (`CHECKPOINT_FAULTS`): killed and started again, frozen, cut off from Redis, and a one-shot
``checkpoint --force`` killed in the middle of its write (its chunks produced, its manifest not:
a torn checkpoint, whose id the oracle must never see used).

The ``checkpoints`` oracle (`judge_checkpoints`) then asks, per ladder, that the newest usable
checkpoint (a) gives ``verify`` from it equal to the live states, (b) recovered into an empty
store and replayed to the end equals them too (the live states equal a full replay: the
``states`` oracle), and (c) is none of the torn ones.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from stream_rater.checkpoints import KafkaSink
from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.local.nemesis import TcpProxy, signal_process
from stream_rater.local.processes import popen_tied, run_tied
from stream_rater.offline.recovery import recover
from stream_rater.offline.verify import verify
from stream_rater.store import PlayerState, StateStore, open_store
from stream_rater.waiting import wait_until

#: A checkpoint per ladder every this many of its matches, and a round every this many seconds.
EVERY_MATCHES = 1500
INTERVAL = 1.0
#: Seconds between two starts of a checkpoint loop that keeps exiting.
REVIVE_BACKOFF = 5.0
#: Times a torn write is tried (a broker or Redis fault may keep it from writing), and the
#: seconds between tries.
TEAR_TRIES = 6
TEAR_RETRY_DELAY = 5.0

#: ``python -c`` of a ``checkpoint`` command killed (SIGKILL) right after its chunks were
#: produced, before its manifest: what a kill in the middle of a write leaves.
TORN_WRITE = """
import os, signal, sys
from stream_rater.checkpoints.sink import KeyedSink
from stream_rater.cli import main
original = KeyedSink.write_chunks
async def then_die(self, checkpoint, chunks):
    await original(self, checkpoint, chunks)
    print("torn:", checkpoint.ladder, checkpoint.id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
KeyedSink.write_chunks = then_die
sys.exit(main(sys.argv[1:]))
"""


class CheckpointLoop:
    """The ``checkpoint --loop`` process, through its own proxy to Redis; `torn` lists the
    ``ladder id`` of each checkpoint a torn write left."""

    def __init__(self, settings: Settings, env: Mapping[str, str], redis_port: int, logs: Path) -> None:
        self.settings, self.env, self.logs = settings, dict(env), logs
        self.proxy = TcpProxy(redis_port)
        self.process: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.wanted = False
        self.torn: list[str] = []

    def argv(self, *extra: str, store: str | None = None) -> list[str]:
        """The ``checkpoint`` command's arguments after the program."""
        s = self.settings
        return [
            "checkpoint",
            *("--broker", s.broker, "--store", store or self.proxy.url),
            *("--topic-matches", s.topic_matches, "--topic-checkpoints", s.topic_checkpoints),
            *("--checkpoint-every-matches", str(EVERY_MATCHES)),
            *extra,
        ]

    def start(self) -> None:
        with (self.logs / "checkpointer.log").open("a") as log:
            self.process = popen_tied(
                [sys.executable, "-m", "stream_rater", *self.argv("--loop", "--interval", str(INTERVAL))],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.started, self.wanted = time.monotonic(), True

    def signal(self, sig: int) -> None:
        if self.process is not None:
            signal_process(self.process, sig)
            if sig == signal.SIGKILL:
                self.wanted = False
                self.process.wait()

    def revive(self) -> list[str]:
        """Start the loop again if it exited while wanted up (a supervisor's job)."""
        process = self.process
        if not self.wanted or process is None or process.poll() is None:
            return []
        if time.monotonic() - self.started < REVIVE_BACKOFF:
            return []
        self.start()
        return [f"checkpoint loop exited with code {process.returncode}; started again"]

    def tear(self, ladder: str, store_url: str) -> str:
        """A ``checkpoint --force`` of `ladder` killed between its chunks and its manifest;
        tried again (up to `TEAR_TRIES` times) while a fault keeps it from getting there."""
        argv = [sys.executable, "-c", TORN_WRITE, *self.argv("--force", "--ladder", ladder, store=store_url)]
        outcome = ""
        for attempt in range(TEAR_TRIES):
            time.sleep(TEAR_RETRY_DELAY if attempt else 0.0)
            done = run_tied(argv, 180, env=self.env)
            lines = [line for line in done.stdout.splitlines() if line.startswith("torn:")]
            if done.returncode == -signal.SIGKILL and lines:
                self.torn.append(lines[0].removeprefix("torn: "))
                return f"torn {lines[0].split()[-1]}"
            last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1]
            outcome = f"not torn (exit {done.returncode}): {last}"
        return outcome

    def close(self) -> None:
        self.wanted = False
        if self.process is not None:
            signal_process(self.process, signal.SIGCONT)
            signal_process(self.process, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.proxy.close()

    def written(self) -> int:
        """Checkpoints the loop reported written (its log)."""
        path = self.logs / "checkpointer.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return sum(1 for line in text.splitlines() if "written" in line and "not written" not in line)


def wait_caught_up(settings: Settings, names: Sequence[str], timeout: float) -> None:
    """Wait until no ladder's checkpoints are stale (`stale_ladders`). The quiet does before it
    judges: the ``checkpoints`` oracle asks the steady state, not the window right after a
    correction from the topic's start, before the loop's next round."""
    wait_until(
        lambda: not asyncio.run(stale_ladders(settings, names)),
        "the checkpoint loop caught up with the corrections",
        timeout,
        interval=1.0,
    )


async def stale_ladders(settings: Settings, names: Sequence[str]) -> list[str]:
    """The ladders whose newest checkpoint has other voids or parameters than the live ones
    (or none, with voids or parameters): a correction passed them and the loop has not written
    since (`Checkpointer.stale`)."""
    stale = []
    store = open_store(settings.redis_url)
    try:
        async with KafkaSink(settings) as sink:
            for name in names:
                manifests = await sink.manifests(name)
                voids, params = (
                    set(await store.voids(name)),
                    dict((await store.generations(name)).params or {}),
                )
                kept = (set(manifests[-1].voids), dict(manifests[-1].params or {})) if manifests else None
                if kept != (voids, params) and (kept is not None or voids or params):
                    stale.append(name)
    finally:
        await store.close()
    return stale


async def judge_checkpoints(
    settings: Settings,
    ladders: Ladders,
    names: Sequence[str],
    store: StateStore,
    torn: Sequence[str],
    wait: float,
) -> tuple[bool, str]:
    """The ``checkpoints`` oracle of the module docstring: whether it passed, and its detail
    (`wait`: `verify`'s)."""
    failures, used = [], []
    async with KafkaSink(settings) as sink:
        for name in names:
            ids = {m.id for m in await sink.manifests(name)}
            listed = [t for t in torn if t.split()[0] == name and t.split()[-1] in ids]
            if listed:
                failures.append(f"ladder {name!r}: torn checkpoint(s) {listed} listed")
            report = await verify(settings, ladders, name, store, wait=wait, sink=sink)
            if report.differences or not report.caught_up:
                failures.append(f"ladder {name!r}: verify from {report.checkpoint}: {report.lines()[:2]}")
            line = f"{name}: {len(ids)} kept, verify from {report.checkpoint or 'the start'}"
            scratch = open_store("memory")
            _, _, start, _ = await recover(settings, ladders, name, scratch, sink)
            differ = _differences(await store.players(name), await scratch.players(name))
            if differ:
                failures.append(
                    f"ladder {name!r}: recovery from {start.id if start else 'the start'}: {differ}"
                )
            used.append(f"{line}, recovery from {start.id if start else 'the start'}")
    if failures:
        return False, "; ".join(failures[:5])
    return True, f"{len(torn)} torn writes never listed; " + "; ".join(used)


def _differences(live: Mapping[str, PlayerState], recovered: Mapping[str, PlayerState]) -> str:
    """The players whose states differ (beyond 1e-9), a few named; '' if none."""
    wrong = sorted(
        p
        for p in live.keys() | recovered.keys()
        if p not in live
        or p not in recovered
        or abs(live[p].mu - recovered[p].mu) > 1e-9
        or abs((live[p].sigma or 0.0) - (recovered[p].sigma or 0.0)) > 1e-9
        or live[p].games != recovered[p].games
    )
    return f"{len(wrong)} players differ ({', '.join(wrong[:5])})" if wrong else ""


def tagged(settings: Settings, tag: str) -> Settings:
    """`settings` with a checkpoints topic of the run's own."""
    return replace(settings, topic_checkpoints=f"checkpoints-{tag}")
