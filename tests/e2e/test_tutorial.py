"""The tutorial ("Your first ladder", docs/pages/tutorial.md) as a newcomer runs it: its fenced shell blocks,
in order, verbatim, through ``bash`` in an empty directory, against the `dev` its second step
starts (the test starts that one as a process and stops it by PID with the Ctrl-C the last
step asks for). Each step's output is checked against an oracle: the events equal a replay of
the matches the tutorial wrote, the read API returns those players, the void puts them back to
the prior. If a command of the tutorial changes, this test fails."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.kafka import committed_offsets, read_log
from stream_rater.local.demo import stop_process, wait_ready
from tests.e2e.e2e_support import replay_of
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "pages" / "tutorial.md"
BIN = str(Path(sys.executable).parent)
WEB = "http://127.0.0.1:6066"
#: The broker and topics of the tutorial's `dev`.
DEV = Settings(broker="localhost:9092")


def tutorial_blocks(text: str) -> list[str]:
    """The ```sh blocks of the tutorial page, in order."""
    return re.findall(r"```sh\n(.*?)\n```", text, flags=re.DOTALL)


def run_block(block: str, cwd: Path) -> subprocess.CompletedProcess:
    """`block` through bash, verbatim, in `cwd`, with this venv's `stream-rater` on the PATH;
    a failing command fails the test."""
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=cwd,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{block}\nexit {result.returncode}: {result.stderr[-2000:]}"
    return result


def json_lines(text: str) -> list[dict]:
    """The JSON values of `text`, one after the other (lines, or curl's answers that end
    without a newline)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        value, at = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
        values.append(value)
    return values


class Tutorial:
    """The run's directory and what its steps left for the later checks."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.matches: list[dict] = []
        self.replayed: dict[str, dict] = {}

    def ladders(self, result: subprocess.CompletedProcess) -> None:
        """Three ladders of three models: 1v1 TrueSkill, a team ladder, a free-for-all."""
        ladders = Ladders.from_toml(str(self.cwd / "ladders.toml"))
        models = {name: ladders[name].model for name in ladders if name != "default"}
        assert sorted(models.values()) == ["plackett-luce", "trueskill", "trueskill"], models

    def publish(self, result: subprocess.CompletedProcess) -> None:
        """Three matches (a 1v1, a team game with scores, a free-for-all) sent, none rejected."""
        self.matches = json_lines((self.cwd / "matches.jsonl").read_text())
        sizes = sorted(sum(len(t["players"]) for t in m["teams"]) for m in self.matches)
        assert sizes == [2, 4, 4], sizes
        assert any("score" in t for m in self.matches for t in m["teams"])
        assert "sent 3 match events" in result.stderr, result.stderr
        ladders = Ladders.from_toml(str(self.cwd / "ladders.toml"))
        self.replayed = replay_of("chess", self.matches, ladders)[1]

    def subscribe(self, result: subprocess.CompletedProcess) -> None:
        """Every player of the three matches gets the event a replay computes."""
        events = {e["event_id"]: e for e in json_lines(result.stdout)}
        assert set(events) == set(self.replayed), sorted(events)
        for event_id, event in events.items():
            expected = {k: v for k, v in self.replayed[event_id].items() if k != "processed_at"}
            assert {k: v for k, v in event.items() if k != "processed_at"} == expected

    def curl(self, result: subprocess.CompletedProcess) -> None:
        """The lookup shows alice and bob as rated, the leaderboard the four of the team
        game, the predict favours chess-1's winner."""
        lookup, board, predict = json_lines(result.stdout)
        after = {
            e["player_id"]: {"mu": e["after"]["mu"], "sigma": e["after"]["sigma"]}
            for e in self.replayed.values()
            if e["ladder"] == "chess"
        }
        assert {p["player_id"]: {"mu": p["mu"], "sigma": p["sigma"]} for p in lookup["players"]} == after
        assert {r["player_id"] for r in board["rows"]} == {"alice", "bob", "carol", "dave"}
        alice, bob = (team["win_probability"] for team in predict["teams"])
        assert alice > bob, predict
        # A newcomer's pause before the next step: the worker commits its group's offsets
        # (every second) past the matches it acknowledged, i.e. whose events the broker has.
        wait_for(self.acknowledged, "the worker's group committed the tutorial's matches", 30)

    def acknowledged(self) -> bool:
        """The worker's consumer group has committed the end of the matches topic."""
        records, reached = asyncio.run(read_log(DEV, DEV.topic_matches))
        return bool(records) and asyncio.run(committed_offsets(DEV, DEV.topic_matches, reached)) == reached

    def void(self, result: subprocess.CompletedProcess) -> None:
        """With its only match voided, chess's players are back to the prior."""
        report, _, answer = result.stdout.partition("\n")
        assert "2 players corrected" in report, report
        [lookup] = json_lines(answer)
        assert [(p["player_id"], p["new"], p["games"]) for p in lookup["players"]] == [
            ("alice", True, 0),
            ("bob", True, 0),
        ], lookup
        self.no_duplicates_after_the_void()

    def no_duplicates_after_the_void(self) -> None:
        """rating-updates holds each event once: the match events, then the void's two
        correction events; none of the voided match's delivered events is sent again."""
        count = len(self.replayed) + 2
        flags = ["--broker", "localhost:9092", "--from-beginning", "--count", str(count)]
        done = subprocess.run(
            [f"{BIN}/stream-rater", "subscribe", *flags], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr[-2000:]
        ids = [e["event_id"] for e in json_lines(done.stdout)]
        assert len(ids) == len(set(ids)) == count, sorted(ids)
        assert set(ids) == set(self.replayed) | {f"rerate:chess:1:{p}" for p in ("alice", "bob")}, sorted(ids)


#: Each block of the tutorial, in order: how to recognise it and the check of its output.
STEPS: list[tuple[str, Callable[[Tutorial, subprocess.CompletedProcess], None]]] = [
    (r"cat > ladders\.toml", Tutorial.ladders),
    (r"stream-rater dev ", lambda tutorial, result: None),
    (r"stream-rater publish ", Tutorial.publish),
    (r"stream-rater subscribe ", Tutorial.subscribe),
    (r"curl ", Tutorial.curl),
    (r"stream-rater void ", Tutorial.void),
]


def start_dev(block: str, cwd: Path, log: Path) -> subprocess.Popen:
    """The tutorial's `stream-rater dev …` line, as a process of its own (it runs in the
    newcomer's second terminal), ready to rate."""
    [line] = block.splitlines()
    argv = shlex.split(line)
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(Path(BIN) / argv[0]), *argv[1:]], cwd=cwd, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_ready(process, f"{WEB}/readyz", 90)
    except (RuntimeError, TimeoutError) as exc:
        stop_process(process)
        pytest.fail(f"{exc}; dev's log:\n{log.read_text()[-3000:]}")
    return process


def test_the_tutorial_runs_as_written(tmp_path: Path):
    """The blocks of "Your first ladder" run verbatim in order, each doing what it says; Ctrl-C
    (SIGINT) then ends `dev` with exit 0."""
    blocks = tutorial_blocks(TUTORIAL.read_text())
    recognised = len(blocks) == len(STEPS) and all(
        re.search(pattern, block) for (pattern, _), block in zip(STEPS, blocks, strict=True)
    )
    assert recognised, f"the tutorial's blocks changed, update STEPS: {blocks}"
    tutorial, dev = Tutorial(tmp_path), None
    try:
        for (_, check), block in zip(STEPS, blocks, strict=True):
            if block.startswith("stream-rater dev "):
                dev = start_dev(block, tmp_path, tmp_path.parent / "dev.log")
                continue
            check(tutorial, run_block(block, tmp_path))
        assert dev is not None
        dev.send_signal(signal.SIGINT)
        assert dev.wait(60) == 0, (tmp_path.parent / "dev.log").read_text()[-3000:]
    finally:
        if dev is not None:
            stop_process(dev)
