"""Ladder configuration: which rating model, with which parameters, each ladder uses.

A ladder is a rating pool with one model; an event names its ladder (``default`` if it
names none) and may not switch that ladder's model. The ``default`` ladder always exists:
TrueSkill with default parameters unless configured otherwise.

TOML file (`Ladders.from_toml`)::

    [ladders.halo2-ffa]
    model = "trueskill"       # required: a model name of stream_rater.rating.registry
    draw_probability = 0.0    # every other key is a parameter of that model
    k = 3

Environment (`Ladders.from_env`, prefix ``STREAM_RATER_``)::

    STREAM_RATER_LADDER_HALO2_FFA=trueskill
    STREAM_RATER_LADDER_HALO2_FFA__DRAW_PROBABILITY=0.0
    STREAM_RATER_LADDER_MW4=sph-elo
    STREAM_RATER_LADDER_MW4__T=120

- ``<NAME>`` is lower-cased and ``_`` becomes ``-`` (``HALO2_FFA`` → ``halo2-ffa``).
  Ladder names are therefore lower-case letters, digits and ``-`` (not starting with
  ``-``) in every source, so each ladder can be named both ways; the names also sit in
  Redis keys, where braces would break the cluster hash tag.
- ``__`` separates the parameter. ``<PARAM>`` matches the model's parameter names
  ignoring case (``__T`` → ``T``, ``__DRAW_PROBABILITY`` → ``draw_probability``).
- Values are typed like ``--param`` values, see `parse_value`.

Merging (`load_ladders`): the environment overrides the file, ladder by ladder. An
environment model equal to the file's keeps the file's parameters (environment values
win key by key); a different model drops them, since they were the other model's. An
environment parameter for a ladder that no source gives a model is an error, except for
``default``.

Beside the model's parameters a ladder may set its rules (`config.rules`: players not ranked
yet, leaderboard eligibility, rated-game rules, season resets, inactivity decay), in the same
table and the same environment form (``STREAM_RATER_LADDER_MW4__LEADERBOARD_MIN_GAMES=10``).

Shadows (`Ladder.shadows`; README "Shadow models"), in the file only: ``[ladders.L.shadows.S]``
with a model and its parameters (the live ladder's rules inherited) is the internal ladder
``L~S`` (`shadow_name`), rated beside L, never published nor named by an event.

Modes (`config.modes`; issue 48), in the file only: ``[ladders.L.modes.M]``; a shadow of a
moded ladder has its modes.

``calibration`` (``"temperature:T"``, ``"platt:a,b"`` and/or ``"draw:e"``, `rating.calibration`;
``stream-rater tune --calibrate`` prints the line) maps the model's predicted win and draw
probabilities wherever they are asked (`rating.predict.predict`); it changes no rating.

``k`` (of μ − kσ) is an ordinary TrueSkill parameter; another model given one refuses it.

The loaders build every ladder's model once, so a bad parameter fails at start-up, not on
the first event. Errors (`LadderConfigError`) say where: ``ladders.toml:7: [ladders.mw4]
k: model 'sph-elo' has no parameter 'k' …`` or ``STREAM_RATER_LADDER_MW4__K: …``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, TypeVar, overload

from stream_rater.config import modes as moding
from stream_rater.config.modes import LadderConfigError, ModedLadder
from stream_rater.config.param_text import parse_param, parse_value
from stream_rater.config.rules import RULE_PARAMS, RuleError, Rules
from stream_rater.config.settings import ENV_PREFIX
from stream_rater.contracts.match import DEFAULT_LADDER
from stream_rater.rating import registry
from stream_rater.rating.base import RatingModel
from stream_rater.rating.calibration import Calibration

__all__ = [
    "DEFAULT_LADDER",
    "DEFAULT_MODEL",
    "ENV_PREFIX",
    "Ladder",
    "LadderConfigError",
    "Ladders",
    "UnknownLadderError",
    "load_ladders",
    "parse_param",
    "parse_value",
    "shadow_name",
    "split_shadow",
]

DEFAULT_MODEL = "trueskill"
#: Between a ladder's name and its shadow's in the shadow's internal ladder name.
SHADOW_SEPARATOR = "~"
#: Ladder parameters that are neither the model's nor rules, with their defaults.
LADDER_PARAMS: dict[str, Any] = {"calibration": None, **moding.MODE_PARAMS}

_T = TypeVar("_T")
_REQUIRED: Any = object()


class UnknownLadderError(KeyError):
    """A ladder name that is not configured."""

    def __init__(self, name: str, known: Iterable[str], source: str = "") -> None:
        """`source`: where the configured ladders came from (`Ladders.source`), which `str`
        adds; `message` leaves it out (the read API's 404 shows no file path)."""
        super().__init__(name)
        self.name = name
        self.message = f"unknown ladder {name!r} (configured: {', '.join(sorted(known))})"
        self.source = source

    def __str__(self) -> str:
        return f"{self.message[:-1]}; {self.source})" if self.source else self.message


@dataclass(frozen=True)
class Ladder(ModedLadder):
    """A rating pool: its name, model name and model parameters (read-only), its modes."""

    name: str
    model: str
    params: Mapping[str, Any] = field(default_factory=dict)
    #: The shadow models rated beside this ladder (each a `Ladder` with `shadow_of` set).
    shadows: tuple[Ladder, ...] = ()
    #: For a shadow, the live ladder's name (this one's is ``<shadow_of>~<shadow>``); else None.
    shadow_of: str | None = None
    #: Its modes (`config.modes`): mode name → that mode's overrides of the model parameters.
    modes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        live, shadow = split_shadow(self.name)
        problem = _name_problem(live) or (None if shadow is None else _name_problem(shadow))
        if shadow is not None and self.shadow_of != live:
            problem = f"ladder name {self.name!r}: '~' names a shadow of {live!r} only"
        if problem:
            raise LadderConfigError(problem)
        for s in self.shadows:
            if s.shadow_of != self.name:
                raise LadderConfigError(f"ladder {s.name!r} is no shadow of {self.name!r}")
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "modes", MappingProxyType({m: dict(o) for m, o in self.modes.items()}))

    @cached_property
    def model_class(self) -> type[RatingModel]:
        """The model's class, for its traits (`needs_scores`, `supports_effects`)."""
        return registry.model_class(self.model)

    @cached_property
    def rating_model(self) -> RatingModel:
        """The model instance, built once per ladder (from the parameters that are not rules),
        with the ladder's `calibration`."""
        model = registry.create_model(self.model, model_params(self.params))
        model.calibration = calibration_of(self.params)
        return model

    @cached_property
    def rules(self) -> Rules:
        """The ladder's rules (`config.rules`), from its rule parameters."""
        return Rules.of(self.params)


