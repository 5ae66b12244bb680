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

import dataclasses
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, Self

from stream_rater.contracts.modes import mode_problem
from stream_rater.rating import registry

#: Ladder-level parameters of modes, with their defaults.
MODE_PARAMS: dict[str, Any] = {"mode_coupling": 0.5, "default_mode": None}


class LadderConfigError(ValueError):
    """Ladder configuration that cannot be used; the message says where and why (`config.ladders`)."""


def mode_tables(header: str, table: Any, where: Callable[..., str]) -> dict[str, dict[str, tuple[Any, str]]]:
    """The ``modes`` sub-table of ladder table `header`: mode → {parameter → (value, where)}."""
    if not isinstance(table, dict):
        raise LadderConfigError(f"{where(header, 'modes')}: [{header}] modes: must be a table")
    modes: dict[str, dict[str, tuple[Any, str]]] = {}
    for mode, params in table.items():
        sub = f"{header}.modes.{mode}"
        problem = mode_problem(mode)
        if problem is not None:
            raise LadderConfigError(f"{where(sub)}: [{sub}]: mode name {mode!r} {problem}")
        if not isinstance(params, dict):
            raise LadderConfigError(f"{where(sub)}: [{sub}]: must be a table of parameter overrides")
        modes[mode] = {k: (v, f"{where(sub, k)}: [{sub}] {k}") for k, v in params.items()}
    return modes


def check_mode_params(name: str, params: Mapping[str, Any], modes: Mapping[str, Any], where: str) -> None:
    """`mode_coupling` in [0, 1] and a declared `default_mode`, and neither without modes."""
    coupling, default = params.get("mode_coupling"), params.get("default_mode")
    if not modes:
        given = [k for k in MODE_PARAMS if k in params]
        if given:
            raise LadderConfigError(
                f"{where}: {given[0]}: ladder {name!r} has no modes ([ladders.{name}.modes.<mode>])"
            )
        return
    if coupling is not None and (
        isinstance(coupling, bool) or not isinstance(coupling, int | float) or not 0.0 <= coupling <= 1.0
    ):
        raise LadderConfigError(f"{where}: mode_coupling: must be a number from 0 to 1, got {coupling!r}")
    if default is not None and default not in modes:
        raise LadderConfigError(
            f"{where}: default_mode: {default!r} is not a mode of ladder {name!r} ({', '.join(modes)})"
        )


class ModedLadder:
    """What a ladder (`config.ladders.Ladder`, a dataclass with these fields) knows of its modes."""

    params: Mapping[str, Any]
    #: Mode name → that mode's overrides of the model parameters (empty: no modes).
    modes: Mapping[str, Mapping[str, Any]]

    @property
    def default_mode(self) -> str | None:
        """The mode of a match that names none (None: it must name one)."""
        mode: str | None = self.params.get("default_mode")
        return mode

    @property
    def mode_coupling(self) -> float:
        """ρ of `rating.modes.first_in_mode` for this ladder's modes (default `MODE_PARAMS`)."""
        return float(self.params.get("mode_coupling", MODE_PARAMS["mode_coupling"]))

    def mode_ladder(self, mode: str) -> Self:
        """This ladder as `mode` rates: same name, its parameters then the mode's overrides
        (so its own model instance), no modes or shadows; built once per mode."""
        found = self._mode_ladders.get(mode)
        if found is None:
            params = {**self.params, **self.modes[mode]}
            found = self._mode_ladders[mode] = dataclasses.replace(self, params=params, modes={}, shadows=())  # type: ignore[type-var]
        return found

    @cached_property
    def _mode_ladders(self) -> dict[str, Self]:
        return {}


def mode_overrides(
    name: str,
    modes: Mapping[str, Mapping[str, tuple[Any, str]]],
    model: str,
    params: Mapping[str, Any],
    where: str,
) -> dict[str, dict[str, Any]]:
    """Ladder `name`'s modes: each mode's overrides (value, where) as parameter → value, each
    one of `model`'s parameters; its `params` (at `where`) checked by `check_mode_params`."""
    allowed = registry.model_parameters(model)
    found: dict[str, dict[str, Any]] = {}
    for mode, overrides in modes.items():
        found[mode] = {}
        for key, (value, where) in overrides.items():
            if key not in allowed:
                raise LadderConfigError(
                    f"{where}: model {model!r} has no parameter {key!r} "
                    f"(a mode overrides model parameters: {', '.join(sorted(allowed))})"
                )
            found[mode][key] = value
    check_mode_params(name, params, found, where)
    return found


def check_mode_models(
    ladder: ModedLadder, modes: Mapping[str, Mapping[str, tuple[Any, str]]], where: str
) -> None:
    """Build each mode's model: a bad override value fails here, at start-up, saying where."""
    for mode, overrides in modes.items():
        try:
            ladder.mode_ladder(mode).rating_model  # type: ignore[attr-defined]  # noqa: B018
        except (ValueError, TypeError) as e:
            first = next(iter(overrides.values()), (None, where))[1]
            raise LadderConfigError(f"{first}: mode {mode!r}: {e}") from e
