"""Instructions per match of a workload (`tests.unit.perf.workload.CASES`), counted by
valgrind's callgrind, in total and per function group.

Python 3.11 runs Python-to-Python calls inside one C function, so callgrind cannot tell
``_events`` from ``plan_batch``. The counted run (`counted_run`) therefore calls each group's
functions through a C function of the interpreter that nothing else in the processor calls
(`MARKERS`: e.g. ``operator.call`` for ``plan_batch``): that C function's inclusive count is
the group's. The whole replay is called through ``sys.call_tracing``, so neither start-up
nor the building of the matches is counted; callgrind instruments only from just before it
(`_instrument`), which makes a count four times as fast. One run counts the total and every
group: the total includes the markers' own calls (a few per match, the same in every run).
"""

from __future__ import annotations

import functools
import gc
import itertools
import operator
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from stream_rater.processor import core, planner
from stream_rater.store.base import Commit
from tests.unit.perf.workload import CASES, CLOCK, parsed, run

ROOT = Path(__file__).resolve().parents[3]
VALGRIND = "valgrind"

#: Group → (the interpreter's C function its calls go through, what it covers). The replay is
#: counted with the cyclic garbage collector off, so that a collection (which any allocation
#: may set off) never moves a group's count.
MARKERS: dict[str, tuple[str, str]] = {
    "total": ("sys_call_tracing", "the whole replay: processor and memory store"),
    "plan_batch": ("_operator_call", "planner.plan_batch (inclusive)"),
    "events": ("methodcaller_call", "planner._events: states, events, history"),
    "rate": ("starmap_next", "planner._rated: the model's rate_match (and floor)"),
    "quality": ("takewhile_next", "planner's live quality: score_match and record"),
    "expected": ("dropwhile_next", "planner's pairwise and expected"),
    "store": ("filterfalse_next", "MemoryStore._read and _commit"),
    "redis_args": ("functools_reduce", "the Redis store's argument of each commit (scripts.commit_args)"),
}


def _through(kind: Callable[..., Any], f: Callable[..., Any]) -> Callable[..., Any]:
    """`f`, called inside the C function of the itertools predicate `kind` (takewhile, …)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        box: list[Any] = []
        next(kind(lambda _: box.append(f(*args, **kwargs)), (None,)), None)
        return box[0]

    return call


def _by_operator_call(f: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args, **kwargs: operator.call(f, *args, **kwargs)


def _by_methodcaller(f: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args, **kwargs: operator.methodcaller("__call__", *args, **kwargs)(f)


def _by_starmap(f: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args: next(itertools.starmap(f, (args,)))


def _by_reduce(f: Callable[..., Any]) -> Callable[..., Any]:
    """`f`, called inside ``functools.reduce``'s C function."""

    def call(*args: Any) -> Any:
        box: list[Any] = []
        functools.reduce(lambda _, __: box.append(f(*args)), (None, None))
        return box[0]

    return call


def _mark(module: Any, names: tuple[str, ...], wrap: Callable[..., Any]) -> None:
    for name in names:
        if hasattr(module, name):
            setattr(module, name, wrap(getattr(module, name)))


def counted_run(case: str, n: int) -> None:
    """Replay `n` matches of `case`, with every group's calls marked (module docstring), after
    a short replay of other matches of it (imports and caches of first use uncounted)."""
    matches = parsed(CASES[case](n))
    _build_redis_args()
    run([replace(m, match_id=f"warm-{m.match_id}", finished_at=m.finished_at - 1e8) for m in matches[:50]])
    _mark_groups()
    gc.disable()  # the collector's pauses fall in whichever group allocates: not in the groups
    _instrument()
    sys.call_tracing(run, (matches,))


