"""The Redis scripts and their Python side agree on names: every field a script reads is one
the client sends, and every status a script answers is in the one refusal table."""

from __future__ import annotations

import dataclasses
import re
from importlib.resources import files

import msgpack
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from stream_rater.store.base import (
    Commit,
    CommitConflict,
    GenerationGone,
    LadderFrozen,
    LockLost,
    PlayerState,
    ReadRequest,
    RerateRunning,
    StateWrite,
)
from stream_rater.store.redis.boards import KnownBoards
from stream_rater.store.redis.keys import (
    BOARD_KEYS,
    COMMIT_KEYS,
    CONTROL_KEYS,
    READ_KEYS,
    KeyLayout,
    bucket,
    bucketed,
    grouped,
)
from stream_rater.store.redis.mode_boards import mode_boards
from stream_rater.store.redis.scripts import (
    Buckets,
    commit_args,
    decimals,
    format_fields,
    key_header,
    read_args,
    staged_commit_args,
)
from stream_rater.store.status import REFUSALS, check_reply, refusal
from stream_rater.store.stored_events import pack_events

SCRIPTS = ("common.lua", "commit.lua", "read.lua", "control.lua")


def _lua(name: str) -> str:
    return files("stream_rater.store.redis").joinpath(name).read_text()


def _fields_read(name: str) -> set[str]:
    """Fields a script (or the helper it calls) reads of its argument map ``args``, but those
    it sets itself."""
    lua = _lua(name)
    return set(re.findall(r"\bargs\.(\w+)", lua)) - set(re.findall(r"\bargs\.(\w+)\s*=[^=]", lua))


def _known_boards_fields(commit: Commit) -> set[str]:
    """The fields a store adds for `commit` once its last commit's reply told it the boards
    (`boards.KnownBoards`): a first commit of the ladder, answered, then `commit` after it."""
    known, first = KnownBoards(), dataclasses.replace(commit, read_at=(0, 0))
    known.fields(first, 0, None, {})
    known.answered(first, [b"ok", 1])
    return set(known.fields(dataclasses.replace(commit, read_at=(0, 1)), 0, None, {}))


def test_commit_script_reads_only_fields_the_client_packs() -> None:
    event = {"event_id": "m1:a"}
    commit = Commit(
        "L",
        [StateWrite("a", PlayerState(25.0, 8.0, 1, 1.0, 1), 0, False, 1.0)],
        {"m1": [event]},
        {"a": [event]},
        {0: 7},
    )
    # raw: packed states and events are msgpack inside, not UTF-8 text
    packed = {
        k.decode(): v
        for k, v in msgpack.unpackb(
            commit_args(commit, 12, 0, Buckets.of(commit, 1000.0, 60), 100)[0],
            raw=True,
            strict_map_key=False,
        ).items()
    }
    moded = dataclasses.replace(commit, writes=[commit.writes[0]._replace(player_id="duel@a")], moded=True)
    boards = mode_boards(KeyLayout(), "L", 0, moded)[1]  # a ladder with modes: its boards' fields too
    args = commit_args(moded, 15, 0, Buckets.of(moded, 1000.0, 60), 100, None, boards)[0]
    fields = {k.decode() for k in msgpack.unpackb(args, raw=True, strict_map_key=False)}
    staged_args, events = staged_commit_args(commit, 13, 0, Buckets.of(commit, 1000.0, 60), 100, 13)
    staged = {
        k.decode(): v for k, v in msgpack.unpackb(staged_args[0], raw=True, strict_map_key=False).items()
    }
    format_2 = commit_args(commit, 12, 0, Buckets.of(commit, 1000.0, 60), 100, None, format_fields(2))[0]
    earlier = {k.decode(): v for k, v in msgpack.unpackb(format_2, raw=True, strict_map_key=False).items()}
    unread_commit = dataclasses.replace(commit, unread={0: 5})
    unread_args = commit_args(unread_commit, 12, 0, Buckets.of(commit, 1000.0, 60), 100)[0]
    unread = {k.decode(): v for k, v in msgpack.unpackb(unread_args, raw=True, strict_map_key=False).items()}
    assert _fields_read("commit.lua") | _fields_read("common.lua") == (
        set(packed) | fields | set(staged) | set(earlier) | set(unread) | _known_boards_fields(commit)
    )
    assert set(unread) - set(packed) == {"unread"} and unread["unread"] == {0: 5}
    assert set(earlier) - set(packed) == {"format"} and earlier["format"] == 2
    assert fields - set(packed) == {"boards", "board", "board_ids"}
    assert set(staged) - set(packed) == {"staged"} and (staged["staged"], staged["unproduced"]) == (13, 0)
    assert (
        events == ["m1", pack_events([event], "L")]
        and staged_args == commit_args(commit, 13, 0, Buckets.of(commit, 1000.0, 60), 100, staged=13)[:-2]
    )
    assert packed["positions"] == {0: 7} and packed["unproduced"] == 1 and packed["mode"] == b"live"


