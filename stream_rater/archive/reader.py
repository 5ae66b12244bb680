"""Reading the archive: a player's rating-changed events newest first, page by page, and the
events and placings of one match — for the read API's history and `explain` beyond Redis's window.

One autocommit connection, opened on first use and opened again after it broke; calls are
serialised on it (reads are small and indexed: ``rating_events_player``, ``rating_events_match``).
Entries are the events' wire form, as Redis's history gives them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

_HISTORY = (
    "SELECT position, event FROM rating_events WHERE ladder = %s AND player_id = %s AND position < %s "
    "ORDER BY position DESC LIMIT %s"
)
_MATCH = "SELECT position, event FROM rating_events WHERE ladder = %s AND match_id = %s AND kind = 'match' ORDER BY position"
_NEWER = (
    "SELECT position, event FROM rating_events WHERE ladder = %s AND player_id = %s AND position > %s "
    "AND kind = 'correction' ORDER BY position DESC"
)
#: The player's events before `position` back to (and with) their previous match: seasons between.
_OLDER = (
    "SELECT position, event FROM rating_events WHERE ladder = %s AND player_id = %s AND position < %s "
    "AND position >= coalesce((SELECT max(position) FROM rating_events WHERE ladder = %s AND player_id = %s "
    "AND position < %s AND kind = 'match'), 0) ORDER BY position DESC"
)
_PLACINGS = "SELECT placings FROM match_placings WHERE ladder = %s AND match_id = %s"
_NO_CURSOR = 2**63 - 1


class ArchiveUnavailable(RuntimeError):
    """The archive's PostgreSQL cannot be reached or refused the read."""


@dataclass(frozen=True)
class HistoryPage:
    """Events of one player newest first, and the ``before`` cursor of the next page (None: the
    page reaches the player's first archived event)."""

    events: list[dict[str, Any]]
    next_before: int | None


class ArchiveReader:
    """Reads of the archive at ``url`` (``postgresql://…``)."""

    def __init__(self, url: str, connect_timeout: float = 5.0) -> None:
        """Keep the URL; nothing connects before the first read."""
        self.url = url
        self.connect_timeout = connect_timeout
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()

    async def _rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[int, dict[str, Any]]]:
        """The (position, event) rows of `sql`; `ArchiveUnavailable` when PostgreSQL fails."""
        return [(int(p), e) for p, e in await self._fetch(sql, params)]

    async def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of `sql`; `ArchiveUnavailable` when PostgreSQL fails."""
        import psycopg

        async with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = await psycopg.AsyncConnection.connect(
                        self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout))
                    )
                cursor = await self._conn.execute(sql.encode(), params)
                return list(await cursor.fetchall())
            except psycopg.Error as exc:
                await self._drop()
                raise ArchiveUnavailable(f"archive {safe_url(self.url)}: {one_line(exc)}") from exc

    async def _drop(self) -> None:
        """Close the connection (a broken one is opened again on the next read)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await conn.close()
            except Exception:
                pass

    async def history(
        self, ladder: str, player_id: str, limit: int, before: int | None = None
    ) -> HistoryPage:
        """`player_id`'s events on `ladder` newest first, at most `limit`, older than the cursor
        `before` (a `HistoryPage.next_before`) when given."""
        rows = await self._rows(
            _HISTORY, (ladder, player_id, _NO_CURSOR if before is None else before, limit + 1)
        )
        page = rows[:limit]
        return HistoryPage([e for _, e in page], page[-1][0] if len(rows) > limit else None)

    async def match_events(self, ladder: str, match_id: str) -> list[tuple[int, dict[str, Any]]]:
        """The match's rating-changed events (kind ``match``) with their positions, in arrival order."""
        return await self._rows(_MATCH, (ladder, match_id))

    async def placings(self, ladder: str, match_id: str) -> list[tuple[str, Any]] | None:
        """The match's rated players with their team's rank, as its marker kept them
        (`ReadStore.placings`); None when the archive has none (it read no such match)."""
        rows = await self._fetch(_PLACINGS, (ladder, match_id))
        return [(p, r) for p, r in rows[0][0]] if rows else None

    async def around(self, ladder: str, player_id: str, position: int) -> list[dict[str, Any]]:
        """What `explain` needs of a player around their event at `position`, newest first: the
        corrections after it, the event, and the events back to their previous match."""
        newer = await self._rows(_NEWER, (ladder, player_id, position))
        older = await self._rows(_OLDER, (ladder, player_id, position, ladder, player_id, position))
        at = await self._rows("SELECT position, event FROM rating_events WHERE position = %s", (position,))
        return [e for _, e in (*newer, *at, *older)]

    async def close(self) -> None:
        """Close the connection."""
        async with self._lock:
            await self._drop()


def one_line(exc: BaseException) -> str:
    """A driver error on one line (psycopg's messages span several), or its type's name."""
    return " ".join(str(exc).split()) or type(exc).__name__


def safe_url(url: str) -> str:
    """`url` without its password, for messages."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()