def _instrument() -> None:
    """Have callgrind, started with ``--instr-atstart=no`` (`_counted`), instrument this process
    from now on: start-up (numpy's and scipy's imports) then runs at a fifth of the time it
    takes instrumented, most of a count's time before. Only the calls made after this are
    counted, which the groups' and the total's are. The wait spins: callgrind hears its control
    between blocks of code run, and a process blocked in a wait runs none (where vgdb may not
    ptrace it awake)."""
    control = subprocess.Popen(
        ["callgrind_control", "--instr=on", str(os.getpid())], stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60.0
    while control.poll() is None:
        if time.monotonic() > deadline:
            control.kill()
            raise TimeoutError("callgrind_control --instr=on did not answer in 60 s")
    if control.returncode != 0:
        raise RuntimeError(f"callgrind_control --instr=on exited {control.returncode}")


def _build_redis_args() -> None:
    """Have the memory store also build the Redis store's script argument of each commit (as
    `RedisStore` would, markers kept an hour, histories 2 entries: the worker's defaults), so
    that the budget covers the worker's encoding of its commits too, through
    ``functools.reduce`` (its group's marker)."""
    from stream_rater.store.memory import MemoryStore
    from stream_rater.store.redis.scripts import Buckets, commit_args

    def args(commit: Commit) -> bytes:
        return commit_args(commit, 0, 0, Buckets.of(commit, CLOCK, 3600.0), 2)

    build = _by_reduce(args)
    commit_many = MemoryStore.commit_many

    async def commit_with_args(self: MemoryStore, commits: Sequence[Commit]) -> Any:
        for commit in commits:
            build(commit)
        return await commit_many(self, commits)

    MemoryStore.commit_many = commit_with_args  # type: ignore[method-assign]


def _mark_groups() -> None:
    """Route each group's calls through its marker (`MARKERS`)."""
    _mark(core, ("plan_batch",), _by_operator_call)
    _mark(planner, ("_events",), _by_methodcaller)
    _mark(planner, ("_rated",), _by_starmap)
    _mark(planner, ("score_match", "record"), lambda f: _through(itertools.takewhile, f))
    _mark(planner, ("pairwise", "expected"), lambda f: _through(itertools.dropwhile, f))
    from stream_rater.store.memory import MemoryStore

    for name in ("_read", "_commit"):
        setattr(MemoryStore, name, _through(itertools.filterfalse, getattr(MemoryStore, name)))


def count(case: str, n: int, cwd: Path = ROOT) -> dict[str, float]:
    """Instructions per match of `n` matches of `case`, per group of `MARKERS` (the package
    imported from `cwd`)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(
            [
                VALGRIND,
                "--tool=callgrind",
                "--instr-atstart=no",  # until `_instrument`
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "tests.unit.perf.workload",
                "--count",
                case,
                str(n),
            ],
            cwd=cwd,
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        annotated = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    inclusive = _inclusive(annotated)
    return {group: inclusive.get(symbol, 0) / n for group, (symbol, _) in MARKERS.items()}


def _inclusive(annotated: str) -> dict[str, int]:
    """Function name → inclusive instructions, from ``callgrind_annotate --inclusive=yes``
    (which lists a function once per source file it spans: the largest is its count)."""
    found: dict[str, int] = {}
    for line in annotated.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\S*:(\w+)\b", line)
        if m:
            found[m.group(2)] = max(found.get(m.group(2), 0), int(m.group(1).replace(",", "")))
    return found


#: The budget: per case, per group, the most instructions per match (`update_budget`).
BUDGET = Path(__file__).with_name("budget.json")
#: Matches each case replays; headroom of a budget over the figure it was set from.
MATCHES, HEADROOM = 2000, 0.07


def update_budget() -> None:
    """Count every case and write its figures plus `HEADROOM` as the budget."""
    import json

    budget = {case: {g: round(v * (1 + HEADROOM)) for g, v in count(case, MATCHES).items()} for case in CASES}
    BUDGET.write_text(json.dumps(budget, indent=2) + "\n")


if __name__ == "__main__":
    update_budget()
