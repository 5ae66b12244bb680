"""Recompute a ladder from the matches topic and compare it with the live store.

`kafka.history.ladder_history` reads the ladder's history back from the matches topic,
`recompute` runs it through the same `Processor` a worker uses (in memory), and `verify`
compares the result with the states in the store: ``stream-rater verify``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from stream_rater.checkpoints import (
    Checkpoint,
    CheckpointSink,
    ReplayNeeds,
    Replica,
    configured_sink,
    latest_usable,
)
from stream_rater.config.ladders import Ladder, Ladders, split_shadow
from stream_rater.config.settings import Settings
from stream_rater.contracts import MatchFinished
from stream_rater.contracts.modes import board_name, stored_id
from stream_rater.kafka import (
    DeletedHead,
    LadderHistory,
    committed_offsets,
    deleted_heads,
    home_partition,
    ladder_history,
    partition_count,
    read_log,
)
from stream_rater.offline.replay import replay
from stream_rater.processor import Processor, Skipped
from stream_rater.rating.base import Rating
from stream_rater.store import PlayerState, StateStore
from stream_rater.store.memory import MemoryStore
from stream_rater.waiting import wait_until_async


async def recompute(
    matches: Iterable[MatchFinished],
    ladders: Ladders,
    ladder: str,
    on_skip: Callable[[Skipped], None] | None = None,
) -> tuple[dict[str, PlayerState], dict[str, PlayerState]]:
    """Players' and effects' states after applying `matches` in order to an empty store (a
    match the model cannot rate is skipped, as the worker dead-letters it: `on_skip`)."""
    store = await replayed(matches, ladders, on_skip)
    return await store.players(ladder), await store.players(ladder, effects=True)


async def replayed(
    matches: Iterable[MatchFinished], ladders: Ladders, on_skip: Callable[[Skipped], None] | None = None
) -> MemoryStore:
    """An empty store after applying `matches` in order, shadows included (`recompute`)."""
    processor = Processor(ladders, MemoryStore())
    await replay(matches, processor, on_skip=on_skip)
    assert isinstance(processor.store, MemoryStore)
    return processor.store


async def corrected(store: StateStore, ladders: Ladders, ladder: str) -> tuple[Ladders, set[str]]:
    """`ladders` with `ladder`'s live parameter overrides (a re-rate's), and its voided match
    ids: what a recomputation must use to match the live generation."""
    generations = await store.generations(ladder)
    voided = set(await store.voids(ladder))
    if not generations.params:
        return ladders, voided
    base = ladders.get(ladder)
    changed = replace(base, params={**base.params, **generations.params})  # its shadows kept
    others = (lad for lad in ladders.values() if lad.name != ladder)
    return Ladders([*others, changed], source=ladders.source), voided


#: The `Difference.player_id` of a leaderboard whose running sum is not its scores' sum.
BOARD_SUM = "(running sum)"


@dataclass(frozen=True, slots=True)
class Difference:
    """A player (or effect) whose live state differs from the recomputed one (None = absent)."""

    player_id: str
    is_effect: bool
    live: PlayerState | None
    recomputed: PlayerState | None
    #: The shadow (`Ladder.shadows`) whose state this is; None: the live ladder's.
    shadow: str | None = None
    #: A leaderboard difference instead: the player's score on the live eligible leaderboard
    #: and the one their live state gives (None: absent); for `BOARD_SUM`, the running sum and
    #: the sum of the leaderboard's scores.
    board: tuple[float | None, float | None] | None = None

    def line(self) -> str:
        if self.board is not None:
            live, expected = ("absent" if x is None else repr(x) for x in self.board)
            if self.player_id == BOARD_SUM:
                return f"leaderboard: running sum {live}; its scores add up to {expected}"
            return f"leaderboard: player {self.player_id}: live {live}; from the live state {expected}"

        def show(s: PlayerState | None) -> str:
            if s is None:
                return "absent"
            sigma = "" if s.sigma is None else f" sigma={s.sigma!r}"
            extra = "" if s.extra is None else f" extra={s.extra!r}"
            return f"mu={s.mu!r}{sigma}{extra} games={s.games}"

        kind = "effect" if self.is_effect else "player"
        whose = "" if self.shadow is None else f"shadow {self.shadow}: "
        return f"{whose}{kind} {self.player_id}: live {show(self.live)}; recomputed {show(self.recomputed)}"


def differences(
    live: dict[str, PlayerState],
    recomputed: dict[str, PlayerState],
    tolerance: float,
    is_effect: bool = False,
) -> list[Difference]:
    """Players whose μ, σ, model-specific extra (Glicko-2's volatility), peak (absolute
    `tolerance`), games, last match or peak's match differ, or who are only on one side; sorted by id."""

    def close(x: float | None, y: float | None) -> bool:
        if x is None or y is None:
            return x is y
        return math.isclose(x, y, rel_tol=0, abs_tol=tolerance)

    def same(a: PlayerState, b: PlayerState) -> bool:
        return (
            math.isclose(a.mu, b.mu, rel_tol=0, abs_tol=tolerance)
            and close(a.sigma, b.sigma)
            and close(a.extra, b.extra)
            and a.games == b.games
            and a.last_played == b.last_played
            and close(a.peak, b.peak)
            and a.peak_at == b.peak_at
        )

    return [
        Difference(pid, is_effect, live.get(pid), recomputed.get(pid))
        for pid in sorted(set(live) | set(recomputed))
        if pid not in live or pid not in recomputed or not same(live[pid], recomputed[pid])
    ]


