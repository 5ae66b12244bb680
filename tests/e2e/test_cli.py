"""The ``stream-rater`` command line as users run it: a subprocess per command."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import msgpack
import pytest
import redis

from stream_rater.cli.stream import tansu_clients_note
from stream_rater.config.settings import Settings
from stream_rater.kafka import bootstrap_servers
from stream_rater.local.apache_kafka import JavaToolMissing, java_binary, kafka_libs
from stream_rater.local.demo import stop_process, wait_ready
from stream_rater.local.runtime import free_port
from stream_rater.store.redis.keys import marker_slots
from tests import helpers

pytestmark = pytest.mark.e2e

FOOTBALL_HEAD = [
    "date,home_team,away_team,home_score,away_score,tournament,city,country,neutral",
    "1872-11-30,Scotland,England,0,0,Friendly,Glasgow,Scotland,FALSE",
    "1873-03-08,England,Scotland,4,2,Friendly,London,England,FALSE",
    "1874-03-07,Scotland,England,2,1,Friendly,Glasgow,Scotland,FALSE",
    "1875-03-06,England,Scotland,2,2,Friendly,London,England,TRUE",
]


#: ``stream-rater ARGS``, failing the test on a non-zero exit unless ``check=False``.
cli = partial(helpers.cli, check=True)


def duel(match_id: str, a: str, b: str, ladder: str = "default") -> str:
    """A 1-vs-1 match-finished event as a JSON line."""
    return json.dumps(helpers.duel(match_id, a, b, ladder=ladder, at="2024-01-01T00:00:00Z"))


def test_replay_reports_bad_lines_by_number_and_keeps_going(tmp_path: Path):
    """A bad line is reported with file:line and reason, skipped, and counted in the summary;
    the exit is 2 (0 with --allow-bad-lines)."""
    path = tmp_path / "matches.jsonl"
    path.write_text(
        "\n".join([duel("m1", "a", "b"), "{not json", duel("m2", "a", "a"), duel("m3", "b", "c")]) + "\n"
    )
    result = cli("replay", str(path), check=False)
    assert result.returncode == 2
    assert cli("replay", "--allow-bad-lines", str(path)).returncode == 0
    assert [json.loads(line)["event_id"] for line in result.stdout.splitlines()] == [
        "m1:a",
        "m1:b",
        "m3:b",
        "m3:c",
    ]
    assert f"{path}:2: not valid JSON" in result.stderr
    assert (
        f"{path}:3: teams[1].players[0].id: player 'a' is already listed at teams[0].players[0]"
        in result.stderr
    )
    assert "4 read, 2 applied, 0 already applied, 2 rejected" in result.stderr


def test_replay_strict_stops_at_the_first_bad_line(tmp_path: Path):
    """With --strict the first bad line ends the run with exit code 2 and its location."""
    path = tmp_path / "matches.jsonl"
    path.write_text("\n".join([duel("m1", "a", "b"), '{"match_id": "m2"}', duel("m3", "b", "c")]) + "\n")
    result = cli("replay", "--strict", str(path), check=False)
    assert result.returncode == 2
    assert f"{path}:2: finished_at: is required" in result.stderr


def test_replay_football_with_params_and_home_effect(tmp_path: Path):
    """The football adapter and --param configure the ladder; the home team carries the effect."""
    path = tmp_path / "football.csv"
    path.write_text("\n".join(FOOTBALL_HEAD) + "\n")
    plain = cli("replay", "--format", "football", "--param", "draw_probability=0.227", str(path)).stdout
    home = cli(
        "replay", "--format", "football", "--home-effect", "--param", "draw_probability=0.227", str(path)
    ).stdout
    assert len(plain.splitlines()) == len(home.splitlines()) == 8
    assert plain != home
    first = json.loads(plain.splitlines()[0])
    assert (first["match_id"], first["model"], first["before"]["mu"]) == (
        "1872-11-30:Scotland:England",
        "trueskill",
        25.0,
    )


def test_bad_model_parameter_is_reported_before_any_input_is_read(tmp_path: Path):
    """An unknown --param name fails at once with the model's allowed parameters."""
    result = cli("replay", "--param", "gamma=1", str(tmp_path / "missing.jsonl"), check=False)
    assert result.returncode == 2 and "no parameter 'gamma'" in result.stderr


