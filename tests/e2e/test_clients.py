"""Clients we did not write, on a 4-partition matches topic with 4 ladders each, as the README's
"Publish from any language" sets them up: confluent-kafka (librdkafka's default partitioner
consistent_random, and murmur2_random), franz-go and sarama with their default partitioners
(murmur2; FNV-1a), kcat (consistent_random) and Kafka's Java producer (murmur2). For each,
no record is counted miskeyed, no ladder is split, the states are exactly a replay's, and
the rating-changed events are read back by that client's own consumer. Then a round-robin
producer (sarama's round-robin partitioner): its ladder is reported split by the metric, the
alert rule (`promtool test rules` on the worker's own series), the log line and `verify`.

On Apache Kafka alone, like test_producers (Tansu refuses librdkafka's ApiVersions). The Go
clients (tests/e2e/goclients) are built once into a cache keyed by their sources' digest."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from stream_rater.config.settings import Settings
from stream_rater.kafka import bootstrap_servers, read_log
from tests.e2e.clients_support import consumed_by_java, consumed_by_kcat, java_tool, kcat, tools
from tests.e2e.conftest import Scrape
from tests.e2e.e2e_support import worker_test_env
from tests.e2e.streams import Stream, by_event_id, exact, replay_events
from tests.helpers import cli, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

__all__ = ["kcat", "tools"]  # fixtures of clients_support

GO_SOURCES = Path(__file__).with_name("goclients")
PARTITIONS = 4
#: Ladders per client, and matches per ladder.
LADDERS, PER_LADDER = 4, 5
PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


@pytest.fixture(scope="session")
def goclients() -> Path:
    """The Go clients' binary, built with the machine's Go from the module proxy, once per
    version of their sources (the cache outlives the session; go's own caches make a rebuild
    of changed sources quick)."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed (the Go clients are built from tests/e2e/goclients)")
    digest = hashlib.sha256()
    for path in sorted(GO_SOURCES.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stream-rater" / "goclients"
    binary = cache / digest.hexdigest()[:16] / "goclients"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(f".{os.getpid()}")  # the suite's two processes may both build
        built = subprocess.run(
            [go, "build", "-o", str(partial), "."],
            cwd=GO_SOURCES,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert built.returncode == 0, built.stderr[-3000:]
        partial.replace(binary)
    return binary


def lines(matches: list[dict]) -> bytes:
    """`matches` as ``ladder<TAB>json`` lines (key = ladder, as the README says)."""
    return "".join(f"{m['ladder']}\t{json.dumps(m)}\n" for m in matches).encode()


def confluent_producer(settings: Settings, partitioner: str | None) -> Callable[[list[dict]], None]:
    """confluent-kafka's producer as the README sets it: acks=all, idempotent, key = ladder,
    and librdkafka's default partitioner unless `partitioner` is given."""

    def publish(matches: list[dict]) -> None:
        from confluent_kafka import Producer

        config = {
            "bootstrap.servers": bootstrap_servers(settings.broker),
            "acks": "all",
            "enable.idempotence": True,
        }
        if partitioner:
            config["partitioner"] = partitioner
        producer = Producer(config)
        for m in matches:
            producer.produce(settings.topic_matches, json.dumps(m).encode(), key=m["ladder"].encode())
        assert producer.flush(30) == 0, "confluent-kafka: records left unsent"

    return publish


def confluent_consumed(settings: Settings, count: int) -> list[dict]:
    """The first `count` rating-changed events, read by confluent-kafka's group consumer."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers(settings.broker),
            "group.id": f"{settings.consumer_group}-confluent",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([settings.topic_updates])
    events: list[dict] = []
    try:
        for _ in range(600):
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                events.append(json.loads(message.value()))
            if len(events) >= count:
                return events
        raise AssertionError(f"confluent-kafka read {len(events)} of {count} events")
    finally:
        consumer.close()


def go_producer(binary: Path, client: str, settings: Settings) -> Callable[[list[dict]], None]:
    def publish(matches: list[dict]) -> None:
        argv = [str(binary), "produce", client, bootstrap_servers(settings.broker), settings.topic_matches]
        done = subprocess.run(argv, input=lines(matches), capture_output=True, timeout=90)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]

    return publish


def go_consumed(binary: Path, client: str, settings: Settings, count: int) -> list[dict]:
    argv = [
        str(binary),
        "consume",
        client,
        bootstrap_servers(settings.broker),
        settings.topic_updates,
        str(count),
    ]
    done = subprocess.run(argv, capture_output=True, timeout=90)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def kcat_producer(settings: Settings) -> Callable[[list[dict]], None]:
    """kcat with librdkafka's default partitioner: acks=all, idempotent, key = ladder."""

    def publish(matches: list[dict]) -> None:
        subprocess.run(
            ["kcat", "-P", "-b", bootstrap_servers(settings.broker), "-t", settings.topic_matches, "-K", "\t",
             "-X", "enable.idempotence=true", "-X", "acks=all"],
            input=lines(matches), check=True, timeout=60, capture_output=True,
        )  # fmt: skip

    return publish


def java_producer(tools: Path, settings: Settings) -> Callable[[list[dict]], None]:
    """Kafka's Java producer (ConsoleProducer), its default partitioner: acks=all, idempotent."""

    def publish(matches: list[dict]) -> None:
        argv = java_tool(
            tools, "org.apache.kafka.tools.ConsoleProducer",
            "--bootstrap-server", bootstrap_servers(settings.broker), "--topic", settings.topic_matches,
            "--property", "parse.key=true", "--request-required-acks", "all",
            "--producer-property", "enable.idempotence=true",
        )  # fmt: skip
        done = subprocess.run(argv, input=lines(matches), timeout=90, capture_output=True)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]

    return publish


def scrape(stream: Stream) -> Scrape:
    """The (only) worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{stream.web_ports[0]}/metrics", timeout=5) as response:
        body = response.read().decode()
    return Scrape(
        {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }
    )


def interleaved(stream: Stream, ladders: tuple[str, ...], prefix: str) -> list[dict]:
    """`PER_LADDER` duels on each of `ladders`, interleaved, among eight players per ladder."""
    return [
        stream.match(
            f"{prefix}-{i}-{n}", f"p{i % 8}", f"p{(3 * i + 1) % 8}", at=1_700_000_000.0 + i, ladder=name
        )
        for i in range(PER_LADDER)
        for n, name in enumerate(ladders)
    ]


def placement(settings: Settings) -> dict[str, set[int]]:
    """Ladder → the partitions of the matches topic its records are on."""
    records, _ = asyncio.run(read_log(settings, settings.topic_matches))
    found: dict[str, set[int]] = {}
    for record in records:
        found.setdefault(json.loads(record.value)["ladder"], set()).add(record.partition)
    return found


def rated_all(stream: Stream, count: int, what: str) -> None:
    wait_for(lambda: stream.applied() >= count, f"{what}: all {count} matches rated", timeout=60)


def test_every_client_and_partitioner_is_rated_as_a_replay_and_read_back_by_its_own_consumer(
    stream_factory, kcat, tools, goclients
):
    """Each client publishes 4 ladders' matches interleaved (key = ladder, acks=all) to a
    4-partition topic read by one worker: none miskeyed or split, every ladder on one
    partition, the states exactly a replay's, and each client's consumer reads back every
    event a replay emits. Prints the client × partitioner table the README gives."""
    clients = ["confluent-kafka", "confluent-kafka murmur2_random", "franz-go", "sarama", "kcat", "java"]
    stream = stream_factory(partitions=PARTITIONS, ladders=LADDERS * len(clients))
    settings = stream.settings
    stream.start_worker()
    producers = {
        clients[0]: confluent_producer(settings, None),
        clients[1]: confluent_producer(settings, "murmur2_random"),
        clients[2]: go_producer(goclients, "franz", settings),
        clients[3]: go_producer(goclients, "sarama", settings),
        clients[4]: kcat_producer(settings),
        clients[5]: java_producer(tools, settings),
    }
    sent: list[dict] = []
    owned: dict[str, tuple[str, ...]] = {}
    for n, (client, publish) in enumerate(producers.items()):
        owned[client] = stream.names[n * LADDERS : (n + 1) * LADDERS]
        batch = interleaved(stream, owned[client], f"c{n}")
        publish(batch)
        sent += batch
        rated_all(stream, len(sent), client)
    expected, states = replay_events(stream, sent)
    assert stream.applied() == len(sent)
    metrics, where = scrape(stream), placement(settings)
    table = []
    for client, names in owned.items():
        miskeyed = sum(metrics.total("stream_rater_matches_miskeyed_total", ladder=name) for name in names)
        split = [
            name
            for name in names
            if len(where[name]) > 1 or metrics.total("stream_rater_split_ladders", ladder=name)
        ]
        same = all(exact({n: stream.states(n)}) == exact({n: states[n]}) for n in names)
        table.append(
            f"| {client} | {miskeyed:.0f} | {len(split)} | {same} | {sorted(p for n in names for p in where[n])} |"
        )
        assert (miskeyed, split, same) == (0, [], True), table[-1]
    print(
        "\n| client | miskeyed | split ladders | states = replay | partitions of its 4 ladders |",
        *table,
        sep="\n",
    )
    want = by_event_id(expected)
    consumers = {
        "confluent-kafka": lambda: confluent_consumed(settings, len(expected)),
        "franz-go": lambda: go_consumed(goclients, "franz", settings, len(expected)),
        "sarama": lambda: go_consumed(goclients, "sarama", settings, len(expected)),
        "kcat": lambda: consumed_by_kcat(settings, len(expected)),
        "java": lambda: consumed_by_java(tools, settings, len(expected)),
    }
    for client, consume in consumers.items():
        assert by_event_id(consume()) == want, f"{client}'s consumer"


def test_a_round_robin_producer_splits_its_ladder_and_every_report_names_it(stream_factory, goclients):
    """sarama with its round-robin partitioner spreads one ladder's matches over the four
    partitions: each is applied exactly once; the worker's gauge names the ladder with 4
    partitions, its per-partition series make the alert rule fire (`promtool test rules` on
    them) while the orderly ladder's do not, its log names the ladder and the producer setting
    that fixes it, and `verify` names the split ladder and the order each side applied."""
    stream = stream_factory(partitions=PARTITIONS, ladders=2)
    settings, (spread, orderly) = stream.settings, stream.names
    stream.start_worker()
    matches = interleaved(stream, (spread,), "rr") + interleaved(stream, (orderly,), "ok")
    go_producer(goclients, "sarama-roundrobin", settings)(matches[:PER_LADDER])
    go_producer(goclients, "sarama", settings)(matches[PER_LADDER:])
    rated_all(stream, len(matches), "round robin")
    assert stream.applied() == len(matches) and placement(settings)[spread] == set(range(PARTITIONS))
    metrics = scrape(stream)
    assert metrics.total("stream_rater_split_ladders", ladder=spread) == PARTITIONS
    assert metrics.total("stream_rater_split_ladders", ladder=orderly) == 0
    assert metrics.total("stream_rater_matches_miskeyed_total") == 0
    split_alert_fires_for(metrics, spread, stream.tmp)
    log = (stream.tmp / "worker-0.log").read_text()
    assert f"split ladder '{spread}': its match records arrive on partitions" in log
    assert "key every match by its ladder" in log and f"split ladder '{orderly}'" not in log
    env = worker_test_env(stream.names, stream.tmp / "cli-data")
    verified = cli("verify", "--ladder", spread, "--store", settings.redis_url, "--broker", settings.broker,
                   "--topic-matches", settings.topic_matches, "--consumer-group", settings.consumer_group,
                   env=env)  # fmt: skip
    said = verified.stdout + verified.stderr
    assert f"split ladder '{spread}': its match records are on partitions [0, 1, 2, 3]" in said, said


def selector(labels: frozenset[tuple[str, str]]) -> str:
    """`labels` as a series selector's braces."""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels)) + "}"


def split_alert_fires_for(metrics: Scrape, ladder: str, tmp: Path) -> None:
    """`promtool test rules`: alerts.yml on the worker's scraped ``stream_rater_ladder_partition``
    series fires StreamRaterSplitLadder for `ladder` alone (the summary gives its partition count)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    series = [
        {"series": "stream_rater_ladder_partition" + selector(labels), "values": f"{value:.0f}x3"}
        for (name, labels), value in metrics.items()
        if name == "stream_rater_ladder_partition"
    ]
    [rule] = [r for g in yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"] for r in g["rules"]
              if r["alert"] == "StreamRaterSplitLadder"]  # fmt: skip
    annotations = {k: v.replace("{{ $labels.ladder }}", ladder).replace("{{ $value }}", str(PARTITIONS))
                   for k, v in rule["annotations"].items()}  # fmt: skip
    check = {"alertname": "StreamRaterSplitLadder", "eval_time": "2m", "exp_alerts": [
        {"exp_labels": {"ladder": ladder, "severity": "warning"}, "exp_annotations": annotations}]}  # fmt: skip
    test = tmp / "split_alert_test.yml"
    test.write_text(yaml.safe_dump({
        "rule_files": [str(PROMETHEUS / "alerts.yml")], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [check]}]}))  # fmt: skip
    done = subprocess.run([promtool, "test", "rules", str(test)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout + done.stderr, done.stdout + done.stderr
