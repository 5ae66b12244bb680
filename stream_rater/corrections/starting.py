"""Where a correction's re-rate starts: the newest usable checkpoint before what it corrects
(`checkpoints.select`), or the ladder's beginning; and the refusal when the matches topic no
longer holds what that start needs.

- A void or un-void starts from the newest checkpoint made before every match it (un-)voids,
  with the live parameters: it replays only the matches after it.
- A re-rate (new parameters) starts from the beginning, unless asked ``--since`` a checkpoint
  (by id, or the newest made at or before a time): the new parameters then apply from that
  checkpoint on — the states it holds stay as the old parameters made them, only the matches
  after it are rated with the new ones (and `verify` then compares with a replay from it).
- No usable checkpoint: from the beginning, as before checkpoints existed.

The start needs the topic from the checkpoint's offsets (or offset 0) on the ladder's
partitions; if retention deleted part of that, the correction is refused (`TooOld`) in one
line: what was deleted, which checkpoint would have been needed, and what to do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stream_rater.checkpoints import Checkpoint, CheckpointSink, ReplayNeeds, latest_usable
from stream_rater.contracts import parse_timestamp
from stream_rater.corrections.planning import Correction
from stream_rater.kafka import DeletedHead, HistoryTruncated
from stream_rater.store import RerateStore


class TooOld(HistoryTruncated):
    """A correction older than what the matches topic and the checkpoints can serve."""

    def __init__(
        self, ladder: str, heads: Sequence[DeletedHead], start: Checkpoint | None, what: str
    ) -> None:
        deleted = "; ".join(h.line() for h in heads)
        since = (
            f"checkpoint {start.id} before it needs offsets {start.positions}"
            if start is not None
            else "no checkpoint kept is older"
        )
        RuntimeError.__init__(
            self,
            f"ladder {ladder!r}: {deleted} (retention?), and {since} than {what}: it is outside the "
            "correction window (STREAM_RATER_CORRECTION_WINDOW_HOURS); give the deleted matches "
            "with --history FILE",
        )
        self.ladder, self.heads = ladder, list(heads)


def voids_after(correction: Correction, current: Mapping[str, Any]) -> dict[str, Any]:
    """The ladder's voids once `correction` is carried out."""
    after = dict(current)
    if correction.kind == "void":
        after.update((m, {}) for m in correction.match_ids if m not in after)
    elif correction.kind == "unvoid":
        for m in correction.match_ids:
            after.pop(m, None)
    return after


async def starting_checkpoint(
    correction: Correction, store: RerateStore, sink: CheckpointSink | None, since: str | None = None
) -> Checkpoint | None:
    """The checkpoint `correction`'s re-rate starts from (see the module docstring)."""
    if sink is None or (correction.kind == "rerate" and since is None):
        return None
    ladder = correction.ladder
    voids = voids_after(correction, await store.voids(ladder))
    live = await store.generations(ladder)
    if correction.kind != "rerate":
        return await latest_usable(
            sink, ladder, ReplayNeeds(voids, live.params, changing=correction.match_ids)
        )
    ident, before = _since(since or "")
    found = await latest_usable(
        sink, ladder, ReplayNeeds(voids, None, any_params=True), ident=ident, created_before=before
    )
    if found is None:
        raise ValueError(
            f"--since {since}: no usable checkpoint of ladder {ladder!r} is {'so named' if ident else 'that old'}"
        )
    return found


def _since(text: str) -> tuple[str | None, float | None]:
    """``--since``: a checkpoint id (``ck-…``), or a time (RFC 3339 or epoch seconds)."""
    if text.startswith("ck-"):
        return text, None
    try:
        return None, parse_timestamp(text)
    except ValueError:
        raise ValueError(
            f"--since {text}: expected a checkpoint id (ck-…) or a time (RFC 3339 or epoch seconds)"
        ) from None


def refuse_too_old(
    correction: Correction,
    heads: Iterable[DeletedHead],
    start: Checkpoint | None,
    *,
    files_supplied: bool,
    checkpointed: bool,
) -> None:
    """Refuse when retention deleted offsets the start needs, unless history files supply
    them: `TooOld` when the ladder has checkpoints (none usable early enough, or the one found
    older than the topic's head), the plain `HistoryTruncated` when it has none."""
    offsets = start.positions if start is not None else {}
    missing = [h for h in heads if h.earliest > offsets.get(h.partition, 0)]
    if not missing or (files_supplied and start is None):
        return
    if not checkpointed:
        raise HistoryTruncated(correction.ladder, missing)
    what = (
        f"the {correction.kind} of {', '.join(map(repr, correction.match_ids))}"
        if correction.match_ids
        else "the re-rate"
    )
    raise TooOld(correction.ladder, missing, start, what)
