"""``stream-rater demo``, the README's run command, as a user runs it: it rates the football
matches end to end and verifies them against a replay; stopped (SIGTERM) or killed outright
(SIGKILL) midway, it leaves no worker, broker or Redis of its own running."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from stream_rater.cli import EXIT_TERMINATED
from stream_rater.local.demo import stop_process
from tests.helpers import gone, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """``stream-rater demo`` on the whole football data, its output unbuffered and read line by
    line (`said`); stopped by PID afterwards if a test left it running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "stream_rater", "demo"],
        env={**os.environ, "PYTHONUNBUFFERED": "1", "STREAM_RATER_APP_DATADIR": str(tmp_path / "faust")},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield process
    stop_process(process)
    assert process.stdout is not None
    process.stdout.close()


def said(process: subprocess.Popen[str], pattern: str) -> re.Match[str]:
    """The first line `process` prints that `pattern` finds (its earlier lines are passed over)."""
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        if found := re.search(pattern, line):
            return found
        seen.append(line)
    pytest.fail(
        f"the demo ended (code {process.wait()}) without a line like {pattern!r}:\n{''.join(seen)[-3000:]}"
    )


def refused(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return True
    return False


def started(process: subprocess.Popen[str]) -> tuple[list[str], int]:
    """The demo's broker and Redis addresses and its worker's PID, once the worker is ready
    (rating: a worker starting up would give up by itself without a broker or Redis)."""
    found = said(process, r"^broker (\S+)\s+redis redis://([^/\s]+)")
    worker = said(process, r"^worker pid (\d+), dashboard (\S+) ")
    wait_for(lambda: ready(worker.group(2)), "the demo's worker to be ready", timeout=120)
    return [*found.group(1).split(","), found.group(2)], int(worker.group(1))


def ready(dashboard: str) -> bool:
    try:
        with urllib.request.urlopen(f"{dashboard}readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_the_demo_rates_every_match_and_agrees_with_a_replay(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "stream_rater", "demo", "--limit", "3000", "--top", "3"],
        env={**os.environ, "STREAM_RATER_APP_DATADIR": str(tmp_path / "faust")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^rated 3000 matches in [\d.]+ s end to end .*; worker exit code 0$", done.stdout, re.M)
    assert done.stdout.rstrip().splitlines()[-1].endswith(" players, none differ from the replay")


def test_a_demo_stopped_by_sigterm_stops_its_worker_broker_and_redis(demo: subprocess.Popen[str]):
    addresses, worker = started(demo)
    demo.send_signal(signal.SIGTERM)
    assert demo.wait(90) == EXIT_TERMINATED
    assert gone(worker), "the worker outlived the demo"
    assert all(refused(address) for address in addresses), addresses


def test_a_demo_killed_outright_takes_its_worker_with_it(demo: subprocess.Popen[str]):
    """SIGKILL runs no cleanup: the worker (and the broker and Redis) die with the demo
    (``PR_SET_PDEATHSIG``) rather than run on, orphaned."""
    addresses, worker = started(demo)
    demo.kill()
    demo.wait(30)
    wait_for(lambda: gone(worker), "the worker to die with the demo", timeout=30)
    wait_for(lambda: all(refused(address) for address in addresses), "the broker and Redis to go", timeout=30)
