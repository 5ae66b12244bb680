"""``stream-rater bench rerate``: void a match of the football ladder while a worker rates
more of it, on the embedded runtime — how fast is the re-rate, and how long is the live
ladder blocked at the switch?

The first `before` football matches are published and rated; then the rest are published at
`rate` per second while ``void`` of the first match re-rates the ladder from the matches
topic. Reports the re-rate's matches/s, the time live commits were refused (freeze to switch),
how long the corrected players were then held (until their correction events were sent) and
the corrections sent, then checks the live states with ``verify``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from stream_rater.config.ladders import Ladders, load_ladders
from stream_rater.config.settings import Settings
from stream_rater.corrections.history import apply_correction
from stream_rater.corrections.rerate import Correction, RerateReport
from stream_rater.kafka import publish
from stream_rater.local.demo import (
    DEMO_LADDER,
    DEMO_LADDER_ENV,
    default_data_file,
    follow_until,
    football_events,
    start_worker,
    stop_process,
    wait_ready,
)
from stream_rater.local.runtime import LocalRuntime, free_port
from stream_rater.offline.verify import verdict, verify
from stream_rater.store import open_store


def run(
    before: int = 30_000,
    rate: float = 500.0,
    out: TextIO = sys.stdout,
    history_matches: int = 0,
    back: int = 10_000,
    gap: int = 1_000,
) -> RerateReport | dict[str, Any]:
    """Run the benchmark and print its report; returns the re-rate's report. With
    `history_matches`, the long-history one instead (`bench.rerate_history`): its figures."""
    if history_matches:
        from stream_rater.bench import rerate_history

        return rerate_history.run(history_matches, back, gap, rate, out)
    events = list(football_events(default_data_file(), DEMO_LADDER))
    settings = Settings(partitions=1)
    ladders = load_ladders(None, DEMO_LADDER_ENV)
    with LocalRuntime(topics=settings.topics()) as runtime:
        settings = replace(
            settings, broker=runtime.broker_url, redis_url=runtime.redis_url, web_port=free_port()
        )
        log = (Path(runtime.log_dir or ".") / "worker.log").open("w")
        worker = start_worker(settings, DEMO_LADDER_ENV, log, tied=True)
        try:
            wait_ready(worker, f"http://{settings.web_host}:{settings.web_port}/readyz")
            asyncio.run(publish(events[:before], settings))
            asyncio.run(follow_until(settings, {e["match_id"] for e in events[:before]}, 600))
            print(
                f"{before} football matches rated; publishing {len(events) - before} more at {rate:.0f}/s "
                f"while voiding {events[0]['match_id']!r}",
                file=out,
            )
            more = threading.Thread(target=lambda: asyncio.run(publish(events[before:], settings, rate=rate)))
            more.start()
            report = asyncio.run(_void(settings, ladders, events[0]["match_id"]))
            live = more.is_alive()
            more.join()
            asyncio.run(follow_until(settings, {e["match_id"] for e in events[before:]}, 600))
            checked = asyncio.run(_verify(settings, ladders))
        finally:
            stop_process(worker)
            log.close()
    rate_rerate = report.applied / report.seconds if report.seconds else 0.0
    print(
        f"re-rate: {report.applied} matches in {report.seconds:.2f} s = {rate_rerate:,.0f} matches/s "
        f"(reading the topic included); live ladder blocked {report.blocked_seconds * 1000:.1f} ms at the "
        f"switch ({report.steps_line()}), its corrected players held {report.held_seconds * 1000:.1f} ms while "
        f"{report.corrections} correction events were sent; matches still arriving at the "
        f"switch: {'yes' if live else 'no'} (switched at offset {sum(report.positions.values()):,} of "
        f"{len(events):,})",
        file=out,
    )
    print(
        f"verify after the stream ended (the replay without the voided match): {checked}",
        file=out,
    )
    return report


async def _void(settings: Settings, ladders: Ladders, match_id: str) -> RerateReport:
    store = open_store(settings.redis_url, prefix=settings.redis_prefix)
    try:
        correction = Correction("void", DEMO_LADDER, (match_id,), "bench")
        return await apply_correction(correction, settings, ladders, store)
    finally:
        await store.close()


async def _verify(settings: Settings, ladders: Ladders) -> str:
    store = open_store(settings.redis_url, prefix=settings.redis_prefix)
    try:
        report = await verify(settings, ladders, DEMO_LADDER, store)
        return verdict(report.players, len(report.differences))
    finally:
        await store.close()