def eligible_board(
    ladder: Ladder, states: Mapping[str, PlayerState], since: float | None
) -> dict[str, float]:
    """The eligible leaderboard recomputed from `states`: each player the ladder's rules rank
    (`Rules.qualifies`) and active since `since` (None: no activity rule), by display
    rating — what the commits keep (`ReadStore.board_entries`; a player without a last match
    never goes idle)."""
    model, rules = ladder.rating_model, ladder.rules
    return {
        pid: model.display(Rating(s.mu, s.sigma, s.extra))
        for pid, s in states.items()
        if (not rules.filters_leaderboard or rules.qualifies(s.games, s.sigma))
        and (since is None or s.last_played is None or s.last_played >= since)
    }


async def board_differences(
    store: StateStore, ladder: Ladder, states: Mapping[str, PlayerState], now: float, tolerance: float
) -> list[Difference]:
    """Where the live eligible leaderboard (at `now`) differs from `eligible_board` of the live
    `states`, and its running sum from its scores' sum (relative 1e-9). A ladder with modes
    has a board per mode, each compared with its mode's states (stored ids ``<mode>@<id>``)
    and its mode's display rating; its differences name the stored ids."""
    if not ladder.modes:
        return await _board_differences(store, ladder.name, ladder, states, now, tolerance)
    found = []
    for mode in ladder.modes:
        head = stored_id(mode, "")
        of_mode = {p[len(head) :]: s for p, s in states.items() if p.startswith(head)}
        board = board_name(ladder.name, mode)
        differ = await _board_differences(store, board, ladder.mode_ladder(mode), of_mode, now, tolerance)
        found += [replace(d, player_id=stored_id(mode, d.player_id)) for d in differ]
    return found


async def _board_differences(
    store: StateStore,
    board: str,
    ladder: Ladder,
    states: Mapping[str, PlayerState],
    now: float,
    tolerance: float,
) -> list[Difference]:
    """`board_differences` of one board (`contracts.modes.board_name`)."""
    since = ladder.rules.active_since(now)
    live, running = await store.board_entries(board, since)
    expected = eligible_board(ladder, states, since)
    found = [
        Difference(pid, False, states.get(pid), states.get(pid), board=(live.get(pid), expected.get(pid)))
        for pid in sorted(set(live) | set(expected))
        if pid not in live
        or pid not in expected
        or not math.isclose(live[pid], expected[pid], rel_tol=0, abs_tol=tolerance)
    ]
    total = math.fsum(live.values())
    if running is not None and not math.isclose(running, total, rel_tol=1e-9, abs_tol=tolerance):
        found.append(Difference(BOARD_SUM, False, None, None, board=(running, total)))
    return found


