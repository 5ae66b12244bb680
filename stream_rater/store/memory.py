"""In-process state store for replay and unit tests; same semantics as the Redis store."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Sequence

from stream_rater.store.base import Commit, CommitConflict, Lookup, PlayerState, Snapshot, StateStore


class MemoryStore(StateStore):
    """Dict-backed `StateStore`. Commits are checked exactly like the Redis script's."""

    def __init__(self, history_limit: int = 100) -> None:
        self.history_limit = history_limit
        self.round_trips = 0
        self._players: dict[str, dict[str, PlayerState]] = defaultdict(dict)
        self._effects: dict[str, dict[str, PlayerState]] = defaultdict(dict)
        self._applied: dict[str, dict[str, list[dict]]] = defaultdict(dict)
        self._scores: dict[str, dict[str, float]] = defaultdict(dict)
        self._history: dict[tuple[str, str], deque[dict]] = {}
        self._watermarks: dict[str, int] = defaultdict(int)

    async def read(
        self, ladder: str, player_ids: Iterable[str], effect_ids: Iterable[str], match_ids: Iterable[str]
    ) -> Snapshot:
        self.round_trips += 1
        players, effects, applied = self._players[ladder], self._effects[ladder], self._applied[ladder]
        return Snapshot(
            players={p: players[p] for p in player_ids if p in players},
            effects={e: effects[e] for e in effect_ids if e in effects},
            applied={m: applied[m] for m in match_ids if m in applied},
            watermark=self._watermarks[ladder],
        )

    async def commit(self, commit: Commit) -> None:
        self.round_trips += 1
        ladder = commit.ladder
        applied = self._applied[ladder]
        for match_id in commit.markers:
            if match_id in applied:
                raise CommitConflict(f"match {match_id!r} already applied")
        for write in commit.writes:
            table = self._effects[ladder] if write.is_effect else self._players[ladder]
            current = table.get(write.player_id)
            if (current.version if current else 0) != write.expected_version:
                raise CommitConflict(f"state of {write.player_id!r} changed since it was read")
        for write in commit.writes:
            table = self._effects[ladder] if write.is_effect else self._players[ladder]
            table[write.player_id] = write.state
            if write.leaderboard_score is not None:
                self._scores[ladder][write.player_id] = write.leaderboard_score
        applied.update(commit.markers)
        self._watermarks[ladder] += len(commit.markers)
        for player_id, entries in commit.history.items():
            log = self._history.setdefault((ladder, player_id), deque(maxlen=self.history_limit))
            log.extendleft(entries)

    async def players(self, ladder: str, effects: bool = False) -> dict[str, PlayerState]:
        return dict((self._effects if effects else self._players)[ladder])

    async def leaderboard(self, ladder: str, top: int) -> list[tuple[str, float]]:
        ranked = sorted(self._scores[ladder].items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        return ranked[:top]

    async def history(self, ladder: str, player_id: str, limit: int) -> list[dict]:
        return list(self._history.get((ladder, player_id), ()))[:limit]

    async def lookup(self, ladder: str, player_ids: Sequence[str]) -> Lookup:
        self.round_trips += 1
        players = self._players[ladder]
        board = [p for p, _ in await self.leaderboard(ladder, len(self._scores[ladder]))]
        place = {p: i for i, p in enumerate(board)}
        return Lookup({p: players[p] for p in player_ids if p in players},
                      {p: place[p] for p in player_ids if p in place}, len(board))

    async def ladders(self) -> list[str]:
        return sorted(name for name, players in self._players.items() if players)
