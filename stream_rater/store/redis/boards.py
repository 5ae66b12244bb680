"""What a Redis store's own commits left on a ladder's leaderboards, so that the next commit
need not ask Redis for its players' old scores (``previous`` in ``commit.lua``).

The running sum ``lb:sum`` adds each commit's new scores and takes off its players' old ones,
which the commit script otherwise reads with ``ZMSCORE`` (about a tenth of Redis's CPU per
match). After a commit the store knows exactly what its written players hold on their board:
the score it ranked them with, or nothing. That stays true until something else changes the
board: another commit (which moves the watermark: the script uses ``previous`` only where the
meta hash still shows the commit's read watermark), a trim outside a commit (which takes
players off: the script uses it only where the board's ``ZCARD`` is the one this store's last
commit left), or a trim inside this store's own later commits, which takes off players idle
since its cutoff: an entry whose last match is older than the newest cutoff sent is not used.
A player not known is asked for as before, and the sum is added up in the same order, from
the same numbers: ``lb:sum`` stays the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stream_rater.store.status import text
from stream_rater.store.values import Commit

#: Most players known in all (`KnownBoards._bound`); the others are asked for again.
LIMIT = 200_000


@dataclass(slots=True)
class _Known:
    """One ladder's boards as this store's last commit to it left them (at `generation` and
    `watermark`): per board (mode, or None) its ZCARD, per written player id its score there
    (False: not on it) and its last match; `since`, the newest trim cutoff sent since."""

    generation: int
    watermark: int
    since: float | None = None
    cards: dict[str | None, int] = field(default_factory=dict)
    scores: dict[str, tuple[float | bool, float | None]] = field(default_factory=dict)

    def previous(self, player_id: str) -> float | bool | None:
        """What `player_id` holds on its board: its score, False (not on it) or None (not
        known, or on it with a last match before a trim cutoff sent since: maybe trimmed)."""
        score, last = self.scores.get(player_id, (None, None))
        if score is False or last is None or self.since is None or last >= self.since:
            return score
        return None


@dataclass(frozen=True, slots=True)
class _Sent:
    """A commit's call: its generation, trim cutoff and modes' boards (in the script's order)."""

    generation: int
    since: float | None
    modes: Sequence[str | None]


class KnownBoards:
    """The boards this store's commits left, per ladder (see the module docstring)."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._ladders: dict[str, _Known] = {}
        self._sent: dict[int, _Sent] = {}

    def fields(
        self, commit: Commit, generation: int, since: float | None, boards: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The commit script's fields ``previous`` and ``cards`` for `commit` (of `generation`,
        trimming at `since`; `boards`: its `mode_boards` fields), or none; remembers the call
        until its reply (`answered`)."""
        modes: Sequence[str | None] = boards.get("boards") or [None]
        self._sent[id(commit)] = _Sent(generation, since, modes)
        known = self._ladders.get(commit.ladder)
        if known is None or not self._current(known, commit, generation):
            return {}
        previous = [None if w.is_effect else known.previous(w.player_id) for w in commit.writes]
        if all(p is None for p in previous):
            return {}
        return {"previous": previous, "cards": [known.cards.get(mode, -1) for mode in modes]}

    @staticmethod
    def _current(known: _Known, commit: Commit, generation: int) -> bool:
        """Whether `known` is of the read `commit` was computed from (a live, non-season commit)."""
        return (
            commit.generation is None
            and commit.season is None
            and known.generation == generation
            and commit.read_at == (generation, known.watermark)
        )

    def answered(self, commit: Commit, reply: Sequence[Any]) -> None:
        """`commit`'s reply: ``['ok', ZCARD per board]`` keeps what it left; a refusal forgets
        the ladder."""
        sent = self._sent.pop(id(commit), None)
        ladder = commit.ladder
        if (
            sent is None
            or text(reply[0]) != "ok"
            or len(reply) != 1 + len(sent.modes)
            or commit.generation is not None
            or commit.read_at is None
        ):
            self._ladders.pop(ladder, None)
            return
        known = self._ladders.pop(ladder, None)  # re-inserted last: the most recently committed
        if known is None or not self._current(known, commit, sent.generation):
            known = _Known(sent.generation, commit.read_at[1])
        self._ladders[ladder] = known
        known.watermark = commit.read_at[1] + len(commit.markers)
        known.cards.update(zip(sent.modes, (int(c) for c in reply[1:])))
        since = sent.since
        if since is not None:
            known.since = since if known.since is None else max(known.since, since)
        for write in commit.writes:
            if write.is_effect:
                continue
            score, last = write.leaderboard_score, write.active
            ranked = score is not None and not (since is not None and last is not None and last < since)
            known.scores[write.player_id] = (float(score) if ranked else False, last)  # type: ignore[arg-type]
        self._bound(known)

    def _bound(self, newest: _Known) -> None:
        """At most `limit` players known in all: the ladders committed to least recently are
        forgotten first, then `newest`'s players."""
        total = sum(len(k.scores) for k in self._ladders.values())
        for ladder in list(self._ladders):
            if total <= self.limit or self._ladders[ladder] is newest:
                break
            total -= len(self._ladders.pop(ladder).scores)
        if total > self.limit:
            newest.scores.clear()

    def forget(self, commits: Sequence[Commit]) -> None:
        """Drop the calls of `commits` not answered (a failed round trip) and their ladders."""
        for commit in commits:
            if self._sent.pop(id(commit), None) is not None:
                self._ladders.pop(commit.ladder, None)