@dataclass(slots=True)
class VerifyReport:
    """What `verify` found."""

    ladder: str
    matches: int
    players: int
    differences: list[Difference]
    ordered: bool
    rejected: int
    caught_up: bool
    #: Partitions whose head retention deleted: only a tail of the history was recomputed.
    truncated: list[DeletedHead] = field(default_factory=list)
    #: Matches the model could not rate: skipped, as the worker dead-letters them.
    skipped: list[Skipped] = field(default_factory=list)
    #: The internal names of the shadows compared too.
    shadows: list[str] = field(default_factory=list)
    #: The checkpoint the recomputation started from (its `line`); None: the topic's start.
    checkpoint: str | None = None
    #: The partitions the ladder's records were read from (more than one: a split ladder).
    partitions: list[int] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [s.line() for s in self.skipped] + [d.line() for d in self.differences]
        if self.truncated:
            out.append(
                f"warning: ladder {self.ladder!r}: {'; '.join(h.line() for h in self.truncated)} "
                "(retention?): only a tail of its history was checked, recomputed from an empty "
                "ladder, so its players are expected to differ"
            )
        if not self.ordered:
            out.append(
                f"warning: split ladder {self.ladder!r}: its match records are on partitions "
                f"{self.partitions or 'several'} (a producer that does not hash the key by ladder). "
                "The workers applied each exactly once, in the order they took them from those "
                "partitions, which the log does not define; this check (like replay --from-topic "
                "and rerate) took them by broker timestamp, then partition and offset, so "
                "differences may come from that: rerate makes the ladder equal to this order"
            )
        if not self.caught_up:
            out.append(
                "warning: the worker group had not committed every record read (lagging or stopped); "
                "differences may be matches it has not applied yet"
            )
        if self.checkpoint:
            out.append(f"recomputed from {self.checkpoint}")
        out.append(
            f"ladder {self.ladder!r}: {self.matches} matches from the topic ({self.rejected} invalid "
            f"records skipped, {len(self.skipped)} the model could not rate); "
            f"{verdict(self.players, len(self.differences))}"
            + (f" (shadows {', '.join(self.shadows)} included)" if self.shadows else "")
        )
        return out


def verdict(players: int, differing: int) -> str:
    """How every command words a verify result (``verify``, ``demo``, the benches), so that
    "all agree" reads the same everywhere: ``7 players, none differ from the replay``."""
    return f"{players} players, {differing or 'none'} differ from the replay"


async def _caught_up(settings: Settings, positions: dict[int, int], wait: float) -> bool:
    """Wait up to `wait` s until the worker group has committed up to `positions`."""

    async def caught_up() -> bool:
        committed = await committed_offsets(settings, settings.topic_matches, positions)
        return all(committed[p] >= offset for p, offset in positions.items())

    try:
        return await wait_until_async(caught_up, "the worker group's commits", wait, interval=0.2)
    except TimeoutError:
        return False


async def verify(
    settings: Settings,
    ladders: Ladders,
    ladder: str,
    store: StateStore,
    tolerance: float = 0.0,
    wait: float = 30.0,
    rounds: int = 5,
    sink: CheckpointSink | str | None = "configured",
) -> VerifyReport:
    """Recompute `ladder` from the matches topic and compare with `store`.

    Starts from the newest checkpoint usable with the live voids and parameters (`sink`,
    default: the one `settings` configure; None: none), reading the ladder's partitions from
    its offsets; else from the topic's start. Reads up to the topic's end, waits (up to
    `wait` s) until the worker group has committed the ladder's records read, then reads the
    live states. If more of the ladder's matches arrived meanwhile, they are read too and the
    wait repeats (up to `rounds` times), so a ladder that pauses for a moment is compared at
    one consistent position.
    """
    if isinstance(sink, str):
        async with configured_sink(settings) as configured:
            return await verify(settings, ladders, ladder, store, tolerance, wait, rounds, configured)
    start, partitions = await _start(settings, store, sink, ladder)
    topic = settings.topic_matches
    limits = settings.limits()
    begin = start.positions if start is not None else None
    records, end = await read_log(settings, topic, start=begin, partitions=partitions)
    for _ in range(rounds):
        history = ladder_history(records, ladders, ladder, limits)
        caught_up = await _caught_up(settings, history.positions, wait)
        live = await store.players(ladder), await store.players(ladder, effects=True)
        shadows = {s.name: await _states(store, s.name) for s in ladders.get(ladder).shadows}
        newer, end = await read_log(settings, topic, start=end, partitions=partitions)
        if not ladder_history(newer, ladders, ladder, limits).matches:
            break
        records += newer
    report = await compare(store, ladders, history, live, tolerance, shadows, start=start)
    report.caught_up = caught_up
    known = (await store.generations(ladder)).positions
    heads = await deleted_heads(settings, ladder, partitions={*history.positions, *known})
    report.truncated = [h for h in heads if h.earliest > (begin or {}).get(h.partition, 0)]
    return report


