"""Which checkpoint a replay may start from.

A checkpoint is a replay of the ladder's log up to its positions with the voids and parameter
overrides it was made with. A replay that must use other voids (a void or un-void being
carried out, or made since) may start from it only if the two sets of voids agree on every
match it passed: so a void starts from the newest checkpoint made before the voided match.
Its parameters must be the ones the replay uses, unless the replay asks for new ones from the
checkpoint on (``rerate --since``). A torn checkpoint is never used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from stream_rater.checkpoints.format import Checkpoint, TornCheckpoint
from stream_rater.checkpoints.sink import CheckpointSink
from stream_rater.checkpoints.state import seedable

log = logging.getLogger(__name__)


def usable(
    checkpoint: Checkpoint,
    voids: Mapping[str, Any] | None,
    params: Mapping[str, Any] | None,
    any_params: bool = False,
) -> str | None:
    """None if a replay with `voids` (None: the checkpoint's own, for a store that lost them)
    and `params` may start from `checkpoint`, else why not."""
    if not seedable(checkpoint):
        return "it is past a season start"
    if not any_params and dict(checkpoint.params or {}) != dict(params or {}):
        return "it was made with other parameters"
    changed = (set(checkpoint.voids) ^ set(checkpoint.voids if voids is None else voids)) & set(
        checkpoint.passed
    )
    if changed:
        return f"it comes after match {sorted(changed)[0]!r}, whose void changes"
    return None


async def latest_usable(
    sink: CheckpointSink,
    ladder: str,
    voids: Mapping[str, Any] | None,
    params: Mapping[str, Any] | None,
    *,
    any_params: bool = False,
    ident: str | None = None,
    created_before: float | None = None,
    within: Mapping[int, int] | None = None,
) -> Checkpoint | None:
    """The newest of `ladder`'s whole checkpoints (or the one named `ident`, or made at or
    before `created_before`, or with positions `within` these) `usable` with `voids` and
    `params`; None if none is."""
    for manifest in reversed(await sink.manifests(ladder)):
        if (
            (ident is not None and manifest.id != ident)
            or (created_before is not None and manifest.created > created_before)
            or (within is not None and any(o > within.get(p, 0) for p, o in manifest.positions.items()))
        ):
            continue
        try:
            checkpoint = await sink.load(manifest)
        except TornCheckpoint as torn:
            log.warning("%s: not used", torn)
            continue
        why = usable(checkpoint, voids, params, any_params)
        if why is None:
            return checkpoint
        log.info("%s: not used: %s", checkpoint.line(), why)
    return None
