"""Modes of a ladder (issue 48) on the wire: a match event's ``mode``, its rule, and how a
player's state in one mode is named in the store.

A mode name is a plain word (`MODE_NAME`): a lower-case letter, then up to 31 lower-case
letters, digits, ``_`` or ``-``. It never holds `SEPARATOR`, so a stored id
``<mode>@<player id>`` (`stored_id`) splits back exactly (`split_stored`) whatever the player
id, and a board name ``<ladder>@<mode>`` (`board_name`) names a mode's leaderboard in the
store's board reads (ladder names hold no ``@`` either).
"""

from __future__ import annotations

import re

#: A mode's name: a plain word.
MODE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}\Z")
#: Between a mode and a player id in a stored id, and between a ladder and a mode in a board name.
SEPARATOR = "@"
#: What `mode_problem` says a good name is.
PLAIN_WORD = "must be a plain word: a lower-case letter, then up to 31 lower-case letters, digits, '_' or '-'"


def mode_problem(name: object) -> str | None:
    """Why `name` is no mode name, or None if it is one."""
    if isinstance(name, str) and MODE_NAME.match(name):
        return None
    return PLAIN_WORD


def stored_id(mode: str, player_id: str) -> str:
    """The id under which a moded ladder stores `player_id`'s state in `mode`."""
    return f"{mode}{SEPARATOR}{player_id}"


def split_stored(stored: str) -> tuple[str, str]:
    """(mode, player id) of a stored id of a moded ladder."""
    mode, _, player_id = stored.partition(SEPARATOR)
    return mode, player_id


def board_name(ladder: str, mode: str | None) -> str:
    """The name the store's board reads take for `ladder`'s leaderboard in `mode` (None: the
    ladder's own board)."""
    return ladder if mode is None else f"{ladder}{SEPARATOR}{mode}"


def split_board(name: str) -> tuple[str, str | None]:
    """(ladder, mode or None) of a board name (`board_name`)."""
    ladder, sep, mode = name.partition(SEPARATOR)
    return (ladder, mode) if sep else (name, None)
