"""A ladder's modes (issue 48): ``[ladders.L.modes.M]`` tables, each a mode of the ladder with
its overrides of the ladder's model parameters, and the ladder-level ``mode_coupling`` and
``default_mode``.

TOML only (like shadows)::

    [ladders.arena]
    model = "trueskill"
    mode_coupling = 0.5        # ρ in [0, 1]: how much a player's other modes tell of a new one
    default_mode = "duel"      # optional: the mode of a match that names none

    [ladders.arena.modes.duel]
    draw_probability = 0.08    # overrides of the ladder's model parameters, for this mode

    [ladders.arena.modes.ffa]  # an empty table: the ladder's parameters as they are

Each mode rates with its own model instance (the ladder's parameters, then the mode's), and
keeps its own states, leaderboard and live quality; all modes of a ladder are one ladder for
order, idempotency, re-rates and checkpoints (one partition, one Redis slot). A player's first
match in a mode starts from `rating.modes.first_in_mode` of their states in the ladder's other
modes. ``mode_coupling`` defaults to 0.5: half-way between "modes independent" (0, the plain
prior) and "one skill" (1). A veteran of another mode starts half-way to that skill with σ² at
most 0.75 σ₀² + 0.25 σₖ², so a wrong guess costs a few matches, while no sharing throws away
what the ladder knows; ``tune`` fits it per ladder. Without ``default_mode`` a match of a moded
ladder must name its mode (else the DLQ): a silent default would rate a producer's forgotten
field as a real mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from stream_rater.contracts.modes import mode_problem

#: Ladder-level parameters of modes, with their defaults.
MODE_PARAMS: dict[str, Any] = {"mode_coupling": 0.5, "default_mode": None}


class ModeError(ValueError):
    """A mode table or mode parameter that cannot be used."""


def mode_tables(header: str, table: Any, where: Callable[..., str]) -> dict[str, dict[str, tuple[Any, str]]]:
    """The ``modes`` sub-table of ladder table `header`: mode → {parameter → (value, where)}."""
    if not isinstance(table, dict):
        raise ModeError(f"{where(header, 'modes')}: [{header}] modes: must be a table")
    modes: dict[str, dict[str, tuple[Any, str]]] = {}
    for mode, params in table.items():
        sub = f"{header}.modes.{mode}"
        problem = mode_problem(mode)
        if problem is not None:
            raise ModeError(f"{where(sub)}: [{sub}]: mode name {mode!r} {problem}")
        if not isinstance(params, dict):
            raise ModeError(f"{where(sub)}: [{sub}]: must be a table of parameter overrides")
        modes[mode] = {k: (v, f"{where(sub, k)}: [{sub}] {k}") for k, v in params.items()}
    return modes


def check_mode_params(name: str, params: Mapping[str, Any], modes: Mapping[str, Any], where: str) -> None:
    """`mode_coupling` in [0, 1] and a declared `default_mode`, and neither without modes."""
    coupling, default = params.get("mode_coupling"), params.get("default_mode")
    if not modes:
        given = [k for k in MODE_PARAMS if k in params]
        if given:
            raise ModeError(
                f"{where}: {given[0]}: ladder {name!r} has no modes ([ladders.{name}.modes.<mode>])"
            )
        return
    if coupling is not None and (
        isinstance(coupling, bool) or not isinstance(coupling, int | float) or not 0.0 <= coupling <= 1.0
    ):
        raise ModeError(f"{where}: mode_coupling: must be a number from 0 to 1, got {coupling!r}")
    if default is not None and default not in modes:
        raise ModeError(
            f"{where}: default_mode: {default!r} is not a mode of ladder {name!r} ({', '.join(modes)})"
        )


def coupling(params: Mapping[str, Any]) -> float:
    """The ladder's ``mode_coupling`` ρ (default `MODE_PARAMS`)."""
    return float(params.get("mode_coupling", MODE_PARAMS["mode_coupling"]))
