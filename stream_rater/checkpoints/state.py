"""A ladder's replay state taken out of a store (`capture`) and put into one (`seed`), by the
stores' public batch calls only: a checkpoint is read from the in-memory replica that made it,
and written into a re-rate's staging generation (or a replica, or a rebuilt live generation)
as ordinary commits, so any `BatchStore` takes it as it takes a batch.

`seed` writes each state with its leaderboard score as the planner would (the display rating
if the ladder's rules rank the player, and the last match on ladders that rank only active
players), the applied match ids as empty markers (a redelivery of one is a duplicate, and the
watermark counts them as a replay's would), the prediction-quality sums and window, and the
checkpoint's positions. Not carried: per-player rating histories (the archive keeps the past),
match placings, and ended seasons' leaderboards and archived states (a store seeded from a
checkpoint past a season start gets them elsewhere, or is a replica that needs none: ``whole``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from stream_rater.checkpoints.format import Checkpoint, LadderState
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts.modes import split_stored
from stream_rater.processor.quality import LIVE
from stream_rater.rating.base import Rating
from stream_rater.store.base import Commit, PlayerState, StateStore, StateWrite
from stream_rater.store.roles import BatchStore
from stream_rater.store.values import QUALITY_WINDOW

#: States, and markers, written per seeding commit at most (a commit with states needs one).
SEED_BATCH = 5000
SEED_MARKER_BATCH = 20_000

#: Applied match ids a seeded store (a re-rate's staging generation, a rebuilt live one) gets
#: markers for: the last ones before the checkpoint. A replay from the checkpoint skips every
#: id the checkpoint applied (`Deduped`), so it computes what the full replay computes; what the
#: markers are for after it is a redelivery, which comes from a producer's retry or a consumer's
#: rewind, within the last batches — an older one is as after the markers' TTL. Writing all of
#: them would cost a void on a ladder of 1 M matches seconds of Redis writes.
SEED_MARKERS = 100_000


async def capture(store: StateStore, ladder: str) -> LadderState:
    """The live players', effects' and quality of `ladder` (or a shadow's internal name)."""
    players = await store.players(ladder)
    effects = await store.players(ladder, effects=True)
    sums, window = await store.quality(ladder, LIVE, QUALITY_WINDOW)
    quality = {LIVE: (sums, list(reversed(window)))} if sums or window else {}
    return LadderState(dict(players), dict(effects), quality)


def with_params(ladders: Ladders, ladder: str, params: dict[str, Any] | None) -> Ladders:
    """`ladders` with `ladder`'s parameters overridden by `params` (its shadows kept)."""
    if not params:
        return ladders
    base = ladders.get(ladder)
    changed = replace(base, params={**base.params, **params})
    return Ladders([*(lad for lad in ladders.values() if lad.name != ladder), changed], source=ladders.source)


def seedable(checkpoint: Checkpoint) -> bool:
    """Whether `seed` reproduces the checkpoint's ladder whole: not past a season start."""
    return not checkpoint.seasons


def _write(ladder: Ladder, pid: str, state: PlayerState, tracks: bool) -> StateWrite:
    """A new player's write of `state` with the leaderboard entry the planner gives it (on a
    ladder with modes, `pid` is a stored id ``<mode>@<id>``: its mode's display rating)."""
    if ladder.modes:
        ladder = ladder.mode_ladder(split_stored(pid)[0])
    model, rules = ladder.rating_model, ladder.rules
    rating = model.display(Rating(state.mu, state.sigma, state.extra))
    ranked = not rules.filters_leaderboard or rules.qualifies(state.games, state.sigma)
    score = rating if ranked else None
    return StateWrite(
        pid, state, 0, False, score, state.last_played if tracks and score is not None else None
    )


def _commits(
    ladder: Ladder, state: LadderState, markers: Sequence[str], checkpoint: Checkpoint, generation: int | None
) -> list[Commit]:
    """The commits that write `state` (players, then effects) and `markers`."""
    tracks = ladder.rules.leaderboard_active_days is not None
    writes = [_write(ladder, pid, s, tracks) for pid, s in state.players.items()]
    writes += [StateWrite(e, s, 0, True, None, None) for e, s in state.effects.items()]
    wanted = max(math.ceil(len(writes) / SEED_BATCH), math.ceil(len(markers) / SEED_MARKER_BATCH))
    parts = max(1, min(wanted, len(markers)))
    per_writes, per_markers = math.ceil(len(writes) / parts), math.ceil(len(markers) / parts)
    commits = []
    for i in range(parts):
        last = i == parts - 1
        commits.append(
            Commit(
                ladder.name,
                writes[i * per_writes : None if last else (i + 1) * per_writes],
                {m: [] for m in markers[i * per_markers : None if last else (i + 1) * per_markers]},
                positions=checkpoint.positions if last else {},
                generation=generation,
                quality=state.quality if i == 0 else {},
                active_within=ladder.rules.active_within(),
                moded=bool(ladder.modes),
            )
        )
    return commits


async def seed(
    store: BatchStore,
    ladders: Ladders,
    checkpoint: Checkpoint,
    generation: int | None,
    *,
    shadows: bool = False,
    params: dict[str, Any] | None = None,
    markers: int | None = None,
    whole: bool = True,
) -> None:
    """Write `checkpoint` into `store`: its ladder's generation `generation` (None: the live
    one), and with `shadows` its shadows' live states too; leaderboard scores with the
    parameter overrides `params` (default: the checkpoint's); markers for the last `markers`
    applied matches (None: all). With `whole`, `ValueError` if not `seedable` (the store would
    lack the ended seasons)."""
    if whole and not seedable(checkpoint):
        raise ValueError(f"{checkpoint.line()}: past a season start, it cannot seed a store")
    ladders = with_params(ladders, checkpoint.ladder, checkpoint.params if params is None else params)
    applied = checkpoint.applied if markers is None else checkpoint.applied[-markers:]
    todo = _commits(ladders.get(checkpoint.ladder), checkpoint.state, applied, checkpoint, generation)
    for name, state in checkpoint.shadows.items() if shadows else ():
        todo += _commits(ladders.lookup(name), state, applied, checkpoint, None)
    for commit in todo:
        if not commit.markers:
            continue
        [refused] = await store.commit_many([commit])
        if refused is not None:
            raise refused


class Deduped:
    """A `History` (or any ``read()`` of entries) without the matches `checkpoint` applied:
    what a replay from it skips as duplicates whether or not their markers were seeded."""

    def __init__(self, history: Any, checkpoint: Checkpoint) -> None:
        self.history, self.applied = history, set(checkpoint.applied)

    async def read(self) -> list[Any]:
        return [e for e in await self.history.read() if e[0].match_id not in self.applied]

    def reached(self) -> dict[int, int]:
        return dict(self.history.reached())

    def committed(self) -> dict[int, int]:
        return dict(self.history.committed())