def model_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The model's parameters among a ladder's (the others are rules, `config.rules`, and
    `LADDER_PARAMS`)."""
    return {k: v for k, v in params.items() if k not in RULE_PARAMS and k not in LADDER_PARAMS}


def calibration_of(params: Mapping[str, Any]) -> Calibration | None:
    """The ladder's ``calibration`` parameter parsed (None: not set); raises ValueError."""
    text = params.get("calibration")
    return None if text is None else Calibration.parse(text)


class Ladders(Mapping[str, Ladder]):
    """The configured ladders by name; ``default`` is always among them."""

    def __init__(self, ladders: Iterable[Ladder] = (), *, source: str = "") -> None:
        """`source` says where the ladders came from, for the unknown-ladder error (`load_ladders`
        sets it: the ladders file, or that there is none)."""
        self.source = source
        table: dict[str, Ladder] = {}
        for ladder in ladders:
            if ladder.name in table:
                raise LadderConfigError(f"ladder {ladder.name!r} is configured twice")
            table[ladder.name] = ladder
        table.setdefault(DEFAULT_LADDER, Ladder(DEFAULT_LADDER, DEFAULT_MODEL))
        self._table = table

    def __getitem__(self, name: str) -> Ladder:
        try:
            return self._table[name]
        except KeyError:
            raise UnknownLadderError(name, self._table, self.source) from None

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"Ladders({list(self._table.values())!r})"

    @overload
    def get(self, name: str) -> Ladder: ...

    @overload
    def get(self, name: str, default: _T) -> Ladder | _T: ...

    def get(self, name: str, default: Any = _REQUIRED) -> Any:
        """The ladder `name`; unlike ``dict.get``, raises `UnknownLadderError` when it is
        not configured unless a default is given."""
        ladder = self._table.get(name)
        if ladder is not None:
            return ladder
        if default is _REQUIRED:
            raise UnknownLadderError(name, self._table, self.source)
        return default

    def lookup(self, name: str) -> Ladder:
        """The ladder `name`, or the shadow so named (``<ladder>~<shadow>``): for reads. Events
        name live ladders only (`get`); raises `UnknownLadderError`."""
        live, shadow = split_shadow(name)
        if shadow is None:
            return self.get(name)
        for s in self.get(live).shadows:
            if s.name == name:
                return s
        raise UnknownLadderError(name, [s.name for s in self.get(live).shadows] or ["no shadows"])

    @property
    def default(self) -> Ladder:
        """The ladder of events that name none."""
        return self._table[DEFAULT_LADDER]

    @classmethod
    def from_toml(cls, path: str) -> Ladders:
        """Ladders of a TOML file (format in the module docstring), models checked."""
        return load_ladders(path, {})

    @classmethod
    def from_env(cls, environ: Mapping[str, str], prefix: str = ENV_PREFIX) -> Ladders:
        """Ladders of ``<prefix>LADDER_…`` variables (scheme in the module docstring)."""
        return load_ladders(None, environ, prefix)


