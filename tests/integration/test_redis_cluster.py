"""The store on a real Redis Cluster of three masters (`redis_cluster_url`): ladders whose hash
tags land on different masters rate exactly as in memory, through the processor and through
``stream-rater replay --store redis+cluster://…``; a ladder's slot migrated to another master
in the middle of processing (MOVED, ASK and TRYAGAIN on the way) loses nothing; and on a
cluster with replicas, a master killed mid-stream fails over to its replica and every ladder
either equals a replay or — writes the replica missed — is stopped by `StoreLost`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished
from stream_rater.local.demo import default_data_file
from stream_rater.local.runtime import ClusterLayout, LocalRuntime
from stream_rater.offline.adapters import open_text, read_records
from stream_rater.offline.replay import replay, validated
from stream_rater.processor import Processor, StoreLost
from stream_rater.store import StateStore, open_store
from stream_rater.store.memory import MemoryStore
from stream_rater.store.redis import RedisStore, ladder_key
from stream_rater.store.redis.cluster import parse_cluster_url
from stream_rater.waiting import wait_until_async
from tests.helpers import cli

pytestmark = pytest.mark.integration

FOOTBALL = default_data_file()


def clock() -> float:
    return 1_700_000_000.0


class Cluster:
    """Admin connections to every master of the test cluster, by node id."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.nodes: dict[str, aioredis.Redis] = {}  # node id -> client, masters only

    async def connect(self) -> None:
        """Learn the masters from the first startup node's ``CLUSTER NODES``."""
        _, startup = parse_cluster_url(self.url)
        seed = aioredis.Redis(host=startup[0][0], port=startup[0][1], decode_responses=True)
        try:
            nodes = await seed.execute_command("CLUSTER NODES")
        finally:
            await seed.aclose()
        for node_id, info in nodes.items():
            if "master" in info["flags"] and info["connected"]:
                host, port = node_id.split("@")[0].rsplit(":", 1)
                self.nodes[info["node_id"]] = aioredis.Redis(host=host, port=int(port), decode_responses=True)

    async def close(self) -> None:
        """Close the admin connections."""
        for client in self.nodes.values():
            await client.aclose()

    async def slot(self, ladder: str) -> int:
        """The ladder's hash slot, as the cluster computes it (``CLUSTER KEYSLOT``)."""
        return int(
            await next(iter(self.nodes.values())).execute_command(
                "CLUSTER KEYSLOT", ladder_key(ladder, "players")
            )
        )

    async def owner(self, slot: int) -> str:
        """Id of the master that serves `slot`."""
        client = next(iter(self.nodes.values()))
        for start, end, master, *_ in await client.execute_command("CLUSTER SLOTS"):
            if start <= slot <= end:
                return master[2]
        raise AssertionError(f"slot {slot} is not served")

    async def tryagain_count(self) -> int:
        """TRYAGAIN errors the masters have answered so far."""
        total = 0
        for client in self.nodes.values():
            stats = await client.info("errorstats")
            total += stats.get("errorstat_TRYAGAIN", {}).get("count", 0)
        return total


@pytest.fixture
async def cluster(redis_cluster_url: str) -> AsyncIterator[Cluster]:
    admin = Cluster(redis_cluster_url)
    await admin.connect()
    assert len(admin.nodes) == 3
    yield admin
    await admin.close()


async def ladders_on_every_master(cluster: Cluster) -> list[str]:
    """One fresh ladder name per master, each checked with ``CLUSTER KEYSLOT``."""
    prefix, found = f"t-{uuid.uuid4().hex[:8]}", {}
    for n in count():
        name = f"{prefix}-{n}"
        found.setdefault(await cluster.owner(await cluster.slot(name)), name)
        if len(found) == len(cluster.nodes):
            return list(found.values())
    raise AssertionError("unreachable")


@functools.cache
def _football() -> tuple[MatchFinished, ...]:
    with open_text(FOOTBALL) as f:
        records = read_records([(FOOTBALL.name, f)], "football", home_effect=True)
        return tuple(validated(records, Ladders([]), on_error=pytest.fail))


def football(ladder: str, skip: int, limit: int) -> list[MatchFinished]:
    """`limit` football matches (home effect on) after the first `skip`, on `ladder`."""
    return [
        MatchFinished(m.match_id, ladder, m.finished_at, m.teams) for m in _football()[skip : skip + limit]
    ]


