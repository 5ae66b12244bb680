"""The nemesis's seeded plan for ``stream-rater bench chaos``: the matches it publishes (valid
ones on several ladders and shapes, invalid and oversized ones mixed in), and the schedule of
faults — every few seconds several at a time, each healed after its duration, never two on one
target at once, every kind at least once early in the run. The same seed gives the same plan."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

#: Ladder → its matches' shape: players per team and teams per match.
LADDER_SHAPES: dict[str, tuple[int, int]] = {
    "duel-a": (1, 2),
    "duel-b": (1, 2),
    "team": (2, 2),
    "ffa": (1, 4),
}
PLAYERS_PER_LADDER = 300
#: Worker slots beyond the run's workers that ``worker-add`` takes turns starting.
EXTRA_WORKER_SLOTS = 2
#: Every INVALID_EVERY-th record is invalid, every OVERSIZED_EVERY-th larger than the limit.
INVALID_EVERY = 47
OVERSIZED_EVERY = 211
OVERSIZED_BYTES = 70 * 1024
#: ``finished_at`` of record 0 (epoch seconds); record i finished i / rate seconds later.
EPOCH = 1_780_000_000.0

WORKER_FAULTS = (
    "worker-kill",
    "worker-pause",
    "worker-restart",
    "worker-remove",
    "redis-partition",
    "broker-partition",
)
BROKER_FAULTS = ("broker-kill", "broker-freeze")
REDIS_FAULTS = ("redis-freeze", "redis-refuse", "redis-restart")
CORRECTIONS = ("void", "unvoid", "rerate", "season")
#: The checkpoint loop killed (and started again), frozen, cut off from Redis; a one-shot
#: checkpoint of a ladder killed between its chunks and its manifest (`bench.chaos_checkpoints`).
CHECKPOINT_FAULTS = ("checkpoint-kill", "checkpoint-pause", "checkpoint-cut", "checkpoint-tear")
#: Every kind of fault the nemesis injects.
KINDS = (*WORKER_FAULTS, "worker-add", *BROKER_FAULTS, *REDIS_FAULTS, *CORRECTIONS, *CHECKPOINT_FAULTS)
#: The kinds only a cluster of Apache Kafka brokers can take: a broker restarted from its log
#: dir, and a worker cut off from every broker (per-worker listeners advertised behind proxies).
APACHE_KAFKA_ONLY = ("broker-kill", "broker-partition")


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: injected `at` seconds into the run on `target` (a worker slot, a broker
    index, a ladder), healed `duration` seconds later; `match` is the record index a void or
    unvoid names."""

    at: float
    kind: str
    target: int
    duration: float
    ladder: str = ""
    match: int = -1

    def resource(self) -> str:
        """What the fault occupies: no two faults on one resource overlap."""
        if self.kind in WORKER_FAULTS:
            return f"worker-{self.target}"
        if self.kind in BROKER_FAULTS:
            return "broker"
        if self.kind in REDIS_FAULTS:
            return "redis"
        if self.kind in CHECKPOINT_FAULTS:
            return "checkpoint-tear" if self.kind == "checkpoint-tear" else "checkpointer"
        return "corrections" if self.kind in CORRECTIONS else f"extra-{self.target}"

    def line(self) -> str:
        what = {"ladder": self.ladder, "match": match_id(self.match)} if self.match >= 0 else {}
        where = self.ladder if self.ladder else f"#{self.target}"
        extra = f" {what['match']}" if what else ""
        return f"{self.at:7.1f}s  {self.kind:<16}{where}{extra}  for {self.duration:.1f}s"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def match_id(index: int) -> str:
    """The match id of record `index`: ``m-``, ``bad-`` (invalid) or ``big-`` (oversized)."""
    return f"{record_kind(index)}-{index}"


def record_kind(index: int) -> str:
    """``big`` for an oversized record, ``bad`` for an invalid one, else ``m``."""
    if index % OVERSIZED_EVERY == OVERSIZED_EVERY - 1:
        return "big"
    return "bad" if index % INVALID_EVERY == INVALID_EVERY - 1 else "m"


def ladder_of(index: int) -> str:
    """The ladder of record `index` (they take turns)."""
    return list(LADDER_SHAPES)[index % len(LADDER_SHAPES)]


