"""``bench chaos``'s plan and oracles without services: the schedule is the seed's, covers every
kind and never overlaps two faults on one target; each oracle over the topics fails on the
violation it exists for."""

from __future__ import annotations

import json
from collections import defaultdict

from stream_rater.bench.chaos_schedule import KINDS, draw_schedule, match_record, record_kind
from stream_rater.bench.chaos_verdict import (
    Correction,
    ReadinessLog,
    Verdict,
    _dead_letters,
    _events,
    _readiness,
    count_duplicates,
)
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import ValidationError, parse_match
from stream_rater.kafka import LogRecord


def schedule(seed: int = 7, minutes: float = 2.5):
    return draw_schedule(seed, minutes * 60, 2, 3, apache_kafka=True, rate=300)


def test_the_schedule_is_the_seeds_covers_every_kind_and_heals_before_the_end():
    faults = schedule()
    assert faults == schedule() and faults != schedule(seed=8)
    assert {f.kind for f in faults} == set(KINDS)
    assert all(f.at + f.duration <= 2.5 * 60 - 15 for f in faults)
    busy: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for f in faults:
        for start, end in busy[f.resource()]:
            assert f.at >= end or f.at + f.duration <= start, f"{f} overlaps on {f.resource()}"
        busy[f.resource()].append((f.at, f.at + f.duration))


def test_records_are_valid_unless_marked_invalid_or_oversized():
    ladders = Ladders([Ladder(name, "trueskill") for name in ("duel-a", "duel-b", "team", "ffa")])
    kinds = defaultdict(int)
    for i in range(500):
        event = match_record(i, 300.0, 7)
        kinds[record_kind(i)] += 1
        assert event == match_record(i, 300.0, 7)
        if record_kind(i) == "bad":
            try:
                parse_match(event, ladders)
            except ValidationError:
                continue
            raise AssertionError(f"record {i} should be invalid: {event}")
        if record_kind(i) == "big":
            assert len(json.dumps(event)) > 64 * 1024
        else:
            parse_match(event, ladders)
    assert kinds["bad"] > 5 and kinds["big"] >= 2


def record(partition: int, offset: int, value: dict, key: bytes | None = None, headers=()) -> LogRecord:
    return LogRecord(partition, offset, 0, key, json.dumps(value).encode(), tuple(headers))


def change(match: str, player: str, before: float, after: float) -> dict:
    return {
        "event_id": f"{match}:{player}",
        "match_id": match,
        "player_id": player,
        "before": {"mu": before},
        "after": {"mu": after},
        "processed_at": "now",
    }


VALID = {
    (0, 0): {"match_id": "m-0", "teams": [{"players": [{"id": "a"}]}, {"players": [{"id": "b"}]}]},
    (0, 1): {"match_id": "m-1", "teams": [{"players": [{"id": "a"}]}, {"players": [{"id": "b"}]}]},
}
GOOD = [
    record(0, 0, change("m-0", "a", 25, 26), b"l:a"),
    record(0, 1, change("m-0", "b", 25, 24), b"l:b"),
    record(0, 2, {**change("m-0", "a", 25, 26), "processed_at": "later"}, b"l:a"),  # a redelivery
    record(0, 3, change("m-1", "a", 26, 27), b"l:a"),
    record(0, 4, change("m-1", "b", 24, 23), b"l:b"),
]


def test_the_events_oracle_fails_on_a_missing_event_a_second_payload_or_a_broken_chain():
    oracle, applied = _events(VALID, GOOD)
    assert oracle.passed and applied == 2, oracle.detail
    missing, applied = _events(VALID, GOOD[:-1])
    assert not missing.passed and "no event m-1:b" in missing.detail and applied == 1
    other = [*GOOD, record(0, 5, change("m-0", "b", 25, 24.5), b"l:b")]
    assert "2 payloads" in _events(VALID, other)[0].detail
    broken = [*GOOD[:3], record(0, 3, change("m-1", "a", 25, 27), b"l:a"), GOOD[4]]
    assert "before !=" in _events(VALID, broken)[0].detail


def unvoid(player: str, before: float, after: float, unvoided: list[str]) -> dict:
    return {
        **change("rerate:l:2", player, before, after),
        "kind": "correction",
        "correction": {"reason": "unvoid", "voided": [], "unvoided": unvoided},
    }


def test_a_match_voided_before_it_was_applied_counts_by_its_unvoids_correction_events():
    """m-1 was voided before a worker reached it (no live event), then un-voided: each player's
    correction event naming it stands for its events; a correction naming another match does not."""
    corrected = [*GOOD[:3], record(0, 3, unvoid("a", 26, 27, ["m-1"]), b"l:a")]
    late = [*corrected, record(0, 4, unvoid("b", 24, 23, ["m-1"]), b"l:b")]
    oracle, applied = _events(VALID, late)
    assert oracle.passed and applied == 2, oracle.detail
    other = [*corrected, record(0, 4, unvoid("b", 24, 23, ["m-9"]), b"l:b")]
    assert "no event m-1:b" in _events(VALID, other)[0].detail


def dead(partition: int, offset: int) -> LogRecord:
    headers = [("sr-origin-partition", str(partition).encode()), ("sr-origin-offset", str(offset).encode())]
    return record(0, 0, {}, headers=headers)


def test_the_dead_letter_oracle_wants_each_invalid_record_and_no_valid_one_and_counts_repeats():
    invalid = {(1, 0), (1, 1)}
    once = _dead_letters(VALID, invalid, [dead(1, 0), dead(1, 1)])
    assert once.passed and "0 of them twice" in once.detail
    assert not _dead_letters(VALID, invalid, [dead(1, 0)]).passed
    again = _dead_letters(VALID, invalid, [dead(1, 0), dead(1, 1), dead(1, 1)])
    assert again.passed and "1 of them twice" in again.detail
    assert not _dead_letters(VALID, invalid, [dead(1, 0), dead(1, 1), dead(0, 0)]).passed
    assert not _dead_letters(VALID, invalid, [dead(1, 0), dead(1, 1), dead(2, 0)]).passed


def test_the_readiness_oracle_fails_on_a_held_ladder_answered_200():
    log = ReadinessLog()
    log.sample(1, held=True, status=503)
    log.sample(1, held=False, status=200)
    assert _readiness(log).passed
    log.sample(1, held=True, status=200)
    assert not _readiness(log).passed


def test_duplicates_are_counted_per_correction_by_when_they_were_written():
    """A record repeating an event id is counted for each correction that ran when it was
    written; first copies, and repeats outside every correction, count for none."""
    void = Correction("void", "duel-a", "m-1", {}, "done", started=10.0, ended=20.0)
    rerate = Correction("rerate", "duel-b", "", {"beta": 3.0}, "done", started=30.0, ended=40.0)

    def at(offset: int, seconds: float, event_id: str) -> LogRecord:
        return LogRecord(
            0, offset, int(seconds * 1000), None, json.dumps({"event_id": event_id}).encode(), ()
        )

    updates = [at(0, 5, "m1:a"), at(1, 12, "m1:a"), at(2, 15, "m2:b"), at(3, 25, "m2:b"), at(4, 35, "m1:a")]
    count_duplicates(updates, [void, rerate])
    assert (void.duplicates, rerate.duplicates) == (1, 1)
    assert "1 duplicate events while it ran" in Verdict({}, 0, {}, [], [void]).lines()[2]
