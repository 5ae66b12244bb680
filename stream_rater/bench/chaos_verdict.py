"""The verdict of ``stream-rater bench chaos``, read from the topics and the store after the
run, not from the workers' counters. Six oracles:

1. ``states``: every ladder's stored states equal a replay of its matches topic with its
   voids and parameters (`offline.verify.verify`, to 1e-9);
2. ``events``: every valid match has each of its players' rating-changed events on the
   updates topic (at least once) — or, for a match voided before a worker reached it and
   un-voided later, a correction event of each player naming it among its ``unvoided`` —
   each ``event_id`` with one payload (``processed_at`` aside), and per player the events'
   ``before``/``after`` chain is unbroken in log order;
3. ``dead-letters``: no valid match is in the DLQ, and every invalid record of the matches
   topic is in it (by its origin partition and offset) — once, or again after a redelivery,
   which is counted (`_dead_letters`);
4. ``corrections``: the store's voids and parameter overrides are what the correction
   commands that succeeded asked for (and oracle 1 replays with them);
5. ``readiness``: ``/readyz`` answered 503 in every sample where the worker's gauges said a
   ladder was held (stopped, or Redis refusing writes) before and after it;
6. ``checkpoints``: per ladder, ``verify`` from the newest usable checkpoint, and a recovery
   from it into an empty store, equal the live states; no torn checkpoint is listed
   (`bench.chaos_checkpoints`). Oracle 1 replays from the topic's start, without them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stream_rater.bench.chaos_checkpoints import judge_checkpoints
from stream_rater.config.ladders import Ladders, load_ladders
from stream_rater.config.settings import Settings
from stream_rater.kafka import LogRecord, read_log
from stream_rater.offline.verify import verify
from stream_rater.store import StateStore, open_store

if TYPE_CHECKING:
    from stream_rater.bench.chaos_schedule import Fault

#: Seconds the quiet period may last: until the workers have committed every record.
QUIET_TIMEOUT = 300.0
_SHOWN = 5


@dataclass
class Correction:
    """A correction command of the run and how it ended: ``done``, ``refused`` (it exited
    non-zero: nothing changed) or ``unknown`` (killed)."""

    kind: str
    ladder: str
    match: str
    params: dict[str, float]
    outcome: str = ""
    detail: str = ""
    #: When the command started and ended (epoch seconds).
    started: float = 0.0
    ended: float = 0.0
    #: Rating-changed records written while it ran whose event id the topic already held (a
    #: normal correction sends none; a fault's redelivery may).
    duplicates: int = 0


@dataclass
class ReadinessLog:
    """The readiness samples: how many, how many with a ladder held, and those answered 200."""

    samples: int = 0
    held: int = 0
    violations: list[str] = field(default_factory=list)

    def sample(self, port: int, held: bool, status: int) -> None:
        self.samples += 1
        self.held += held
        if held and status == 200:
            self.violations.append(f"worker on port {port}: a ladder held and /readyz 200")


@dataclass(frozen=True, slots=True)
class Oracle:
    """One oracle's result."""

    passed: bool
    detail: str


@dataclass
class Verdict:
    """Every oracle's result and what the run did."""

    oracles: dict[str, Oracle]
    matches_applied: int
    records: dict[str, int]
    faults: list[tuple[Fault, str]]
    corrections: list[Correction]

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.oracles.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "matches_applied": self.matches_applied,
            "records": self.records,
            "oracles": {name: {"passed": o.passed, "detail": o.detail} for name, o in self.oracles.items()},
            "corrections": [c.__dict__ for c in self.corrections],
            "fault_outcomes": _outcomes([(f.kind, outcome) for f, outcome in self.faults]),
        }

    def lines(self) -> list[str]:
        out = [f"records: {', '.join(f'{k} {v:,}' for k, v in self.records.items())}"]
        out.append(f"matches applied: {self.matches_applied:,}")
        out += [
            f"correction {c.kind} {c.ladder} {c.match}: {c.outcome} {c.detail}; "
            f"{c.duplicates} duplicate events while it ran"
            for c in self.corrections
        ]
        for name, oracle in self.oracles.items():
            out.append(f"oracle {name}: {'passed' if oracle.passed else 'FAILED'} — {oracle.detail}")
        out.append("verdict: " + ("every oracle passed" if self.passed else "VIOLATION"))
        return out


def _outcomes(pairs: Sequence[tuple[str, str]]) -> dict[str, int]:
    """``kind: outcome`` → how many faults of that kind ended so."""
    counted: dict[str, int] = defaultdict(int)
    for kind, outcome in pairs:
        counted[f"{kind}: {outcome.split(':')[0]}"] += 1
    return dict(sorted(counted.items()))