def load_ladders(path: str | None, environ: Mapping[str, str], prefix: str = ENV_PREFIX) -> Ladders:
    """Ladders of the TOML file at `path` (if any) overridden by the environment, every
    model built once to check its parameters; raises `LadderConfigError`."""
    sources = _read_toml(path) if path else {}
    sources.setdefault(DEFAULT_LADDER, _Source(DEFAULT_MODEL, "default ladder", "default ladder"))
    for name, env in _read_env(environ, prefix).items():
        base = sources.get(name)
        if base is None or (env.model is not None and env.model != base.model):
            sources[name] = env
            env.shadows = base.shadows if base is not None else {}
            env.modes = base.modes if base is not None else {}
        else:
            base.params.update(env.params)
    where = f"ladders file {path}" if path else f"no ladders file: set {prefix}LADDERS_FILE or --ladders-file"
    return Ladders((_build(name, source) for name, source in sources.items()), source=where)


class ParamError(ValueError):
    """A model parameter (or, `name` None, the set of them) the model refuses."""

    def __init__(self, name: str | None, message: str) -> None:
        super().__init__(message)
        self.name = name


def check_params(model: str, params: Mapping[str, Any]) -> None:
    """Build `model` with `params`; raises `ParamError` naming the bad parameter
    (``beta=x: must be real number, not str``) or, when no single one is to blame, none."""
    try:
        registry.create_model(model, model_params(params))
        Rules.of(params)
        calibration_of(params)
    except (TypeError, ValueError) as exc:
        for name, value in params.items():
            try:
                if name in LADDER_PARAMS:
                    calibration_of({name: value})
                elif name in RULE_PARAMS:
                    Rules.of({name: value})
                else:
                    registry.create_model(model, {name: value})
            except (TypeError, ValueError) as one:
                raise ParamError(name, f"{name}={value}: {one}") from None
        raise ParamError(None, str(exc)) from None


def shadow_name(ladder: str, shadow: str) -> str:
    """The internal ladder name of `ladder`'s shadow `shadow`: ``<ladder>~<shadow>``."""
    return f"{ladder}{SHADOW_SEPARATOR}{shadow}"


