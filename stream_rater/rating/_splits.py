"""Splits of a pool of players into teams of given sizes, as `rating.balance.balance`
searches them: how many there are, and each one. Pure combinatorics, no model."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence


def labelled_splits(team_sizes: Sequence[int]) -> int:
    """Ways to deal sum(team_sizes) players to teams of these sizes (teams told apart)."""
    count = math.factorial(sum(team_sizes))
    for size in team_sizes:
        count //= math.factorial(size)
    return count


def splits(players: list[int], sizes: list[int]) -> Iterator[list[list[int]]]:
    """Every split of `players` into teams of `sizes`, each once: teams of equal size are
    interchangeable, so a split is skipped when a permutation of them was seen."""
    seen: set[frozenset[tuple[int, frozenset[int]]]] = set()
    for split in labelled(players, sizes):
        key = frozenset((len(team), frozenset(team)) for team in split)
        if key not in seen:
            seen.add(key)
            yield split


def labelled(players: list[int], sizes: list[int]) -> Iterator[list[list[int]]]:
    """Every split of `players` into teams of `sizes`, teams told apart (`labelled_splits` of them)."""
    if not sizes:
        yield []
        return
    for chosen in itertools.combinations(players, sizes[0]):
        left = [p for p in players if p not in chosen]
        for tail in labelled(left, sizes[1:]):
            yield [list(chosen), *tail]