def trueskill(*names: str) -> Ladders:
    return Ladders([Ladder(name, "trueskill", {"draw_probability": 0.227}) for name in names])


async def everything(store: StateStore, ladder: str) -> tuple:
    """Every state, effect and the whole leaderboard of `ladder`."""
    return (
        await store.players(ladder),
        await store.players(ladder, effects=True),
        await store.leaderboard(ladder, 100_000),
    )


async def test_ladders_on_different_masters_rate_as_in_memory(redis_cluster_url: str, cluster: Cluster):
    """Three ladders, one per master, interleaved through one processor: the same events and
    states as in memory; ladders(), lookup() and ping() answer across the masters."""
    names = await ladders_on_every_master(cluster)
    per_ladder = [football(name, skip=500 * i, limit=500) for i, name in enumerate(names)]
    matches = [m for batch in zip(*per_ladder) for m in batch]
    ladders = trueskill(*names)
    memory, store = MemoryStore(), open_store(redis_cluster_url)
    try:
        out_memory: list = []
        out_cluster: list = []
        await replay(
            matches,
            Processor(ladders, memory, clock=clock),
            batch_size=200,
            on_result=lambda r: out_memory.extend(r.events),
        )
        summary = await replay(
            matches,
            Processor(ladders, store, clock=clock),
            batch_size=200,
            on_result=lambda r: out_cluster.extend(r.events),
        )
        assert summary.applied == len(matches) and out_cluster == out_memory
        for name in names:
            assert await everything(store, name) == await everything(memory, name)
        assert set(names) <= set(await store.ladders())
        player = next(iter(await memory.players(names[2])))
        found = await store.lookup(names[2], [player, "nobody"])
        assert set(found.players) == {player} and found.ranked == len(await memory.players(names[2]))
        assert (await store.lookup(names[0], [])).ranked > 0
        assert await store.ping()
        again = await replay(matches, Processor(ladders, store, clock=clock), batch_size=200)
        assert (again.applied, again.duplicates) == (0, len(matches))
    finally:
        await store.close()


#: ``stream-rater ARGS``, failing the test on a non-zero exit.
stream_rater = functools.partial(cli, check=True)


def test_cli_replay_into_the_cluster_matches_memory(redis_cluster_url: str, tmp_path: Path):
    """``replay --store redis+cluster://…`` emits what ``--store memory`` emits, and ``ratings``
    reads the states back from the cluster."""
    csv = tmp_path / "football.csv"
    with gzip.open(FOOTBALL, "rt", encoding="utf-8") as f:
        csv.write_text("".join(line for _, line in zip(range(301), f)))
    ladder = f"t-cli-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "ladders.toml"
    config.write_text(f'[ladders.{ladder}]\nmodel = "trueskill"\n')
    common = [
        "replay",
        "--format",
        "football",
        "--home-effect",
        "--ladder",
        ladder,
        "--ladders-file",
        str(config),
        str(csv),
    ]

    def events(out: Path) -> list[dict]:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        return [{k: v for k, v in row.items() if k != "processed_at"} for row in rows]

    stream_rater(*common, "--store", "memory", "--out", str(tmp_path / "memory.jsonl"))
    stream_rater(*common, "--store", redis_cluster_url, "--out", str(tmp_path / "cluster.jsonl"))
    assert events(tmp_path / "cluster.jsonl") == events(tmp_path / "memory.jsonl") != []
    rows = [
        json.loads(line)
        for line in stream_rater(
            "ratings", "--ladder", ladder, "--ladders-file", str(config), "--store", redis_cluster_url
        ).stdout.splitlines()
    ]
    last = {e["player_id"]: e["after"]["mu"] for e in events(tmp_path / "memory.jsonl")}
    assert {row["player_id"]: row["mu"] for row in rows} == last


async def migrate(cluster: Cluster, slot: int, source: str, target: str, keys: Sequence[str]) -> None:
    """``MIGRATE`` `keys` of `slot` from `source` to `target` (the slot is marked migrating)."""
    if keys:
        client = cluster.nodes[target].connection_pool.connection_kwargs
        await cluster.nodes[source].execute_command(
            "MIGRATE", client["host"], client["port"], "", 0, 5000, "KEYS", *keys
        )


