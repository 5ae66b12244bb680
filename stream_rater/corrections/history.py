"""A ladder's history for a re-rate: files first, then the matches topic in log order."""

from __future__ import annotations

from collections.abc import Iterable

from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.contracts import Limits, MatchFinished
from stream_rater.corrections.rerate import Entry
from stream_rater.offline.verify import ladder_history
from stream_rater.service.kafka_io import read_log


class TopicHistory:
    """`ladder`'s matches: `files` (matches the topic no longer retains, in order; they may
    overlap its start: a match applied twice counts once), then the ladder's records of the
    matches topic from the earliest retained offset; each `read` returns what was appended
    since the previous one."""

    def __init__(self, settings: Settings, ladders: Ladders, ladder: str,
                 files: Iterable[MatchFinished] = ()) -> None:
        self.settings, self.ladders, self.ladder = settings, ladders, ladder
        self._files: list[Entry] = [(match, None) for match in files]
        self._reached: dict[int, int] | None = None

    async def read(self) -> list[Entry]:
        """The entries not returned before (all of them the first time)."""
        records, self._reached = await read_log(self.settings, self.settings.topic_matches, start=self._reached)
        found = ladder_history(records, self.ladders, self.ladder,
                               Limits(max_event_bytes=self.settings.max_event_bytes))
        entries, self._files = self._files + list(zip(found.matches, found.where)), []
        return entries

    def reached(self) -> dict[int, int]:
        """Partition → offset up to which the topic was read."""
        return dict(self._reached or {})