def match_record(index: int, rate: float, seed: int) -> dict[str, Any]:
    """Record `index` of the run: a valid match of its ladder's shape, or an invalid or
    oversized one (`record_kind`); the same for the same seed."""
    rng = random.Random(seed * 1_000_003 + index)
    ladder = ladder_of(index)
    size, teams = LADDER_SHAPES[ladder]
    chosen = rng.sample(range(PLAYERS_PER_LADDER), size * teams)
    ranks = list(range(teams))
    rng.shuffle(ranks)
    if rng.random() < 0.1:
        ranks[1] = ranks[0]  # a draw (a tie for first place in a free-for-all)
    event: dict[str, Any] = {
        "match_id": match_id(index),
        "ladder": ladder,
        "finished_at": EPOCH + index / rate,
        "teams": [
            {"rank": ranks[t], "players": [{"id": f"p{p}"} for p in chosen[t * size : (t + 1) * size]]}
            for t in range(teams)
        ],
    }
    kind = record_kind(index)
    if kind == "big":
        event["note"] = "x" * OVERSIZED_BYTES
    elif kind == "bad":
        _break(event, rng)
    return event


def _break(event: dict[str, Any], rng: random.Random) -> None:
    """Make `event` invalid in one of a few ways."""
    way = rng.randrange(3)
    if way == 0:
        event["teams"] = event["teams"][:1]  # one team
    elif way == 1:
        event["teams"][1]["players"][0] = dict(event["teams"][0]["players"][0])  # a player twice
    else:
        event["finished_at"] = "not a time"


def draw_schedule(
    seed: int, seconds: float, workers: int, brokers: int, *, apache_kafka: bool, rate: float
) -> list[Fault]:
    """The faults of a run of `seconds`: a round every 2–5 s of 1–3 faults lasting 1–6 s, the
    last healed 15 s before the end; the first rounds go through every kind once (shuffled)."""
    rng = random.Random(seed)
    kinds = [k for k in KINDS if apache_kafka or k not in APACHE_KAFKA_ONLY]
    pending = rng.sample(kinds, len(kinds))  # popped from the end: the void before the unvoid
    if pending.index("unvoid") > pending.index("void"):
        pending.remove("unvoid")
        pending.insert(0, "unvoid")
    faults: list[Fault] = []
    busy: dict[str, float] = {}
    at = 8.0
    while at < seconds - 25:
        for _ in range(rng.randint(1, 3)):
            kind = pending.pop() if pending else rng.choice(kinds)
            fault = _drawn(rng, kind, at, workers, brokers, rate, faults)
            if busy.get(fault.resource(), 0.0) > at or at + fault.duration > seconds - 15:
                if kind not in [f.kind for f in faults]:
                    pending.insert(0, kind)  # its first turn comes again
                continue
            busy[fault.resource()] = at + fault.duration + (20.0 if kind in CORRECTIONS else 1.0)
            faults.append(fault)
        at += rng.uniform(2.0, 5.0)
    return faults


def _drawn(
    rng: random.Random, kind: str, at: float, workers: int, brokers: int, rate: float, before: list[Fault]
) -> Fault:
    """A fault of `kind` at `at`, its target and duration drawn."""
    duration = round(rng.uniform(1.0, 6.0), 1)
    target = rng.randrange(brokers if kind in BROKER_FAULTS else workers)
    if kind in CHECKPOINT_FAULTS:
        target = 0
    if kind == "worker-add":
        target = workers + len([f for f in before if f.kind == "worker-add"]) % EXTRA_WORKER_SLOTS
    if kind == "checkpoint-tear":
        return Fault(round(at, 1), kind, 0, 0.0, rng.choice(list(LADDER_SHAPES)))
    if kind not in CORRECTIONS:
        return Fault(round(at, 1), kind, target, duration)
    if kind == "unvoid":
        voids = [f for f in before if f.kind == "void"]
        last = voids[-1] if voids else None
        return Fault(
            round(at, 1), kind, 0, 0.0, last.ladder if last else ladder_of(0), last.match if last else 0
        )
    ladder = rng.choice(list(LADDER_SHAPES))
    match = -1
    if kind == "void":  # a valid match of the ladder published at least 10 s before
        latest = max(0, int((at - 10.0) * rate))
        match = rng.randrange(latest + 1)
        while ladder_of(match) != ladder or record_kind(match) != "m":
            match += 1
    return Fault(round(at, 1), kind, 0, 0.0, ladder, match)