async def test_a_slot_migrated_mid_stream_loses_nothing(redis_cluster_url: str, cluster: Cluster):
    """The ladder's slot moves to another master while batches are being committed — what
    ``redis-cli --cluster reshard`` does: IMPORTING/MIGRATING, MIGRATE some keys (the scripts
    get TRYAGAIN and wait), the rest (single-key reads follow ASK), SETSLOT NODE on every
    master (MOVED). The final states equal an in-memory replay; no match is lost or doubled."""
    (name,) = (await ladders_on_every_master(cluster))[:1]
    matches = football(name, skip=0, limit=1500)
    ladders = trueskill(name)
    memory, store = MemoryStore(), open_store(redis_cluster_url)
    assert isinstance(store, RedisStore)
    try:
        await replay(matches, Processor(ladders, memory, clock=clock), batch_size=100)
        processor = Processor(ladders, store, clock=clock)
        first = await replay(matches[:600], processor, batch_size=100)
        board = await store.leaderboard(name, 10)

        slot = await cluster.slot(name)
        source = await cluster.owner(slot)
        target = next(node for node in cluster.nodes if node != source)
        await cluster.nodes[target].execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source)
        await cluster.nodes[source].execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target)
        players = ladder_key(name, "players")
        await migrate(cluster, slot, source, target, [players])  # the scripts' keys are now split

        tryagain = await cluster.tryagain_count()
        middle = asyncio.create_task(replay(matches[600:1000], processor, batch_size=100))
        # More TRYAGAIN answers than redis-py's own retries of one command: the store retried.
        beyond = tryagain + 2 * RedisCluster.RedisClusterRequestTTL
        await wait_until_async(
            lambda: _more(cluster, beyond),
            "the store retrying a script refused with TRYAGAIN",
            20,
            interval=0.02,
        )
        assert not middle.done()
        rest = await cluster.nodes[source].execute_command("CLUSTER GETKEYSINSLOT", slot, 100_000)
        await migrate(cluster, slot, source, target, rest)
        assert await store.leaderboard(name, 10) == board  # answered by the target after ASK
        assert not middle.done()
        for node in (target, source, *(n for n in cluster.nodes if n not in (source, target))):
            await cluster.nodes[node].execute_command("CLUSTER SETSLOT", slot, "NODE", target)
        second = await asyncio.wait_for(middle, 60)

        third = await replay(matches[1000:], processor, batch_size=100)
        assert await cluster.owner(slot) == target
        assert first.applied + second.applied + third.applied == len(matches)
        assert await everything(store, name) == await everything(memory, name)
        assert (await store.read(name, [], [], [])).watermark == len(matches)
    finally:
        await store.close()


async def _more(cluster: Cluster, than: int) -> bool:
    return await cluster.tryagain_count() > than


def test_the_local_cluster_with_replicas_starts_joined_and_stops_by_pid():
    """`LocalRuntime(redis=ClusterLayout(3, replicas=1))`: six nodes, three masters each with
    a replica whose link is up; the store answers on its URL; stop() ends every PID it started."""
    with LocalRuntime(broker=False, redis=ClusterLayout(3, replicas=1)) as runtime:
        assert runtime.redis_url.startswith("redis+cluster://") and len(runtime.cluster_nodes) == 6
        host, port = runtime.cluster_nodes[0].split(":")
        with redis.Redis(host=host, port=int(port), decode_responses=True) as client:
            flags = [info["flags"] for info in client.execute_command("CLUSTER NODES").values()]
        assert sum("master" in f for f in flags) == 3 and sum("slave" in f for f in flags) == 3
        store = open_store(runtime.redis_url)
        assert asyncio.run(_ping_and_close(store))
        pids = list(runtime.pids.values())
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def _ping_and_close(store: StateStore) -> bool:
    try:
        return await store.ping()
    finally:
        await store.close()


def test_a_cluster_url_at_a_plain_redis_is_one_line_naming_redis(redis_url: str):
    """``--store redis+cluster://`` pointed at a Redis without cluster mode: exit 1, one line."""
    plain = redis_url.split("://", 1)[1].split("/", 1)[0]
    result = cli("ratings", "--ladder", "default", "--store", f"redis+cluster://{plain}", timeout=60)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("stream-rater ratings: Redis: ") and "Cluster mode is not enabled" in line