def test_replay_into_redis_twice_then_ratings_and_leaderboard(
    redis_url: str, tmp_path: Path, unique_name: str
):
    """Replaying into Redis twice applies nothing the second time; ratings and leaderboard read it back."""
    ladder = "l" + unique_name.replace("_", "-").replace("--", "-")[-20:].lower().strip("-")
    path = tmp_path / "matches.jsonl"
    path.write_text("\n".join([duel("m1", "a", "b"), duel("m2", "a", "c"), duel("m3", "b", "c")]) + "\n")
    args = ["replay", "--ladder", ladder, "--model", "elo", "--store", redis_url, str(path)]
    first, second = cli(*args), cli(*args)
    assert "3 applied, 0 already applied" in first.stderr
    assert "0 applied, 3 already applied" in second.stderr
    assert second.stdout == first.stdout
    env_ladder = ["--ladders-file", str(_ladders_file(tmp_path, ladder))]
    rows = [
        json.loads(line)
        for line in cli("ratings", "--ladder", ladder, "--store", redis_url, *env_ladder).stdout.splitlines()
    ]
    assert [(r["player_id"], r["games"], r["sigma"]) for r in rows] == [
        ("a", 2, None),
        ("b", 2, None),
        ("c", 2, None),
    ]
    board = cli(
        "leaderboard", "--ladder", ladder, "--top", "2", "--store", redis_url, *env_ladder
    ).stdout.splitlines()
    assert board[0] == "season 1" and board[2].split()[:2] == ["1", "a"] and len(board) == 4
    around = ["leaderboard", "--ladder", ladder, "--store", redis_url, *env_ladder, "--around"]
    answer = json.loads(cli(*around, "b", "--n", "1", "--json").stdout)
    assert [r["player_id"] for r in answer["rows"]] == ["a", "b", "c"] and answer["rank"] == 2
    text = cli(*around, "c", "--n", "1").stdout.splitlines()
    assert text[0] == "3 ranked" and [line.split()[:2] for line in text[2:]] == [["2", "b"], ["3", "c"]]
    missing = cli(*around, "zed", check=False)
    assert missing.returncode == 2
    assert missing.stderr == f"stream-rater leaderboard: --around: zed has not played on ladder {ladder!r}\n"


def test_the_store_defaults_to_STREAM_RATER_REDIS_URL(redis_url: str, tmp_path: Path, unique_name: str):
    """`ratings` and `leaderboard` without --store read the store of STREAM_RATER_REDIS_URL;
    --store wins over the variable; `replay` stays offline (memory) unless given --store."""
    ladder = "l" + unique_name.replace("_", "-").replace("--", "-")[-20:].lower().strip("-")
    path = tmp_path / "matches.jsonl"
    path.write_text("\n".join([duel("m1", "a", "b"), duel("m2", "a", "c")]) + "\n")
    env = {
        "STREAM_RATER_REDIS_URL": redis_url,
        "STREAM_RATER_LADDERS_FILE": str(_ladders_file(tmp_path, ladder)),
    }
    assert "2 applied" in cli("replay", "--ladder", ladder, str(path), env=env).stderr
    assert cli("ratings", "--ladder", ladder, env=env).stdout == ""
    cli("replay", "--ladder", ladder, "--store", redis_url, str(path), env=env)
    rows = [json.loads(line) for line in cli("ratings", "--ladder", ladder, env=env).stdout.splitlines()]
    assert [(r["player_id"], r["games"]) for r in rows] == [("a", 2), ("b", 1), ("c", 1)]
    board = cli("leaderboard", "--ladder", ladder, "--top", "1", env=env).stdout.splitlines()
    assert board[2].split()[:2] == ["1", "a"] and len(board) == 3
    assert cli("ratings", "--ladder", ladder, "--store", "memory", env=env).stdout == ""