def split_shadow(name: str) -> tuple[str, str | None]:
    """(live ladder, shadow) of a ladder name: ``("l", "s")`` for ``l~s``, ``("l", None)`` for ``l``
    — how the quality scoring keys a shadow's predictions by (ladder, scorer)."""
    live, sep, shadow = name.partition(SHADOW_SEPARATOR)
    return (live, shadow) if sep else (name, None)


# --- implementation ------------------------------------------------------------------

_NAME = re.compile(r"[a-z0-9][a-z0-9-]*\Z")


def _name_problem(name: str) -> str | None:
    if isinstance(name, str) and _NAME.match(name):
        return None
    return f"ladder name {name!r}: use lower-case letters, digits and '-' (starting with a letter or digit)"


@dataclass(slots=True)
class _Param:
    value: Any
    where: str
    ignore_case: bool


@dataclass(slots=True)
class _Source:
    """One ladder as a configuration source describes it, with places for messages."""

    model: str | None
    model_where: str
    where: str
    params: dict[str, _Param] = field(default_factory=dict)
    #: Shadow name → its source (`Ladder.shadows`).
    shadows: dict[str, _Source] = field(default_factory=dict)
    #: Mode → its parameter overrides, each (value, where) (`config.modes`).
    modes: dict[str, dict[str, tuple[Any, str]]] = field(default_factory=dict)