async def _start(
    settings: Settings, store: StateStore, sink: CheckpointSink | None, ladder: str
) -> tuple[Checkpoint | None, set[int] | None]:
    """The checkpoint `verify` starts from (None: the topic's start) and the partitions it
    then reads (the ladder's; None: all)."""
    if sink is None:
        return None, None
    live = await store.generations(ladder)
    start = await latest_usable(sink, ladder, ReplayNeeds(await store.voids(ladder), live.params))
    if start is None:
        return None, None
    count = await partition_count(settings, settings.topic_matches)
    return start, {home_partition(ladder, count), *live.positions, *start.positions}


#: A ladder's players' and effects' states.
_States = tuple[dict[str, PlayerState], dict[str, PlayerState]]


async def _states(store: StateStore, ladder: str) -> _States:
    return await store.players(ladder), await store.players(ladder, effects=True)


def _shadow_differences(name: str, live: _States, recomputed: _States, tolerance: float) -> list[Difference]:
    """`differences` of the shadow `name` (``<ladder>~<shadow>``), each naming the shadow."""
    found = differences(live[0], recomputed[0], tolerance)
    found += differences(live[1], recomputed[1], tolerance, is_effect=True)
    return [replace(d, shadow=split_shadow(name)[1]) for d in found]


async def compare(
    store: StateStore,
    ladders: Ladders,
    history: LadderHistory,
    live: tuple[dict[str, PlayerState], dict[str, PlayerState]],
    tolerance: float = 0.0,
    shadows: Mapping[str, _States] | None = None,
    *,
    start: Checkpoint | None = None,
    now: float | None = None,
) -> VerifyReport:
    """Compare the `live` states (players, effects) of `history`'s ladder with a recomputation
    of `history` (from the checkpoint `start`, if given) with the store's live parameter
    overrides and voids: `verify` once the history is read and the worker group has caught up
    with it. `shadows` (internal name → live states) are compared with the same
    recomputation's shadows — made without the voids, which are the live ladder's (a shadow
    rates every match its ladder's records bring). The live eligible leaderboard is compared with
    the one the live states give at `now` (default: the clock's) (`board_differences`). The
    report says the group caught up (`verify` says when it did not)."""
    ladder = history.ladder
    skipped: list[Skipped] = []
    if start is None:
        corrected_ladders, voided = await corrected(store, ladders, ladder)
        oracle = await replayed(
            [m for m in history.matches if m.match_id not in voided], corrected_ladders, skipped.append
        )
        whole = (await replayed(history.matches, corrected_ladders)) if shadows and voided else oracle
    else:
        oracle = whole = await _from_checkpoint(store, ladders, history, start, skipped)
    players, effects = await _states(oracle, ladder)
    found = differences(live[0], players, tolerance) + differences(
        live[1], effects, tolerance, is_effect=True
    )
    for name, states in (shadows or {}).items():
        found += _shadow_differences(name, states, await _states(whole, name), tolerance)
    clock = time.time() if now is None else now
    ruled = (await corrected(store, ladders, ladder))[0].get(ladder)
    found += await board_differences(store, ruled, live[0], clock, tolerance)
    return VerifyReport(
        ladder,
        len(history.matches),
        len(players),
        found,
        history.ordered,
        len(history.rejected),
        True,
        skipped=skipped,
        shadows=sorted(shadows or ()),
        checkpoint=start.line() if start is not None else None,
        partitions=sorted(history.positions),
    )


async def _from_checkpoint(
    store: StateStore, ladders: Ladders, history: LadderHistory, start: Checkpoint, skipped: list[Skipped]
) -> MemoryStore:
    """`history` replayed from the checkpoint `start` with the live voids and parameters
    (shadows beside it, without the voids: their own)."""
    live = await store.generations(history.ladder)
    voids = await store.voids(history.ladder)
    replica = await Replica(ladders, history.ladder, start, voids=voids, params=live.params).open()
    await replica.apply(list(zip(history.matches, history.where)))
    skipped += replica.skipped
    return replica.store