def _ladders_file(tmp_path: Path, ladder: str) -> Path:
    path = tmp_path / "ladders.toml"
    path.write_text(f'[ladders.{ladder}]\nmodel = "elo"\n')
    return path


def test_publish_then_subscribe_through_a_worker(web_worker):
    """`publish` sends valid lines keyed by ladder (bad ones reported, exit 2), `subscribe`
    prints the updates."""
    settings = web_worker.settings
    lines = (
        "\n".join([duel("c1", "x", "y", web_worker.ladder), "oops", duel("c2", "y", "z", web_worker.ladder)])
        + "\n"
    )
    sent = cli(
        "publish",
        "--broker",
        settings.broker,
        "--topic-matches",
        settings.topic_matches,
        "--partitions",
        str(settings.partitions),
        "--ladders-file",
        str(_trueskill_file(web_worker)),
        stdin=lines,
        env={
            "STREAM_RATER_TOPIC_UPDATES": settings.topic_updates,
            "STREAM_RATER_TOPIC_DLQ": settings.topic_dlq,
        },
        check=False,
    )
    assert sent.returncode == 2 and "warning" not in sent.stderr
    assert "sent 2 match events" in sent.stderr and "<stdin>:2: not valid JSON" in sent.stderr
    got = cli(
        "subscribe",
        "--broker",
        settings.broker,
        "--topic-updates",
        settings.topic_updates,
        "--ladder",
        web_worker.ladder,
        "--player",
        "y",
        "--from-beginning",
        "--count",
        "2",
    )
    assert [json.loads(line)["event_id"] for line in got.stdout.splitlines()] == ["c1:y", "c2:y"]


def _trueskill_file(worker) -> Path:
    path = worker.log_path.with_name("ladders.toml")
    path.write_text(f'[ladders.{worker.ladder}]\nmodel = "trueskill"\n')
    return path


def test_bench_e2e_runs_the_worker_beside_the_pass_through():
    """`bench e2e` starts its own embedded runtime, measures both pipelines and prints them
    side by side, with Redis's CPU per match, and latency and the pipeline's CPU at each rate
    asked (a smoke run on a small backlog: the figures themselves are not judged)."""
    out = cli(
        "bench",
        "e2e",
        "--matches",
        "3000",
        "--latency-seconds",
        "0.4",
        "--rates",
        "50,200",
        "--players",
        "100000",
    ).stdout
    lines = out.splitlines()
    assert "one ladder (one partition) of 100,000 players" in lines[0]
    header = next(line for line in lines if line.startswith("pipeline"))
    assert header.split()[6:12] == ["Redis", "µs", "p50@50", "p99@50", "p50@200", "p99@200"]
    rows = {
        line.split("  ")[0]: line.split()[-10:]
        for line in lines
        if line.startswith(("stream-rater", "naive"))
    }
    assert set(rows) == {"stream-rater worker", "naive faust pass-through"}
    figures = {name: [float(value.replace(",", "")) for value in row] for name, row in rows.items()}
    assert all(value > 0 for value in figures["stream-rater worker"])
    assert all(value > 0 for i, value in enumerate(figures["naive faust pass-through"]) if i != 3)  # no Redis
    assert "worker / pass-through: throughput" in out
    split = next(line for line in lines if line.startswith("p50 split")).split(": ", 1)[1]
    assert re.fullmatch(
        r"stream-rater worker @50 -?[\d.]+ \+ -?[\d.]+, @200 -?[\d.]+ \+ -?[\d.]+; naive faust pass-through @50 .*",
        split,
    )
    steady = next(line for line in lines if line.startswith("pipeline CPU at each steady rate")).split(
        ": ", 1
    )[1]
    cpu = r"@{} [\d.]+ \([\d,]+ µs\)"
    assert re.fullmatch(
        rf"stream-rater worker {cpu.format(50)}, {cpu.format(200)}; naive faust pass-through {cpu.format(50)}, .*",
        steady,
    )