def test_read_script_reads_the_fields_the_client_packs_and_decodes_records_only_below_a_position() -> None:
    """The read's map has the fields ``read.lua`` reads; its records (flat, packed) come with
    each partition's lowest offset, which the script compares with the positions before it
    decodes them; a request without records has neither."""
    records = [(0, 5), (1, 3), None, (0, 2), (1, 9)]
    request = ReadRequest("L", ["a"], [], ["m1", "m2", "m3", "m4", "m5"], None, records)
    fields = read_args(request, 0, 1000.0, 60)[2]
    assert _fields_read("read.lua") | _fields_read("common.lua") == {*fields, "keys"}
    assert fields["lowest"] == {0: 2, 1: 3}
    assert msgpack.unpackb(fields["records"]) == [0, 5, 1, 3, None, None, 0, 2, 1, 9]
    without = read_args(request._replace(records=None), 0, 1000.0, 60)[2]
    assert without["records"] is None and "lowest" not in without


def test_no_script_reads_a_key_by_its_position() -> None:
    lua = files("stream_rater.store.redis")
    scripts = [p for p in lua.iterdir() if p.name.endswith(".lua")]
    by_digit = {p.name: re.findall(r"\b(?:KEYS\[|key\()\s*\d[^\]\)]*[\]\)]", p.read_text()) for p in scripts}
    assert len(scripts) >= 5 and not any(by_digit.values()), by_digit


@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("commit.lua", COMMIT_KEYS),
        ("read.lua", READ_KEYS),
        ("board.lua", BOARD_KEYS),
        ("control.lua", CONTROL_KEYS),
    ],
)
def test_every_key_a_script_names_is_in_its_generated_header(name: str, names: tuple[str, ...]) -> None:
    used = set(re.findall(r"\bK\.(\w+)", _lua(name)))
    assert used and used <= set(names)
    assert f"local K = {{{names[0]} = 1, {names[1]} = 2," in key_header(names)


def test_the_key_lists_follow_the_named_positions() -> None:
    layout = KeyLayout()
    commit = layout.commit_keys("L", 2, ([7], ["all"]), None)
    read = layout.read_keys("L", 0, [7], ["all"])
    assert [k.rsplit(":", 1)[-1] for k in commit[: len(COMMIT_KEYS)]] == list(COMMIT_KEYS)
    assert (
        commit[1] == "sr:{L}:g2:lb"
        and commit[3] == "sr:{L}:control"
        and commit[9] == "sr:{L}:voids"
        and commit[10] == "sr:{L}:g2:players:7"
    )
    assert [k.rsplit(":", 1)[-1] for k in read[: len(READ_KEYS)]] == list(READ_KEYS)
    assert commit[8] == "sr:{L}:g2:unproduced:older" and read[5] == "sr:{L}:unproduced:older"


def test_every_status_a_script_answers_is_ok_or_a_refusal() -> None:
    answered = {s for name in SCRIPTS for s in re.findall(r"return \{'(\w+)'", _lua(name))}
    assert answered - {"ok"} == set(REFUSALS)


