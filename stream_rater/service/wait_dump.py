"""What a worker is waiting on, logged on SIGUSR1 (`Worker`): one line per asyncio task (its
stack, innermost frame last) on the worker's event loop and on the consumer thread's, then one
line per item in flight — the batches the pipeline holds and where each is, parked partitions,
the lost-store checks, the records buffered and taken, and the consumer's view of each
assigned partition (paused, positions, offsets acknowledged and committed).

For an operator whose worker applies nothing although it holds partitions with records: the
dump says which future or partition it waits on. Everything here only reads state, from the
signal handler on the worker's loop (the consumer thread's tasks are read from there, best
effort).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from stream_rater.service.order_watch import Message

log = logging.getLogger(__name__)

#: Frames shown per task stack (the innermost ones).
STACK_FRAMES = 12

#: A source of in-flight lines (`dump`).
InFlight = Callable[[], Iterable[str]]


def task_lines(loop: asyncio.AbstractEventLoop, where: str) -> list[str]:
    """One line per task of `loop`: its name, coroutine and stack, outermost frame first."""
    for _ in range(3):  # read from another thread, the set may change meanwhile
        try:
            tasks = list(asyncio.all_tasks(loop))
            break
        except RuntimeError:
            continue
    else:
        return [f"{where}: tasks could not be listed"]
    return sorted(task_line(task, where) for task in tasks)


def task_line(task: asyncio.Task[Any], where: str) -> str:
    """`task` as one line: its name and stack (what it awaits last), prefixed with `where`."""
    frames = _await_chain(task.get_coro())[-STACK_FRAMES:]
    stack = " > ".join(f"{f.f_code.co_name}@{_short(f.f_code.co_filename)}:{f.f_lineno}" for f in frames)
    return f"{where} task {task.get_name()}: {stack or '(no frame)'}"


def _await_chain(awaitable: Any) -> list[Any]:
    """The frames of `awaitable` and of what it awaits, down to the innermost (a task's
    `get_stack` shows only the outermost coroutine)."""
    frames: list[Any] = []
    while awaitable is not None and len(frames) < 100:
        frame = next(
            (
                getattr(awaitable, a)
                for a in ("cr_frame", "gi_frame", "ag_frame")
                if getattr(awaitable, a, None)
            ),
            None,
        )
        if frame is not None:
            frames.append(frame)
        awaitable = next(
            (
                getattr(awaitable, a)
                for a in ("cr_await", "gi_yieldfrom", "ag_await")
                if getattr(awaitable, a, None)
            ),
            None,
        )
    return frames


def _short(path: str) -> str:
    """`path` from its package directory on (site-packages/… or stream_rater/…)."""
    for marker in ("site-packages/", "stream_rater/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def spans(messages: Sequence[Message]) -> str:
    """`messages` as partition@first-last (count) per partition, e.g. ``p1@100-149(50)``."""
    by_partition: dict[int, list[int]] = {}
    for message in messages:
        by_partition.setdefault(message.partition, []).append(message.offset)
    return (
        " ".join(
            f"p{p}@{min(offsets)}-{max(offsets)}({len(offsets)})"
            for p, offsets in sorted(by_partition.items())
        )
        or "(none)"
    )


def consumer_lines(app: Any, topic: str) -> list[str]:
    """The consumer's view of each assigned partition of `topic`, and its flow state."""
    consumer = app.consumer
    assignment = sorted(tp for tp in consumer.assignment() if tp.topic == topic)
    active = consumer._active_partitions or set()
    paused = consumer._paused_partitions
    unacked: dict[int, int] = {}
    for message in list(consumer.unacked):
        unacked[message.partition] = unacked.get(message.partition, 0) + 1
    lines = [
        (
            f"consumer: generation {app.consumer_generation_id}, flow active {consumer.flow_active}, "
            f"flow control suspended {app.flow_control.is_active() is False}, "
            f"assigned {[tp.partition for tp in assignment]}, {len(consumer.unacked)} taken unacknowledged"
        )
    ]
    for tp in assignment:
        lines.append(
            f"consumer p{tp.partition}: {'active' if tp in active else 'not fetched'}"
            f"{' paused' if tp in paused else ''}, highwater {consumer.highwater(tp)}, "
            f"read {consumer._read_offset.get(tp)}, next expected {getattr(consumer, '_next_offset', {}).get(tp)}, "
            f"committed {consumer._committed_offset.get(tp)}, acked {len(consumer._acked.get(tp, ()))}, "
            f"taken unacknowledged {unacked.get(tp.partition, 0)}"
        )
    return lines


def dump(loops: Iterable[tuple[str, asyncio.AbstractEventLoop]], in_flight: Iterable[InFlight]) -> None:
    """Log every task's stack on `loops` and every line of `in_flight` (warning level, so that
    it shows whatever the log level)."""
    lines: list[str] = []
    for where, loop in loops:
        lines += task_lines(loop, where)
    for source in in_flight:
        try:
            lines += list(source())
        except Exception as exc:  # best effort: the dump must not fail on state it reads mid-change
            lines.append(f"{getattr(source, '__qualname__', source)!s}: could not be read ({exc!r})")
    log.warning("SIGUSR1: what the worker waits on (%d lines)", len(lines))
    for line in lines:
        log.warning("waits: %s", line)