def test_migrate_to_2_moves_markers_of_the_earlier_layout(redis_url):
    """``migrate --to 2`` on a store (its own prefix) with a marker key of the layout before
    the markers hash: the match is applied in its markers bucket afterwards, the key is gone,
    and the store is recorded in format 2."""
    ladder, prefix = f"mig-{os.getpid()}-{socket.gethostname()}", f"mig{os.getpid()}"
    with redis.Redis.from_url(redis_url) as client:
        client.set(f"{prefix}:{{{ladder}}}:m:m1", msgpack.packb([]))
        out = helpers.cli(
            "migrate", "--to", "2", "--store", redis_url, "--redis-prefix", prefix, check=True
        ).stdout
        assert out == (
            "upgraded to stored format 2: 1 legacy markers, 0 states, 0 histories, 1 markers, "
            "0 leaderboard sums, 0 idle players off the leaderboards\n"
        ), out
        slot = marker_slots(time.time(), Settings.marker_ttl)[1]  # moved into the present slot
        assert client.hget(f"{prefix}:{{{ladder}}}:mk:{slot}", "m1") == b""
        assert not client.exists(f"{prefix}:{{{ladder}}}:m:m1")
        assert client.hget(f"{prefix}:deployment", "format") == b"2"


def test_migrate_to_3_raises_a_format_2_store_once_and_refuses_format_1(redis_url):
    """``migrate --to 3`` raises a format-2 store's record to 3 in one line (no data changes),
    says so again in one line, and refuses a format-1 store in one line naming ``--to 2``
    (exit 1), writing nothing."""
    prefix = f"m3{os.getpid()}"
    flags = ("--store", redis_url, "--redis-prefix")
    with redis.Redis.from_url(redis_url) as client:
        client.hset(f"{prefix}:deployment", "format", "2")
        client.hset(f"{prefix}1:{{L}}:players", "a", b"")  # a format-1 key, no record
        raised, again = (helpers.cli("migrate", "--to", "3", *flags, prefix, check=True).stdout for _ in "12")
        refused = helpers.cli("migrate", "--to", "3", *flags, f"{prefix}1")
        assert client.hget(f"{prefix}:deployment", "format") == b"3"
        assert not client.exists(f"{prefix}1:deployment")
    store = f"the Redis store of prefix {prefix!r}"
    assert raised == (
        "upgraded to stored format 3 (was 2): no data changed; workers started from now on move "
        "unproduced events aside, those of a release before refuse the store\n"
    ), raised
    assert again == f"{store} is in stored format 3 already: nothing changed\n", again
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "stored format 1: upgrade it with `stream-rater migrate --to 2` first" in refused.stderr


def test_bench_redis_splits_redis_cpu_per_match_into_scripts_and_commands():
    """`bench redis` on its own local Redis, matches drawn from the players asked: Redis's CPU
    per match, the scripts' share of it and the commands they call (a smoke run: only that the figures are there and add up; the
    scripts' time is Redis's own clock, which on a loaded machine may exceed its CPU time, so
    only the commands are held to be a part of the scripts)."""
    out = cli("bench", "redis", "--matches", "2000", "--players", "50000").stdout
    assert "(50,000 players each," in out.splitlines()[0]
    total = float(out.split("Redis CPU per match ")[1].split(" µs")[0])
    scripts = float(out.split("in the scripts ")[1].split(" µs")[0])
    commands = float(out.split("of which the commands they call ")[1].split(" µs")[0])
    assert total > 0 and 0 < commands <= scripts, out
    table = dict(line.split(maxsplit=1) for line in out.splitlines()[3:])
    assert {"hset", "hdel", "lpush", "hmget", "zadd"} <= set(table), out


def test_bench_scale_runs_workers_on_a_runtime_and_verifies_against_a_replay():
    """`bench scale` in a tiny configuration (one worker, 300 matches over 1 and then 4
    ladders on 2 partitions, single Redis, 40 players split over the ladders): one row per
    ladder count with its players per ladder and its worker's share, the replay check passed,
    and a batch costs at most two store round trips however many ladders it spans (the other
    figures are not judged)."""
    out = cli(
        "bench",
        "scale",
        "--redis",
        "single",
        "--workers",
        "1",
        "--matches",
        "300",
        "--ladders",
        "1,4",
        "--partitions",
        "2",
        "--total-players",
        "40",
    ).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith("single")]
    assert [row[:4] for row in rows] == [["single", "1", "1", "40"], ["single", "4", "1", "10"]], out
    assert all(row[-1] == "ok" for row in rows), out
    assert all(float(value.replace(",", "")) > 0 for row in rows for value in row[3:6]), out
    shares = [line.strip() for line in out.splitlines() if "worker 0:" in line]
    assert all(share.startswith("worker 0: partitions 0,1: 300 matches in ") for share in shares), out
    trips = [float(share.split(" store round trips each")[0].rsplit(" ", 1)[1]) for share in shares]
    assert all(0 < t <= 2.0 for t in trips), out


