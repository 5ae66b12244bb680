"""Which checkpoint a replay may start from, chosen from the manifests alone.

A checkpoint is a replay of the ladder's log up to its positions with the voids and parameter
overrides it was made with. A replay that must use other voids (a void or un-void being
carried out) may start from it only if it has not passed a match whose void differs: a match
it passed is in its segment or an older checkpoint's (`Manifest.segment`, a Bloom filter). So
a void starts from the checkpoint before the oldest segment holding the voided match — the
newest made before it — and from the newest when no segment holds it (the match came after it,
or before every checkpoint kept: then the history read from it lacks the match and the
correction is refused, `corrections.starting`). Its parameters must be the ones the replay
uses, unless the replay asks for new ones from the checkpoint on (``rerate --since``). A torn
checkpoint is never used. A checkpoint past a season start does not hold the ended seasons'
leaderboards and archived states: a replica (the checkpointer's, `verify`'s) needs none, a
re-rate copies them from the live generation (they are before the checkpoint, so before what
it corrects), only a store rebuilt from nothing would lack them (``whole``: not used).

A correction that switched drops the checkpoints made after the one it started from (they
passed the corrected match with its old void): so the voids of every checkpoint kept agree
with the live ones on every match it passed (`corrections.history`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stream_rater.checkpoints.format import Checkpoint, Manifest, TornCheckpoint
from stream_rater.checkpoints.sink import CheckpointSink

log = logging.getLogger(__name__)


def first_passed(manifests: Sequence[Manifest], ids: Collection[str]) -> int:
    """The index (oldest first) of the first of `manifests` whose segment holds one of `ids`;
    ``len(manifests)`` if none does."""
    for i, manifest in enumerate(manifests):
        if any(manifest.segment.contains(m) for m in ids):
            return i
    return len(manifests)


@dataclass(frozen=True, slots=True)
class ReplayNeeds:
    """What a replay needs of the checkpoint it starts from: its `voids` (ids; None: each
    checkpoint's own, for a store that lost them) and `params` (unless `any_params`: ``rerate
    --since`` asks for new ones from the checkpoint on); `changing` names the matches a
    correction (un-)voids; `whole`: none past a season start (module docstring)."""

    voids: Collection[str] | None
    params: Mapping[str, Any] | None
    any_params: bool = False
    changing: Collection[str] = ()
    whole: bool = False


def choose(manifests: Sequence[Manifest], needs: ReplayNeeds) -> list[Manifest]:
    """Of `manifests` (oldest first), those a replay with `needs` may start from, newest first."""
    out = []
    voids, params = needs.voids, needs.params
    for i, manifest in enumerate(manifests):
        differ = set(needs.changing) | (set() if voids is None else set(manifest.voids) ^ set(voids))
        if (needs.whole and manifest.seasons) or (
            not needs.any_params and dict(manifest.params or {}) != dict(params or {})
        ):
            continue
        if first_passed(manifests[: i + 1], differ) <= i:
            continue
        out.append(manifest)
    return out[::-1]


async def latest_usable(
    sink: CheckpointSink,
    ladder: str,
    needs: ReplayNeeds,
    *,
    ident: str | None = None,
    created_before: float | None = None,
    within: Mapping[int, int] | None = None,
) -> Checkpoint | None:
    """The newest of `ladder`'s whole checkpoints `choose` allows for `needs` (or the one named
    `ident`, or made at or before `created_before`, or with positions `within` these); None if
    none is."""
    for manifest in choose(await sink.manifests(ladder), needs):
        if (
            (ident is not None and manifest.id != ident)
            or (created_before is not None and manifest.created > created_before)
            or (within is not None and any(o > within.get(p, 0) for p, o in manifest.positions.items()))
        ):
            continue
        try:
            return await sink.load(manifest)
        except TornCheckpoint as torn:
            log.warning("%s: not used", torn)
    return None