async def judge(
    settings: Settings,
    env: Mapping[str, str],
    names: Sequence[str],
    corrections: list[Correction],
    readiness: ReadinessLog,
    faults: list[tuple[Fault, str]],
    torn: Sequence[str] = (),
) -> Verdict:
    """Wait for the quiet (the workers caught up), then run every oracle (`torn`: the
    checkpoints torn writes left, ``ladder id``)."""

    ladders = load_ladders(None, env)
    store = open_store(settings.redis_url)
    try:
        states = await _states(settings, ladders, names, store)
        matches, _ = await read_log(settings, settings.topic_matches)
        updates, _ = await read_log(settings, settings.topic_updates)
        dead, _ = await read_log(settings, settings.topic_dlq)
        valid, invalid = _classify(matches)
        events, applied = _events(valid, updates)
        count_duplicates(updates, corrections)
        oracles = {
            "states": states,
            "events": events,
            "dead-letters": _dead_letters(valid, invalid, dead),
            "corrections": await _corrections(store, names, corrections),
            "readiness": _readiness(readiness),
            "checkpoints": Oracle(
                *await judge_checkpoints(settings, ladders, names, store, torn, QUIET_TIMEOUT)
            ),
        }
    finally:
        await store.close()
    records = {
        "matches topic": len(matches),
        "valid": len({v["match_id"] for v in valid.values()}),
        "invalid": len(invalid),
        "rating-changed": len(updates),
        "dead letters": len(dead),
    }
    return Verdict(oracles, applied, records, faults, corrections)


async def _states(settings: Settings, ladders: Ladders, names: Sequence[str], store: StateStore) -> Oracle:
    """Oracle 1: `verify` of every ladder."""
    failures, players = [], 0
    for name in names:
        report = await verify(settings, ladders, name, store, wait=QUIET_TIMEOUT, sink=None)
        players += report.players
        if report.differences or report.skipped or not report.caught_up:
            failures += [line for line in report.lines() if not line.startswith("warning: ladder")][:_SHOWN]
            if not report.caught_up:
                failures.append(f"ladder {name!r}: the workers never caught up")
    if failures:
        return Oracle(False, "; ".join(failures[:_SHOWN]))
    return Oracle(True, f"{len(names)} ladders, {players:,} players, each equal to a replay of its topic")


def _classify(matches: list[LogRecord]) -> tuple[dict[tuple[int, int], dict[str, Any]], set[tuple[int, int]]]:
    """The matches topic's valid match records (by (partition, offset)) and its invalid or
    oversized ones, as the nemesis made them (by their ids: ``m-``, ``bad-``, ``big-``);
    season records are neither."""
    valid: dict[tuple[int, int], dict[str, Any]] = {}
    invalid: set[tuple[int, int]] = set()
    for record in matches:
        event = json.loads(record.value)
        where = (record.partition, record.offset)
        if str(event["match_id"]).startswith(("bad-", "big-")):
            invalid.add(where)
        elif event.get("kind") != "season":
            valid[where] = event
    return valid, invalid


def _events(valid: Mapping[tuple[int, int], dict[str, Any]], updates: list[LogRecord]) -> tuple[Oracle, int]:
    """Oracle 2, and how many valid matches have all their events."""
    payloads: dict[str, set[bytes]] = defaultdict(set)
    unvoided: set[str] = set()
    for record in updates:
        event = json.loads(record.value)
        payloads[event["event_id"]].add(json.dumps({**event, "processed_at": None}, sort_keys=True).encode())
        if event.get("kind") == "correction":
            unvoided.update(f"{mid}:{event['player_id']}" for mid in event["correction"].get("unvoided", ()))
    problems = [f"event {eid} has {len(p)} payloads" for eid, p in payloads.items() if len(p) > 1]
    expected = {
        m["match_id"]: [p["id"] for team in m["teams"] for p in team["players"]] for m in valid.values()
    }
    missing = [
        f"{mid}:{p}"
        for mid, ps in expected.items()
        for p in ps
        if f"{mid}:{p}" not in payloads and f"{mid}:{p}" not in unvoided
    ]
    problems += [f"no event {eid}" for eid in missing]
    chains, breaks = broken_chains(updates)
    problems += breaks
    applied = len(set(expected) - {eid.rsplit(":", 1)[0] for eid in missing})
    if problems:
        return Oracle(False, f"{len(problems)} problems: " + "; ".join(problems[:_SHOWN])), applied
    detail = (
        f"{len(payloads):,} event ids on the topic ({len(updates):,} records), every valid match's "
        f"events there with one payload each, {chains:,} players' chains unbroken"
    )
    return Oracle(True, detail), applied


def count_duplicates(updates: Iterable[LogRecord], corrections: Sequence[Correction]) -> None:
    """Set each correction's `duplicates`: the records of `updates` (in partition and offset
    order; one event id is always on one partition) that repeat an event id, timestamped while
    the correction ran."""
    seen: set[str] = set()
    for record in updates:
        event_id = json.loads(record.value)["event_id"]
        if event_id not in seen:
            seen.add(event_id)
            continue
        for c in corrections:
            c.duplicates += c.started * 1000 <= record.timestamp <= c.ended * 1000