def kcat_publishes(bootstrap: str) -> bool:
    """Whether librdkafka (kcat) can publish a record to `bootstrap` (to a topic of its own)."""
    if not shutil.which("kcat"):
        pytest.skip("kcat (librdkafka's command-line client; Debian package kcat) is not installed")
    done = subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", "kcat-probe", "-X", "socket.timeout.ms=10000"],
        input=b"probe\n",
        capture_output=True,
        timeout=60,
    )
    return done.returncode == 0


#: `dev`'s broker and Redis on free ports.
FREE_PORTS = ("--kafka-port", "0", "--redis-port", "0")


@pytest.mark.parametrize(
    ("flags", "nodes"),
    [([], 1), (["--embedded-broker", "apache-kafka", "--brokers", "3"], 3)],
    ids=["tansu", "kafka-3"],
)
def test_dev_becomes_ready_and_stops_on_sigint(tmp_path: Path, flags: list[str], nodes: int):
    """`dev` (Tansu) and `dev --embedded-broker apache-kafka --brokers 3` (three KRaft nodes) start a
    worker that turns ready (/readyz 200) on a broker kcat (librdkafka) publishes to, or whose
    startup lines say which flag gives one (Tansu); SIGINT by PID ends it with exit 0 and its
    broker nodes with it."""
    if nodes > 1:
        try:
            java_binary()
            kafka_libs()
        except JavaToolMissing as exc:
            pytest.skip(str(exc))
    port = free_port()
    log_path = tmp_path / "dev.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            # Free ports, not the tutorial's 9092 and 6379: another test may run a `dev` meanwhile.
            [sys.executable, "-m", "stream_rater", "dev", *flags, "--web-port", str(port), *FREE_PORTS],
            env={**os.environ, "STREAM_RATER_APP_DATADIR": str(tmp_path / "faust-data")},
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_ready(process, f"http://127.0.0.1:{port}/readyz", 180)
        except (RuntimeError, TimeoutError) as exc:
            stop_process(process)
            pytest.fail(f"{exc}; dev log:\n{log_path.read_text()[-3000:]}")
        lines = log_path.read_text().splitlines()
        [broker] = [line.split()[1] for line in lines if line.startswith("broker ")]
        try:
            kcat_takes_it = kcat_publishes(bootstrap_servers(broker))
        except BaseException:  # a skip (no kcat) or a failure: dev and its ports go with it
            stop_process(process)
            raise
        process.send_signal(signal.SIGINT)
        code = process.wait(60)
    assert code == 0, log_path.read_text()[-3000:]
    notes = [line for line in lines if line.startswith("clients ")]
    # dev takes a librdkafka producer, or its startup lines say which flag gives one that does
    assert kcat_takes_it or notes == [f"clients  {tansu_clients_note()}"], notes
    assert not (kcat_takes_it and notes), notes
    # on Tansu, which holds a fetch for its whole wait, the short fetch wait other workers need
    workers = [line for line in lines if line.startswith("workers ")]
    assert [line.split()[1] for line in workers] == (
        ["STREAM_RATER_FETCH_MAX_WAIT=0.01"] if nodes == 1 else []
    )
    addresses = bootstrap_servers(broker).split(",")
    assert len(addresses) == nodes, broker
    for address in addresses:  # every node stopped with it
        host, node_port = address.rsplit(":", 1)
        with pytest.raises(OSError):
            socket.create_connection((host, int(node_port)), timeout=2).close()