# --------------------------------------------------------------------------------------------
# Failover: a master dies and its replica takes over. Redis replicates asynchronously, so the
# replica may lack the last writes the master acknowledged; the processor's watermark check
# must then raise `StoreLost` for the ladder — the states may never differ silently.


@dataclass
class Node:
    """One node of the local cluster: its address, PID, id and (for a replica) its master's id."""

    address: str
    pid: int
    node_id: str
    master_id: str | None

    def client(self) -> aioredis.Redis:
        host, port = self.address.rsplit(":", 1)
        return aioredis.Redis(host=host, port=int(port), decode_responses=True)


def nodes_of(runtime: LocalRuntime) -> dict[str, Node]:
    """Every node of `runtime`'s cluster by id (taken while all of them run)."""
    pids = {address: runtime.pids[f"redis-node-{i}"] for i, address in enumerate(runtime.cluster_nodes)}
    host, port = runtime.cluster_nodes[0].rsplit(":", 1)
    with redis.Redis(host=host, port=int(port), decode_responses=True) as client:
        listed = client.execute_command("CLUSTER NODES")
    return {
        info["node_id"]: Node(
            address.split("@")[0],
            pids[address.split("@")[0]],
            info["node_id"],
            None if info["master_id"] == "-" else info["master_id"],
        )
        for address, info in listed.items()
    }


def replica_of(nodes: dict[str, Node], master: str) -> Node:
    (replica,) = (node for node in nodes.values() if node.master_id == master)
    return replica


async def is_master(node: Node) -> bool:
    """Whether `node` was promoted and its cluster is serving every slot again."""
    client = node.client()
    try:
        role = (await client.info("replication"))["role"]
        return role == "master" and (await client.cluster("INFO"))["cluster_state"] == "ok"
    finally:
        await client.aclose()


async def in_sync(master: Node, replica: Node) -> bool:
    """Whether `replica` has processed everything `master` wrote so far."""
    clients = master.client(), replica.client()
    try:
        offsets = [(await c.info("replication"))["master_repl_offset"] for c in clients]
        return offsets[0] == offsets[1]
    finally:
        for client in clients:
            await client.aclose()


async def stream_like_a_worker(
    processor: Processor,
    matches: Sequence[MatchFinished],
    lost: dict[str, str],
    *,
    batch_size: int = 100,
    before_batch: Callable[[int], None] = lambda start: None,
    timeout: float = 45.0,
) -> None:
    """Apply `matches` in batches as a worker's pipeline does: any error but a lost store
    retries the batch (the dead master's connection, CLUSTERDOWN while the replica takes over,
    and redis-py's own slips mid-failover, such as an AttributeError on a connection torn
    down under it: the worker holds the batch on every one); a `StoreLost` stops that ladder
    (recorded in `lost`) and the others go on."""
    deadline = time.monotonic() + timeout
    for start in range(0, len(matches), batch_size):
        before_batch(start)
        while True:
            batch = [m for m in matches[start : start + batch_size] if m.ladder not in lost]
            try:
                await processor.process(batch)
                break
            except StoreLost as exc:
                lost[exc.ladder] = str(exc)
            except Exception:  # as the worker: held and retried (service/batch_handler.py)
                assert time.monotonic() < deadline, "the cluster did not recover from the failover"
                await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def on_the_cluster(
    runtime: LocalRuntime,
) -> AsyncIterator[tuple[str, dict[str, Node], Cluster, StateStore]]:
    """The cluster's URL and nodes, an admin connection and a store on it (closed after)."""
    url = runtime.redis_url
    admin = Cluster(url)
    await admin.connect()
    store = open_store(url)
    try:
        yield url, nodes_of(runtime), admin, store
    finally:
        await store.close()
        await admin.close()


