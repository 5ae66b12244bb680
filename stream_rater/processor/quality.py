"""Live prediction quality: each applied match's `rating.scoring.MatchScore` turned into what
the store keeps with the batch's commit (`Commit.quality`), and the read of what it kept.

Per (ladder, scorer) — the live model's scorer is named ``live``; a shadow model is scored
by the same code under its own name — the store keeps, in the same atomic commit as the
batch's markers (so a redelivered match is never counted twice):

- cumulative sums (`FIELDS`): ``matches``, ``pairs`` (decisive pairs), ``wrong`` (wrong pairs,
  ties ½), ``two_team`` (two-team matches scored), ``log_loss`` and ``brier`` (their sums),
  and per calibration bin k ``bin:k:n`` (pairs), ``bin:k:p`` (summed predicted probability)
  and ``bin:k:o`` (pairs the first-listed team won);
- the last `WINDOW` matches' scores, newest first, each ``[pairs, wrong, log_loss|None,
  brier|None, [[bin, p, won], …]]`` (the ``?last=N`` window).

`summary` gives `offline.evaluate`'s field names and definitions, so live and replay agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stream_rater.rating.scoring import MatchScore, calibration_bin
from stream_rater.store.values import QUALITY_WINDOW

#: The live model's scorer name.
LIVE = "live"
#: Calibration bins (as `offline.evaluate`'s default).
BINS = 10
#: Most recent match scores kept per (ladder, scorer): the largest ``?last=N``.
WINDOW = QUALITY_WINDOW
#: Consecutive stretches of the last N matches that ``over_time`` gives.
STRETCHES = 10


def record(score: MatchScore) -> list[Any]:
    """One match's score as the window keeps it."""
    wrong, log_loss, brier, calibration = score  # unpacked: no named tuple's lookups
    bins = []
    for p, a_won in calibration:  # a loop, not a list comprehension (a frame of its own)
        bins.append([calibration_bin(p, BINS), p, a_won])
    return [len(wrong), math.fsum(wrong), log_loss, brier, bins]


#: Per calibration bin, the names of its three sums.
_BIN_KEYS = [(f"bin:{k}:n", f"bin:{k}:p", f"bin:{k}:o") for k in range(BINS)]


def increments(records: Iterable[Sequence[Any]]) -> dict[str, float]:
    """The cumulative sums' increments of a batch's match `records` (oldest first), each sum
    added up in the records' order, each bin's keys in the order the bins first appear."""
    matches = pairs = two_team = 0
    wrong = log_loss = brier = 0.0
    bins: dict[int, list[Any]] = {}  # bin → [pairs, summed p, pairs won]: locals, not dict keys
    for n, wrong_pairs, loss, squares, calibration in records:
        matches += 1
        pairs += n
        wrong += wrong_pairs
        if loss is not None:
            two_team += 1
            log_loss += loss
            brier += squares
        for k, p, won in calibration:
            sums = bins.get(k)
            if sums is None:
                bins[k] = [1, 0.0 + p, 0 + won]
            else:
                sums[0] += 1
                sums[1] += p
                sums[2] += won
    add: dict[str, float] = {
        "matches": matches,
        "pairs": pairs,
        "wrong": wrong,
        "two_team": two_team,
        "log_loss": log_loss,
        "brier": brier,
    }
    for k, sums in bins.items():
        add |= zip(_BIN_KEYS[k], sums)  # k from `record`: 0 <= k < BINS
    return add


def over_time(window: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """The window's matches (newest first) in up to `STRETCHES` consecutive stretches of equal
    numbers of matches, oldest first, each with its ``matches``, ``pairs``, ``wrong_order``
    and ``log_loss``."""
    ordered = list(reversed(window))
    n = min(STRETCHES, len(ordered))
    stretches = []
    for w in range(n):
        part = summary({}, ordered[w * len(ordered) // n : (w + 1) * len(ordered) // n])
        stretches.append({k: part[k] for k in ("matches", "pairs", "wrong_order", "log_loss")})
    return stretches


def summary(totals: Mapping[str, float], window: Sequence[Sequence[Any]] | None = None) -> dict[str, Any]:
    """`offline.evaluate.Summary`'s figures (``matches``, ``pairs``, ``wrong_order``,
    ``two_team``, ``log_loss``, ``brier``, ``calibration``) of cumulative `totals`, or of the
    match records of `window` when given."""
    if window is not None:
        totals = increments(window)
    pairs, two = int(totals.get("pairs", 0)), int(totals.get("two_team", 0))
    calibration = []
    for k in range(BINS):
        n = int(totals.get(f"bin:{k}:n", 0))
        calibration.append(
            {
                "low": k / BINS,
                "high": (k + 1) / BINS,
                "count": n,
                "mean_predicted": totals[f"bin:{k}:p"] / n if n else None,
                "observed": totals[f"bin:{k}:o"] / n if n else None,
            }
        )
    return {
        "matches": int(totals.get("matches", 0)),
        "pairs": pairs,
        "wrong_order": totals["wrong"] / pairs if pairs else None,
        "two_team": two,
        "log_loss": totals["log_loss"] / two if two else None,
        "brier": totals["brier"] / two if two else None,
        "calibration": calibration,
    }