@pytest.mark.parametrize(
    ("reply", "error", "text"),
    [
        ([b"applied", b"m1"], CommitConflict, "match 'm1' already applied"),
        ([b"conflict", b"p1"], CommitConflict, "state of 'p1' changed since it was read"),
        ([b"frozen"], LadderFrozen, "ladder 'L' is being switched"),
        ([b"generation", 3], CommitConflict, "switched it to generation 3"),
        ([b"gone", 2], GenerationGone, "generation 2 is no longer being built"),
        ([b"lost"], LockLost, "expired or was taken over"),
        ([b"moved"], CommitConflict, "moved on during the switch"),
        ([b"running", b"me", 1500], RerateRunning, r"\(me\); its lock expires in 1.5 s"),
    ],
)
def test_check_reply_raises_the_refusal(reply: list[object], error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        check_reply("L", reply)


def test_ok_passes_and_memory_store_details_build_the_same_exceptions() -> None:
    check_reply("L", [b"ok", 1, -1])
    running = refusal("running", "L", "other", 2000.0)  # as MemoryStore gives it: str, ms
    assert isinstance(running, RerateRunning) and running.seconds_left == 2.0


def test_commit_values_follow_the_map_in_the_order_the_script_reads_them() -> None:
    event = {"event_id": "m1:a"}
    a, e = PlayerState(25.0, 8.0, 1, 1.0, 1), PlayerState(1.0, 2.0, 3, 1.0, 4)
    commit = Commit(
        "L",
        [StateWrite("a", a, 0, False, 1.0), StateWrite("e", e, 3, True)],
        {"m1": [event], "m2": []},
        {"a": [event]},
        {0: 7},
        produced=["m0"],
        placings={"m1": [["a", 1]]},
        quality={"q": ({"n": 1.0}, [[0.5, 1]])},
    )
    args = commit_args(commit, 14, 0, Buckets.of(commit, 1000.0, 60), 100)
    fields = {k.decode(): v for k, v in msgpack.unpackb(args[0], raw=True, strict_map_key=False).items()}
    placings, events = msgpack.packb([["a", 1]]), pack_events([event], "L")
    # states, histories, (match, marker) per applied match, (match, events) per match with events,
    # produced, window entries, the writes' scores as numbers
    values = [
        a.pack(),
        e.pack(),
        args[3],
        "m1",
        placings,
        "m2",
        b"",
        "m1",
        events,
        "m0",
        msgpack.packb([0.5, 1]),
        msgpack.packb([1.0, None]),
    ]
    assert args[1:] == values
    assert args[3].startswith(b"\0\0\0\1")  # the history chunk of a's state version 1
    assert fields["values"] == len(args) - 1
    assert (fields["markers"], fields["unproduced"], fields["produced"], fields["quality_window"]) == (
        2,
        1,
        1,
        [1],
    )
    assert fields["bucket"][1] == 0 and msgpack.unpackb(fields["expected"]) == [0, 3]


@given(st.lists(st.none() | st.floats(width=64) | st.floats(-1e-3, 1e-3) | st.floats(1e14, 1e17), max_size=8))
@example([1e-5, 9.99e-05, 1.5e-07, 1e16, 1e22, 5e-324, -0.0, 0.0, 25.0, float("nan"), float("-inf"), None])
@example([])
def test_decimals_are_the_numbers_reprs(numbers: list[float | None]) -> None:
    assert decimals(numbers) == [None if n is None else repr(n) for n in numbers]


def test_writes_in_another_order_than_the_histories_still_find_them() -> None:
    """The planner writes the histories' players first, in the histories' order (the arguments
    are then taken from the writes' columns); in any other order, with an effect among them or
    a history without a write, each history still gets its player's version and bucket."""
    ea, eb, ec = {"event_id": "m1:a"}, {"event_id": "m1:b"}, {"event_id": "m1:c"}
    a, b = PlayerState(25.0, 8.0, 1, 1.0, 3), PlayerState(25.0, 8.0, 1, 1.0, 5)
    writes = [StateWrite("b", b, 4), StateWrite("x", b, 4, True), StateWrite("a", a, 2)]
    commit = Commit("L", writes, {"m1": [ea, eb, ec]}, {"a": [ea], "b": [eb], "c": [ec]})
    buckets = Buckets.of(commit, 1000.0, 60)
    args = commit_args(commit, 12, 0, buckets, 100)
    fields = {k.decode(): v for k, v in msgpack.unpackb(args[0], raw=True, strict_map_key=False).items()}
    assert fields["with_history"] == [2, 0, 1]
    assert [buckets.players[at - 1] for at in fields["history_bucket"]] == [bucket(p) for p in "abc"]
    assert [args[i][:4] for i in (4, 5, 6)] == [v.to_bytes(4, "big") for v in (3, 5, 0)]
    assert fields["history_fields"] == [b"\xffa:3", b"\xffb:5", b"\xffc:0"]


@given(st.lists(st.text(max_size=6) | st.sampled_from(["a", "b", "ü"]), max_size=12))
def test_bucketed_ids_are_grouped_by_their_bucket(ids: list[str]) -> None:
    assert bucketed(ids) == grouped(ids, bucket)