def _build(name: str, source: _Source, shadow_of: str | None = None) -> Ladder:
    if source.model is None:
        first = next(iter(source.params.values())).where
        raise LadderConfigError(f"{first}: ladder {name!r} has parameters but no model")
    try:
        allowed = {**registry.model_parameters(source.model), **RULE_PARAMS, **LADDER_PARAMS}
    except registry.UnknownModelError as e:
        raise LadderConfigError(f"{source.model_where}: {e}") from None
    params: dict[str, Any] = {}
    for key, param in source.params.items():
        actual = _resolve(key, allowed, param.ignore_case)
        if actual is None:
            raise LadderConfigError(
                f"{param.where}: model {source.model!r} has no parameter {key!r} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        params[actual] = param.value
    modes = moding.mode_overrides(name, source.modes, source.model, params, source.where)
    shadows = tuple(_shadow(name, s, source, params) for s in source.shadows.items())
    ladder = Ladder(name, source.model, params, shadows, shadow_of, modes)
    try:
        ladder.rating_model  # noqa: B018 -- builds the model: unknown parameters raise here
        if ladder.rules.party_effects and not ladder.model_class.supports_effects:
            raise RuleError(f"party_effects: model {source.model!r} does not support effects")
    except (ValueError, TypeError, RuleError) as e:
        raise LadderConfigError(f"{source.where}: {e}") from e
    moding.check_mode_models(ladder, source.modes, source.where)
    return ladder


def _shadow(name: str, shadow: tuple[str, _Source], live: _Source, params: dict[str, Any]) -> Ladder:
    """Shadow `shadow` (name, source) of ladder `name`, which inherits the rules among the
    live ladder's `params` it does not set itself (so both rate the same matches)."""
    sname, source = shadow
    for rule in (RULE_PARAMS.keys() | moding.MODE_PARAMS.keys()) & params.keys() - source.params.keys():
        source.params[rule] = _Param(params[rule], live.where, ignore_case=False)
    source.modes = {m: (o if source.model == live.model else {}) for m, o in live.modes.items()}
    return _build(shadow_name(name, sname), source, shadow_of=name)


def _resolve(key: str, allowed: Mapping[str, Any], ignore_case: bool) -> str | None:
    if key in allowed:
        return key
    if ignore_case:
        matches = [a for a in allowed if a.lower() == key.lower()]
        if len(matches) == 1:
            return matches[0]
    return None


def _read_toml(path: str) -> dict[str, _Source]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise LadderConfigError(f"{path}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
        doc = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise LadderConfigError(f"{path}: {e}") from None
    lines = text.splitlines()

    def where(table: str, key: str | None = None) -> str:
        line = _find_line(lines, table, key)
        return f"{path}:{line}" if line else path

    for key in doc:
        if key != "ladders":
            raise LadderConfigError(
                f"{where('', key)}: unknown key {key!r} (the file holds [ladders.<name>] tables)"
            )
    tables = doc.get("ladders", {})
    if not isinstance(tables, dict):
        raise LadderConfigError(f"{where('', 'ladders')}: 'ladders' must be a table")
    sources: dict[str, _Source] = {}
    for name, table in tables.items():
        header = f"ladders.{name}"
        here = f"{where(header)}: [{header}]"
        problem = _name_problem(name)
        if problem:
            raise LadderConfigError(f"{here}: {problem}")
        if not isinstance(table, dict):
            raise LadderConfigError(f"{here}: must be a table")
        sources[name] = source = _table_source(header, table, where)
        source.modes = moding.mode_tables(header, table.get("modes", {}), where)
        shadows = table.get("shadows", {})
        if not isinstance(shadows, dict):
            raise LadderConfigError(f"{where(header, 'shadows')}: [{header}] shadows: must be a table")
        for shadow, shadow_table in shadows.items():
            sub = f"{header}.shadows.{shadow}"
            problem = _name_problem(shadow)
            if problem or not isinstance(shadow_table, dict) or shadow_table.keys() & {"shadows", "modes"}:
                why = problem or "must be a table of a model and its parameters"
                raise LadderConfigError(f"{where(sub)}: [{sub}]: {why.replace('ladder name', 'shadow name')}")
            source.shadows[shadow] = _table_source(sub, shadow_table, where)
    return sources


def _table_source(header: str, table: dict[str, Any], where: Callable[..., str]) -> _Source:
    """The source of the ladder (or shadow) of TOML table `header`; `where` gives its places."""
    model = table.get("model")
    if not isinstance(model, str):
        raise LadderConfigError(f"{where(header)}: [{header}]: 'model' must be given as a string")
    return _Source(
        model,
        f"{where(header, 'model')}: [{header}] model",
        f"{where(header)}: [{header}]",
        {
            key: _Param(value, f"{where(header, key)}: [{header}] {key}", ignore_case=False)
            for key, value in table.items()
            if key not in ("model", "shadows", "modes")
        },
    )


_HEADER = re.compile(r"\s*\[([^\[\]]*)\]\s*(?:#.*)?\Z")


def _find_line(lines: list[str], table: str, key: str | None) -> int | None:
    """Best-effort 1-based line of ``[table]`` (key None) or of `key` inside it, for
    messages; None when the file spells it in a way this simple scan does not follow."""
    current = ""
    key_line = re.compile(rf"\s*[\"']?{re.escape(key)}[\"']?\s*=") if key else None
    for number, line in enumerate(lines, start=1):
        header = _HEADER.match(line)
        if header:
            current = re.sub(r"[\s\"']", "", header.group(1))
            if key_line is None and current == table:
                return number
        elif key_line is not None and current == table and key_line.match(line):
            return number
    return None


def _read_env(environ: Mapping[str, str], prefix: str) -> dict[str, _Source]:
    head = prefix + "LADDER_"
    sources: dict[str, _Source] = {}
    for var in sorted(environ):
        if not var.startswith(head):
            continue
        part, separator, param = var[len(head) :].partition("__")
        name = part.lower().replace("_", "-")
        problem = _name_problem(name)
        if problem:
            raise LadderConfigError(f"{var}: {problem}")
        source = sources.setdefault(name, _Source(None, var, f"{head}{part}*"))
        value = environ[var]
        if not separator:
            if not value.strip():
                raise LadderConfigError(f"{var}: empty model name")
            source.model, source.model_where = value.strip(), var
        elif not param:
            raise LadderConfigError(f"{var}: no parameter name after '__'")
        else:
            try:
                source.params[param] = _Param(parse_value(value), var, ignore_case=True)
            except ValueError as e:
                raise LadderConfigError(f"{var}: {e}") from None
    return sources
