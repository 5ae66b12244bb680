"""The `Correction` value: built from the CLI's flags or from a wire request, it says the same
thing either way, and a `Rerate` splits its match ids into voids and un-voids by its kind."""

from __future__ import annotations

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import CorrectionRequest
from stream_rater.corrections.rerate import Correction, Rerate
from stream_rater.store.memory import MemoryStore

LADDERS = Ladders([Ladder("l", "trueskill")])


class NoHistory:
    async def read(self):
        return []

    def reached(self):
        return {}

    def committed(self):
        return {}


async def no_send(events) -> None:
    raise AssertionError("nothing to send")


@pytest.mark.parametrize(
    "wire",
    [
        {"kind": "void", "ladder": "l", "match_ids": ["m1", "m2"], "reason": "cheater"},
        {"kind": "unvoid", "ladder": "l", "match_ids": ["m1"]},
        {"kind": "rerate", "ladder": "l", "params": {"beta": 2.5}, "request_id": "r1"},
    ],
)
def test_a_request_and_its_correction_say_the_same(wire):
    request = CorrectionRequest.from_dict(wire)
    correction = Correction.from_request(request)
    assert correction.request(request.request_id) == request
    assert correction.request(request.request_id).to_dict() == wire


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="'erase'"):
        Correction("erase", "l", ("m1",))


@pytest.mark.parametrize(
    ("kind", "void", "unvoid"),
    [("void", ["m1", "m2"], []), ("unvoid", [], ["m1", "m2"]), ("rerate", [], [])],
)
def test_the_kind_says_whether_the_matches_are_voided_or_unvoided(kind, void, unvoid):
    ids = ("m1", "m2", "m1") if kind != "rerate" else ()
    rerate = Rerate(MemoryStore(), LADDERS, Correction(kind, "l", ids), NoHistory(), no_send)
    assert (rerate.void, rerate.unvoid) == (void, unvoid)


async def test_voids_already_as_asked_are_nothing_to_do():
    store = MemoryStore()
    await store.set_voids("l", {"m1": {"reason": "", "at": 0.0}}, [], 0)
    report = await Rerate(store, LADDERS, Correction("void", "l", ("m1",)), NoHistory(), no_send).run()
    assert report.nothing_to_do and report.generation == 0
