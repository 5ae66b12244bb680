"""What a processor remembers of its own commits, per ladder: how far each ladder's history
went (its watermark), the commits sent without a reply, the quality sums of the commits whose
matches are not settled yet, and the matches whose events were produced but whose markers still
hold them (see README.md beside this module)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from stream_rater.processor.results import BatchResult, MatchResult, StoreLost
from stream_rater.store.base import Snapshot

#: A commit's prediction-quality sums per scorer, as `BatchResult.quality` takes them.
Quality = Sequence[tuple[str, dict[str, float]]]


class CommitLedger:
    """A processor's record of its commits: watermarks, unconfirmed and produced matches, and
    the quality of the commits not yet settled."""

    def __init__(self, *, suspect_empty: bool = False) -> None:
        #: See `Processor`: a ladder the store knows nothing of counts as lost.
        self.suspect_empty = suspect_empty
        #: Ladder → (generation, watermark) as of this processor's last read or commit.
        self._watermarks: dict[str, tuple[int, int]] = {}
        #: Match ids (per ladder) of commits sent whose outcome is unknown (no reply).
        self._unconfirmed: dict[str, set[str]] = {}
        #: Per ladder, match id → how many more commits naming it were sent while it was
        #: unconfirmed: a refusal settles its own send, not an earlier one that may land late.
        self._resent: dict[str, dict[str, int]] = {}
        #: Match ids (per ladder) whose events were produced and whose markers are still whole.
        self._produced: dict[str, set[str]] = {}
        #: Per ladder, the commits applied (True) or whose call failed (False: they may have
        #: landed) whose matches are not settled yet: their match ids and quality sums.
        self._sent: dict[str, list[tuple[frozenset[str], Quality, bool]]] = {}

    def read(self, ladder: str, snapshot: Snapshot) -> None:
        """Note `snapshot`, just read of `ladder`; `StoreLost` if it shows less of the ladder
        than was seen or committed: an older generation than seen, or fewer matches applied
        to the same one."""
        seen = self._watermarks.get(ladder)
        now = (snapshot.generation, snapshot.watermark)
        if seen is not None and now < seen:
            raise StoreLost(
                ladder,
                f"the store shows {now[1]} matches applied, {seen[1]} were"
                if now[0] == seen[0]
                else f"the store shows generation {now[0]} live, generation {seen[0]} was",
            )
        if seen is None and now == (0, 0) and self.suspect_empty:
            raise StoreLost(ladder, "the store is empty although the consumer group has committed offsets")
        self._watermarks[ladder] = now

    def sending(self, ladder: str, match_ids: Iterable[str]) -> list[str]:
        """A commit of `ladder` applying `match_ids` is about to be sent: they are unconfirmed
        until it is known applied or refused. Returns the matches whose markers it may shrink
        (their events are produced)."""
        unconfirmed = self._unconfirmed.setdefault(ladder, set())
        again = unconfirmed.intersection(match_ids)
        if again:
            resent = self._resent.setdefault(ladder, {})
            for match_id in again:
                resent[match_id] = resent.get(match_id, 0) + 1
        unconfirmed.update(match_ids)
        return list(self._produced.get(ladder, ()))

    def applied(
        self,
        ladder: str,
        snapshot: Snapshot,
        match_ids: Collection[str],
        shrunk: Iterable[str],
        quality: Quality,
    ) -> None:
        """A commit of `ladder`, computed from `snapshot`, applied `match_ids`, added `quality`
        and shrank the markers of `shrunk`. (Its matches stay unconfirmed, and its quality
        uncounted, until `settle`.)"""
        self._produced.get(ladder, set()).difference_update(shrunk)
        self._watermarks[ladder] = (snapshot.generation, snapshot.watermark + len(match_ids))
        self._sent.setdefault(ladder, []).append((frozenset(match_ids), quality, True))

    def refused(self, ladder: str, match_ids: Iterable[str]) -> None:
        """A commit of `ladder` applying `match_ids` was refused: that commit applied none of
        them. One that was still unconfirmed when it was sent stays so: the earlier commit may
        yet land (a partition healing delivers it late, after this one's read)."""
        resent = self._resent.get(ladder, {})
        unconfirmed = self._unconfirmed[ladder]
        for match_id in match_ids:
            sends = resent.pop(match_id, 0)
            if sends > 1:
                resent[match_id] = sends - 1
            elif not sends:
                unconfirmed.discard(match_id)

    def lost(self, ladder: str, match_ids: Iterable[str], quality: Quality) -> None:
        """The call that sent a commit of `ladder` applying `match_ids`, adding `quality`,
        failed: the commit may have landed (a re-read then finds its matches: `confirm`)."""
        self._sent.setdefault(ladder, []).append((frozenset(match_ids), quality, False))

    def settle(self, ladder: str, match_ids: Collection[str], *, confirmed: bool = False) -> Quality:
        """`match_ids` of `ladder` are known applied, and the call that applied them returns
        (`confirmed`: it found them applied by this processor's own earlier commit). Returns
        the quality sums of the commit that applied them, to be counted once: the one applied,
        else (`confirmed`) the last lost one. A commit is atomic, so one match found applied
        shows that its whole commit landed. A lost commit sent before the last one can have
        landed only if its players' states were still those it was computed from when the
        last one read them: then both computed the same sums."""
        self._unconfirmed[ladder].difference_update(match_ids)
        resent = self._resent.get(ladder)
        if resent:
            for match_id in match_ids:
                resent.pop(match_id, None)
        sent = self._sent.get(ladder)
        if not sent:
            return []
        done = [entry for entry in sent if not entry[0].isdisjoint(match_ids)]
        self._sent[ladder] = [entry for entry in sent if entry[0].isdisjoint(match_ids)]
        applied = [quality for _, quality, was_applied in done if was_applied]
        if applied:
            return applied[0]
        return done[-1][1] if done and confirmed else []

    def produced(self, result: BatchResult) -> None:
        """`result`'s events are with the broker: the next commit of each ladder may shrink
        the markers of its matches that still hold events."""
        produced = self._produced
        for r in result.results:
            if r.events:
                ids = produced.get(r.match.ladder)
                if ids is None:
                    ids = produced[r.match.ladder] = set()
                ids.add(r.match.match_id)

    def unnamed(self) -> dict[str, tuple[int, list[str]]]:
        """Per ladder, the generation of this processor's last read or commit of it and the
        matches whose events were produced but that no commit named yet (`forgotten` once
        the store dropped their events)."""
        return {
            ladder: (self._watermarks.get(ladder, (0, 0))[0], list(ids))
            for ladder, ids in self._produced.items()
            if ids
        }

    def forgotten(self, named: dict[str, tuple[int, list[str]]]) -> None:
        """The store dropped the events of the matches `named` (as `unnamed` gave them)."""
        for ladder, (_, ids) in named.items():
            self._produced.get(ladder, set()).difference_update(ids)

    def confirm(self, ladder: str, results: list[MatchResult]) -> tuple[list[MatchResult], set[str]]:
        """`results`, with matches found applied by this processor's own unconfirmed commit
        (its reply was lost) reported as newly applied, not as duplicates; and their ids (the
        caller settles them once its call returns)."""
        unconfirmed = self._unconfirmed.get(ladder)
        if not unconfirmed:
            return results, set()
        mine = [r.duplicate and r.match.match_id in unconfirmed for r in results]
        if not any(mine):
            return results, set()
        confirmed = {r.match.match_id for r, m in zip(results, mine) if m}
        return [r._replace(duplicate=False) if m else r for r, m in zip(results, mine)], confirmed