async def test_a_master_killed_mid_stream_fails_over_and_nothing_differs_silently(
    redis_cluster_with_replicas: LocalRuntime,
):
    """Three ladders (one per master) stream through one processor; after a few batches the
    master of the first ladder gets SIGKILL and the cluster fails over to its replica by
    itself (node timeout 3 s) while batches keep coming. Every ladder then either equals an
    in-memory replay of all its matches, or — only the failed-over master's ladder, and only if
    its replica missed acknowledged writes — was stopped by `StoreLost`. Never a silent
    difference."""
    async with on_the_cluster(redis_cluster_with_replicas) as (_url, nodes, admin, store):
        names = await ladders_on_every_master(admin)
        victim = await admin.owner(await admin.slot(names[0]))
        successor = replica_of(nodes, victim)
        per_ladder = {name: football(name, skip=400 * i, limit=400) for i, name in enumerate(names)}
        matches = [m for batch in zip(*per_ladder.values()) for m in batch]
        ladders = trueskill(*names)
        memory = MemoryStore()
        await replay(matches, Processor(ladders, memory, clock=clock), batch_size=100)

        def kill_mid_stream(start: int) -> None:
            if start == 400:
                os.kill(nodes[victim].pid, signal.SIGKILL)

        lost: dict[str, str] = {}
        await stream_like_a_worker(
            Processor(ladders, store, clock=clock), matches, lost, before_batch=kill_mid_stream
        )
        assert await is_master(successor), "the replica did not take over"
        assert set(lost) <= {names[0]}, f"a ladder on a master that did not fail over was lost: {lost}"
        for name in names:
            if name in lost:
                assert "matches applied" in lost[name]  # detected: the operator rebuilds it from the topic
                continue
            assert await everything(store, name) == await everything(memory, name), name
            assert (await store.read(name, [], [], [])).watermark == len(per_ladder[name])
        print(f"failover of {nodes[victim].address}: {'detected: ' + lost[names[0]] if lost else 'survived'}")


async def rated(store: StateStore, ladder: str) -> tuple:
    """`everything` without the versions (they count commits, which a rebuild adds)."""
    players, effects, board = await everything(store, ladder)
    return (
        {p: s._replace(version=0) for p, s in players.items()},
        {e: s._replace(version=0) for e, s in effects.items()},
        board,
    )


async def test_writes_the_replica_missed_are_detected_after_the_failover(
    redis_cluster_with_replicas: LocalRuntime,
):
    """Forces the loss that asynchronous replication allows: the ladder's replica is stopped
    (SIGSTOP) and its link cut (``CLIENT KILL TYPE replica``), the master acknowledges 200
    more matches, dies (SIGKILL), and the replica takes over (``CLUSTER FAILOVER FORCE``)
    without them. The next batch raises `StoreLost` naming both watermarks and writes nothing;
    after the ladder is rebuilt from its history (what ``replay --from-topic`` does) the same
    processor goes on and the states equal a replay of every match."""
    async with on_the_cluster(redis_cluster_with_replicas) as (_url, nodes, admin, store):
        (name,) = (await ladders_on_every_master(admin))[:1]
        master = nodes[await admin.owner(await admin.slot(name))]
        replica = replica_of(nodes, master.node_id)
        matches = football(name, skip=0, limit=600)
        ladders = trueskill(name)
        processor = Processor(ladders, store, clock=clock)
        await replay(matches[:300], processor, batch_size=100)
        await wait_until_async(lambda: in_sync(master, replica), "the replica in sync", 10, interval=0.02)

        os.kill(replica.pid, signal.SIGSTOP)
        try:
            client = master.client()
            try:
                assert await client.execute_command("CLIENT KILL", "TYPE", "replica") == 1
            finally:
                await client.aclose()
            await replay(matches[300:500], processor, batch_size=100)  # acknowledged by the master alone
            os.kill(master.pid, signal.SIGKILL)
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        client = replica.client()
        try:
            await client.execute_command("CLUSTER FAILOVER", "FORCE")
        finally:
            await client.aclose()
        await wait_until_async(lambda: is_master(replica), "the replica promoted", 20, interval=0.02)

        lost: dict[str, str] = {}
        await stream_like_a_worker(processor, matches[500:], lost)
        assert list(lost) == [name] and "the store shows 300 matches applied, 500 were" in lost[name]
        assert (await store.read(name, [], [], [])).watermark == 300, (
            "nothing may be applied on top of the loss"
        )

        await replay(matches[:500], Processor(ladders, store, clock=clock))  # the operator's rebuild
        await stream_like_a_worker(processor, matches[500:], {})
        memory = MemoryStore()
        await replay(matches, Processor(ladders, memory, clock=clock))
        assert await rated(store, name) == await rated(memory, name)