def broken_chains(updates: Iterable[LogRecord]) -> tuple[int, list[str]]:
    """How many players' chains `updates` (rating-updates records in log order, keyed by
    player) hold, and where a chain breaks: each event id counted at its first occurrence (a
    redelivery's duplicate later is no break), its ``before`` must equal the ``after`` of the
    player's event before it."""
    seen: set[str] = set()
    last: dict[bytes | None, dict[str, Any]] = {}
    breaks = []
    for record in updates:
        event = json.loads(record.value)
        if event["event_id"] in seen:
            continue
        seen.add(event["event_id"])
        previous = last.get(record.key)
        if previous is not None and event["before"] != previous["after"]:
            breaks.append(f"{record.key!r}: {event['event_id']} before != {previous['event_id']} after")
        last[record.key] = event
    return len(last), breaks


def _dead_letters(
    valid: Mapping[tuple[int, int], dict[str, Any]], invalid: set[tuple[int, int]], dead: list[LogRecord]
) -> Oracle:
    """Oracle 3: the DLQ holds every invalid record and no valid one. A record dead-lettered
    twice is counted, not failed: the worker produces a batch's dead letters before it commits
    the batch's offsets, and nothing deduplicates them, so a crash between the two dead-letters
    the redelivered record again (the DLQ is at least once; its ``sr-origin-*`` headers tell)."""
    origins: dict[tuple[int, int], int] = defaultdict(int)
    for record in dead:
        headers = {name: value.decode() for name, value in record.headers}
        origins[(int(headers["sr-origin-partition"]), int(headers["sr-origin-offset"]))] += 1
    problems = [f"valid {valid[w]['match_id']} dead-lettered" for w in origins if w in valid]
    problems += [f"invalid record at {p}@{o} not dead-lettered" for p, o in invalid if not origins[(p, o)]]
    problems += [
        f"dead letter from {p}@{o}, no record of the run"
        for p, o in origins
        if (p, o) not in valid and (p, o) not in invalid
    ]
    again = sum(origins[w] > 1 for w in invalid)
    if problems:
        return Oracle(False, f"{len(problems)} problems: " + "; ".join(sorted(problems)[:_SHOWN]))
    return Oracle(
        True,
        f"{len(invalid)} invalid records dead-lettered, no valid match; {again} of them twice or more "
        "(redelivered after a fault: the DLQ is at least once)",
    )


async def _corrections(store: StateStore, names: Sequence[str], corrections: list[Correction]) -> Oracle:
    """Oracle 4: the store's voids and parameters are those the succeeded commands asked for;
    where they differ, only by what a command of uncertain outcome (refused after trying, or
    killed) might have done."""
    problems = []
    for name in names:
        asked = _asked(c for c in corrections if c.ladder == name and c.outcome == "done")
        uncertain = [c for c in corrections if c.ladder == name and c.outcome not in ("done", "")]
        stored = set(await store.voids(name))
        live = {k: float(v) for k, v in ((await store.generations(name)).params or {}).items()}
        odd_voids = (stored ^ asked[0]) - {c.match for c in uncertain if c.kind in ("void", "unvoid")}
        odd_params = live != asked[1] and not any(c.kind == "rerate" for c in uncertain)
        if odd_voids or odd_params:
            problems.append(
                f"ladder {name!r}: voids {sorted(stored)} params {live}, asked {sorted(asked[0])} {asked[1]}"
            )
    done = sum(c.outcome == "done" for c in corrections if c.kind != "season")
    uncertain_count = sum(c.outcome not in ("done", "") for c in corrections)
    if problems:
        return Oracle(False, "; ".join(problems))
    return Oracle(
        True,
        f"{done} corrections took effect as asked ({uncertain_count} refused or killed, none half-done); "
        "the states equal a replay with them (oracle states)",
    )


def _asked(done: Iterable[Correction]) -> tuple[set[str], dict[str, float]]:
    """The voids and parameter overrides the corrections `done`, in order, leave."""
    voided: set[str] = set()
    params: dict[str, float] = {}
    for c in done:
        if c.kind == "void":
            voided.add(c.match)
        elif c.kind == "unvoid":
            voided.discard(c.match)
        elif c.kind == "rerate":
            params = {**params, **c.params}
    return voided, params


def _readiness(readiness: ReadinessLog) -> Oracle:
    """Oracle 5: no sample of a held ladder answered 200."""
    detail = f"{readiness.samples:,} samples, {readiness.held:,} with a ladder held"
    if readiness.violations:
        return Oracle(False, f"{detail}: {len(readiness.violations)} answered 200: {readiness.violations[0]}")
    return Oracle(True, f"{detail}, each answered 503")
