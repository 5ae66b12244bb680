"""The leaderboards of a ladder with modes (issue 48; `contracts.modes`) in the Redis store.

A moded ladder stores a player's state in mode M under the id ``M@<player id>`` in its one
players buckets; its leaderboard is one per mode, in the ladder's slot beside the ladder's own
keys: ``m:<mode>:lb`` (zset by player id), ``m:<mode>:act`` (its activity index) and
``m:<mode>:meta`` (its running sum, field ``lb:sum``), of each generation — the same three
keys the ladder's own board has (``lb``, ``act``, ``meta``), so the board script reads a mode's
board as it reads the ladder's (`board_suffixes`). The commit script ranks each player write on
its mode's board (``rank_modes`` in ``commit.lua``).
"""

from __future__ import annotations

from typing import Any

from stream_rater.contracts.modes import split_stored
from stream_rater.store.redis.keys import KeyLayout
from stream_rater.store.values import Commit

#: A board's keys by their suffix: the board, its activity index, the hash of its running sum.
BOARD_PARTS = ("lb", "act", "meta")


def board_suffixes(mode: str | None, board: str = "lb") -> dict[str, str]:
    """The key suffixes (`KeyLayout.named_keys`' `instead`) of the board `board` (``lb``, or an
    ended season's ``lb:season:<id>``) and its activity index and running sum: the ladder's
    own (`mode` None), or a mode's."""
    if mode is None:
        return {"lb": board}
    return {"lb": f"m:{mode}:{board}", "act": f"m:{mode}:act", "meta": f"m:{mode}:meta"}


def mode_boards(
    layout: KeyLayout, ladder: str, generation: int, commit: Commit
) -> tuple[list[str], dict[str, Any]]:
    """The keys (after the commit's others) and the commit script's fields of a moded
    ladder's commit: its modes' boards; nothing for a ladder without modes."""
    if not commit.moded:
        return [], {}
    modes: dict[str, int] = {}
    board, board_ids = [], []
    for write in commit.writes:
        if write.is_effect:
            board.append(0)
            board_ids.append(write.player_id)
            continue
        mode, player_id = split_stored(write.player_id)
        board.append(modes.setdefault(mode, len(modes) + 1))
        board_ids.append(player_id)
    keys = [layout._gen_key(ladder, generation, f"m:{mode}:{part}") for mode in modes for part in BOARD_PARTS]
    return keys, {"boards": list(modes), "board": board, "board_ids": board_ids}
