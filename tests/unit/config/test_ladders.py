"""Ladder configuration: the Ladders mapping, TOML and environment loading, --param parsing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from stream_rater.config.ladders import (
    DEFAULT_LADDER,
    Ladder,
    LadderConfigError,
    Ladders,
    UnknownLadderError,
    load_ladders,
    parse_param,
    parse_value,
    shadow_name,
    split_shadow,
)
from stream_rater.rating.sph_elo import SphElo
from stream_rater.rating.trueskill import TrueSkill

EXAMPLE = """\
[ladders.default]
model = "trueskill"

[ladders.halo2-ffa]
model = "trueskill"
draw_probability = 0.0
k = 3

[ladders.mw4]
model = "sph-elo"
T = 120.0
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "ladders.toml"
    path.write_text(text)
    return str(path)


def config_error(call: Callable[..., object], *args: object) -> str:
    with pytest.raises(LadderConfigError) as info:
        call(*args)
    return str(info.value)


def test_default_ladder_is_always_present() -> None:
    """An empty configuration still has the default ladder, TrueSkill with default parameters."""
    ladders = Ladders()
    assert ladders.default == Ladder(DEFAULT_LADDER, "trueskill", {})
    assert list(ladders) == ["default"]
    assert isinstance(ladders.default.rating_model, TrueSkill)


def test_configured_default_replaces_the_built_in_one() -> None:
    """A configured default ladder is used instead of the built-in one."""
    ladders = Ladders([Ladder("default", "sph-elo")])
    assert ladders.default.model == "sph-elo"


def test_get_unknown_ladder_raises_clear_error() -> None:
    """get() and [] raise UnknownLadderError (a KeyError) naming the ladder and the configured ones."""
    ladders = Ladders([Ladder("mw4", "sph-elo")])
    with pytest.raises(UnknownLadderError) as info:
        ladders.get("nope")
    assert str(info.value) == "unknown ladder 'nope' (configured: default, mw4)"
    with pytest.raises(KeyError):
        ladders["nope"]
    assert "nope" not in ladders


def test_get_with_a_default_returns_it() -> None:
    """get(name, default) returns the default for an unknown ladder, like dict.get."""
    ladders = Ladders()
    assert ladders.get("nope", None) is None
    assert ladders.get("default", None) is ladders.default
    assert ladders.get("nope", default="x") == "x"


def test_ladder_twice_is_an_error() -> None:
    """Two ladders with one name are a configuration error."""
    assert (
        config_error(Ladders, [Ladder("a", "trueskill"), Ladder("a", "sph-elo")])
        == "ladder 'a' is configured twice"
    )


@pytest.mark.parametrize("name", ["", "Halo2", "halo_2", "-x", "a{b}", "é"])
def test_ladder_names_are_lower_case_letters_digits_and_dashes(name: str) -> None:
    """Ladder names outside [a-z0-9-] (or starting with '-') are refused, so they map to env names and Redis keys safely."""
    with pytest.raises(LadderConfigError, match="use lower-case letters, digits and '-'"):
        Ladder(name, "trueskill")


def test_params_are_read_only_copies() -> None:
    """A ladder's params cannot be changed, neither through the ladder nor through the dict it was built from."""
    given = {"k": 2.0}
    ladder = Ladder("x", "trueskill", given)
    given["k"] = 5.0
    assert ladder.params == {"k": 2.0}
    with pytest.raises(TypeError):
        ladder.params["k"] = 1.0  # type: ignore[index]


def test_rating_model_is_built_once_with_the_params() -> None:
    """rating_model is created from the ladder's params once and then reused."""
    ladder = Ladder("x", "trueskill", {"draw_probability": 0.0, "k": 2})
    model = ladder.rating_model
    assert model is ladder.rating_model
    assert (model.draw_probability, model.k) == (0.0, 2.0)
    assert ladder.model_class is TrueSkill


def test_toml_example_loads(tmp_path: Path) -> None:
    """The documented TOML example loads into three ladders with typed parameters, k going to TrueSkill."""
    ladders = Ladders.from_toml(write(tmp_path, EXAMPLE))
    assert dict(ladders) == {
        "default": Ladder("default", "trueskill", {}),
        "halo2-ffa": Ladder("halo2-ffa", "trueskill", {"draw_probability": 0.0, "k": 3}),
        "mw4": Ladder("mw4", "sph-elo", {"T": 120.0}),
    }
    assert ladders["halo2-ffa"].rating_model.k == 3.0
    assert isinstance(ladders["mw4"].rating_model, SphElo)


def test_toml_without_default_gets_the_built_in_default(tmp_path: Path) -> None:
    """A file that does not configure 'default' still yields the TrueSkill default ladder."""
    ladders = Ladders.from_toml(write(tmp_path, '[ladders.mw4]\nmodel = "sph-elo"\n'))
    assert sorted(ladders) == ["default", "mw4"]
    assert ladders.default.model == "trueskill"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'ladder = 1\n[ladders.a]\nmodel = "trueskill"\n',
            ":1: unknown key 'ladder' (the file holds [ladders.<name>] tables)",
        ),
        (
            '\n[ladders.mw4]\nmodel = "sph-elo"\n\nk = 3\n',
            ":5: [ladders.mw4] k: model 'sph-elo' has no parameter 'k' (allowed: T, ",
        ),
        (
            '[ladders.a]\nmodel = "trueskill"\ndraw_probabilty = 0.1\n',
            ":3: [ladders.a] draw_probabilty: model 'trueskill' has no parameter 'draw_probabilty'",
        ),
        ('[ladders.a]\nmodel = "whr"\n', ":2: [ladders.a] model: unknown model 'whr' (known: "),
        ("[ladders.a]\nk = 3\n", ":1: [ladders.a]: 'model' must be given as a string"),
        (
            '[ladders.Big]\nmodel = "trueskill"\n',
            ":1: [ladders.Big]: ladder name 'Big': use lower-case letters",
        ),
        ('[ladders.a]\nmodel = "trueskill"\ndraw_probability = 1.5\n', ":1: [ladders.a]: "),
        ("ladders = 3\n", ":1: 'ladders' must be a table"),
        (
            '[ladders.a]\nmodel = "trueskill"\n[ladders.a]\n',
            "Cannot declare ('ladders', 'a') twice (at line 3",
        ),
    ],
    ids=[
        "unknown top key",
        "k on sph-elo",
        "misspelt param",
        "unknown model",
        "no model",
        "bad name",
        "bad value",
        "not a table",
        "toml syntax",
    ],
)
def test_bad_toml_is_reported_with_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    """Unknown keys, unknown models and parameters, bad values and TOML syntax errors name the file, the line and the problem."""
    path = write(tmp_path, text)
    error = config_error(Ladders.from_toml, path)
    assert error.startswith(path)
    assert message in error


def test_missing_toml_file_is_a_config_error(tmp_path: Path) -> None:
    """A ladders file that cannot be read is a LadderConfigError naming it."""
    path = str(tmp_path / "absent.toml")
    assert config_error(Ladders.from_toml, path) == f"{path}: No such file or directory"


def test_env_scheme_maps_names_and_params() -> None:
    """STREAM_RATER_LADDER_<NAME>[__<PARAM>] configures ladders: names lower-cased with '_' → '-', params matched ignoring case, values typed."""
    ladders = Ladders.from_env(
        {
            "STREAM_RATER_LADDER_HALO2_FFA": "trueskill",
            "STREAM_RATER_LADDER_HALO2_FFA__DRAW_PROBABILITY": "0",
            "STREAM_RATER_LADDER_HALO2_FFA__K": "2.5",
            "STREAM_RATER_LADDER_MW4": "sph-elo",
            "STREAM_RATER_LADDER_MW4__T": "90",
            "STREAM_RATER_LADDERS_FILE": "ignored.toml",
            "STREAM_RATER_REDIS_URL": "redis://ignored",
        }
    )
    assert dict(ladders) == {
        "default": Ladder("default", "trueskill", {}),
        "halo2-ffa": Ladder("halo2-ffa", "trueskill", {"draw_probability": 0, "k": 2.5}),
        "mw4": Ladder("mw4", "sph-elo", {"T": 90}),
    }


def test_env_prefix_is_configurable() -> None:
    """from_env reads only variables with the given prefix."""
    ladders = Ladders.from_env({"SR_LADDER_X": "sph-elo", "STREAM_RATER_LADDER_Y": "sph-elo"}, prefix="SR_")
    assert sorted(ladders) == ["default", "x"]


def test_env_params_apply_to_the_built_in_default() -> None:
    """A parameter for the default ladder alone tunes the built-in TrueSkill default."""
    ladders = Ladders.from_env({"STREAM_RATER_LADDER_DEFAULT__K": "2"})
    assert ladders.default == Ladder("default", "trueskill", {"k": 2})


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"STREAM_RATER_LADDER_X__K": "2"},
            "STREAM_RATER_LADDER_X__K: ladder 'x' has parameters but no model",
        ),
        (
            {"STREAM_RATER_LADDER_X": "sph-elo", "STREAM_RATER_LADDER_X__K": "2"},
            "STREAM_RATER_LADDER_X__K: model 'sph-elo' has no parameter 'K'",
        ),
        ({"STREAM_RATER_LADDER_X": "whr"}, "STREAM_RATER_LADDER_X: unknown model 'whr'"),
        ({"STREAM_RATER_LADDER_X": " "}, "STREAM_RATER_LADDER_X: empty model name"),
        ({"STREAM_RATER_LADDER_X__": "1"}, "STREAM_RATER_LADDER_X__: no parameter name after '__'"),
        ({"STREAM_RATER_LADDER_": "trueskill"}, "STREAM_RATER_LADDER_: ladder name ''"),
        (
            {"STREAM_RATER_LADDER_X": "trueskill", "STREAM_RATER_LADDER_X__TAU": "nan"},
            "STREAM_RATER_LADDER_X__TAU: 'nan': NaN is not a parameter value",
        ),
        (
            {"STREAM_RATER_LADDER_X": "trueskill", "STREAM_RATER_LADDER_X__SIGMA": "-1"},
            "STREAM_RATER_LADDER_X*: ",
        ),
    ],
)
def test_bad_env_is_reported_with_the_variable(environ: dict[str, str], message: str) -> None:
    """Environment mistakes name the variable and the problem."""
    assert message in config_error(Ladders.from_env, environ)


def test_env_overrides_file_parameters_for_the_same_model(tmp_path: Path) -> None:
    """With the file's model, environment parameters override the file's key by key and the rest stay."""
    ladders = load_ladders(
        write(tmp_path, EXAMPLE),
        {"STREAM_RATER_LADDER_HALO2_FFA": "trueskill", "STREAM_RATER_LADDER_HALO2_FFA__K": "1"},
    )
    assert ladders["halo2-ffa"].params == {"draw_probability": 0.0, "k": 1}
    assert load_ladders(write(tmp_path, EXAMPLE), {"STREAM_RATER_LADDER_MW4__T": "60"})["mw4"].params == {
        "T": 60
    }


def test_env_model_switch_drops_file_parameters(tmp_path: Path) -> None:
    """An environment model different from the file's replaces the ladder, file parameters included."""
    ladders = load_ladders(write(tmp_path, EXAMPLE), {"STREAM_RATER_LADDER_HALO2_FFA": "sph-elo"})
    assert ladders["halo2-ffa"] == Ladder("halo2-ffa", "sph-elo", {})


def test_load_without_file_uses_only_the_environment() -> None:
    """load_ladders(None, environ) reads the environment alone."""
    assert load_ladders(None, {"STREAM_RATER_LADDER_MW4": "sph-elo"}) == Ladders([Ladder("mw4", "sph-elo")])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.227", 0.227),
        ("3", 3),
        ("-2", -2),
        ("1e3", 1000.0),
        ("inf", float("inf")),
        ("true", True),
        ("FALSE", False),
        ("days", "days"),
        ('"3"', "3"),
        ("'true'", "true"),
        (" 7 ", 7),
    ],
)
def test_parse_value_types_the_text(text: str, value: object) -> None:
    """parse_value turns text into a bool, int, float or string, quotes forcing a string."""
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_parse_param_splits_name_and_typed_value() -> None:
    """parse_param('name=value') gives the name and the typed value; '=' inside the value is kept."""
    assert parse_param("draw_probability=0.227") == ("draw_probability", 0.227)
    assert parse_param("T=120") == ("T", 120)
    assert parse_param("time_unit=a=b") == ("time_unit", "a=b")


@pytest.mark.parametrize("text", ["draw_probability", "=3", "1x=3", "a b=3", "tau=nan"])
def test_parse_param_rejects_malformed_input(text: str) -> None:
    """parse_param raises ValueError without a name=value shape, a parameter-like name, or for NaN."""
    with pytest.raises(ValueError):
        parse_param(text)


def test_the_unknown_ladder_error_says_where_the_ladder_list_came_from(tmp_path: Path) -> None:
    """The ladders file's path, or how to give one; the read API's message (`message`) names no path."""
    with pytest.raises(UnknownLadderError) as none:
        load_ladders(None, {}).get("ranked-1v1")
    assert str(none.value) == (
        "unknown ladder 'ranked-1v1' (configured: default; "
        "no ladders file: set STREAM_RATER_LADDERS_FILE or --ladders-file)"
    )
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.duel]\nmodel = "elo"\n')
    with pytest.raises(UnknownLadderError) as filed:
        load_ladders(str(path), {})["ranked-1v1"]
    assert str(filed.value) == f"unknown ladder 'ranked-1v1' (configured: default, duel; ladders file {path})"
    assert filed.value.message == "unknown ladder 'ranked-1v1' (configured: default, duel)"


SHADOWS = """\
[ladders.duel]
model = "trueskill"
draw_probability = 0.0
provisional_games = 5

[ladders.duel.shadows.wide]
model = "trueskill"
beta = 10.0

[ladders.duel.shadows.glicko]
model = "glicko2"
tau = 0.4
provisional_games = 3
"""


def test_shadows_load_as_internal_ladders_inheriting_the_live_rules(tmp_path: Path) -> None:
    ladders = load_ladders(write(tmp_path, SHADOWS), {"STREAM_RATER_LADDER_DUEL__DRAW_PROBABILITY": "0.1"})
    duel = ladders["duel"]
    wide, glicko = duel.shadows
    assert (wide.name, wide.shadow_of, wide.params) == (
        "duel~wide",
        "duel",
        {"beta": 10.0, "provisional_games": 5},
    )
    assert (glicko.name, glicko.model, glicko.params) == (
        "duel~glicko",
        "glicko2",
        {"tau": 0.4, "provisional_games": 3},
    )
    assert duel.params == {"draw_probability": 0.1, "provisional_games": 5}
    assert list(ladders) == ["duel", "default"]  # shadows are no ladder an event may name
    assert "duel~wide" not in ladders and ladders.lookup("duel~wide") is wide
    assert ladders.lookup("duel") is duel
    with pytest.raises(UnknownLadderError, match="duel~nope"):
        ladders.lookup("duel~nope")
    by_env = load_ladders(write(tmp_path, SHADOWS), {"STREAM_RATER_LADDER_DUEL__MIN_PLAYERS": "2"})
    assert by_env.lookup("duel~wide").params == {"beta": 10.0, "provisional_games": 5, "min_players": 2}
    switched = load_ladders(write(tmp_path, SHADOWS), {"STREAM_RATER_LADDER_DUEL": "elo"})
    assert switched["duel"].model == "elo" and [s.name for s in switched["duel"].shadows] == [
        "duel~wide",
        "duel~glicko",
    ]


def test_shadow_names_split_into_ladder_and_shadow() -> None:
    assert split_shadow("duel~wide") == ("duel", "wide") and split_shadow("duel") == ("duel", None)
    assert shadow_name("duel", "wide") == "duel~wide"
    with pytest.raises(LadderConfigError, match="shadow of 'duel' only"):
        Ladder("duel~wide", "trueskill")
    with pytest.raises(LadderConfigError, match="no shadow of 'duel'"):
        Ladder("duel", "trueskill", shadows=(Ladder("other~wide", "trueskill", shadow_of="other"),))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[ladders.d]\nmodel = "elo"\nshadows = 3\n',
            ":3: [ladders.d] shadows: must be a table",
        ),
        (
            '[ladders.d]\nmodel = "elo"\n\n[ladders.d.shadows.w]\nk = 3\n',
            ":4: [ladders.d.shadows.w]: 'model' must be given as a string",
        ),
        (
            '[ladders.d]\nmodel = "elo"\n\n[ladders.d.shadows.W]\nmodel = "elo"\n',
            ":4: [ladders.d.shadows.W]: shadow name 'W': use lower-case",
        ),
        (
            '[ladders.d]\nmodel = "elo"\n\n[ladders.d.shadows.w]\nmodel = "nope"\n',
            ":5: [ladders.d.shadows.w] model: unknown model 'nope'",
        ),
        (
            '[ladders.d]\nmodel = "elo"\n\n[ladders.d.shadows.w]\nmodel = "elo"\nbeta = 3\n',
            ":6: [ladders.d.shadows.w] beta: model 'elo' has no parameter 'beta'",
        ),
        (
            '[ladders.d]\nmodel = "elo"\n\n[ladders.d.shadows.w]\nmodel = "elo"\nk = -1\n',
            ":4: [ladders.d.shadows.w]: k",
        ),
        (
            '[ladders.d]\nmodel = "elo"\n\n[ladders.d.shadows.w]\nmodel = "elo"\n\n[ladders.d.shadows.w.shadows.x]\nmodel = "elo"\n',
            ":4: [ladders.d.shadows.w]: must be a table of a model and its parameters",
        ),
    ],
)
def test_shadow_errors_name_file_line_and_table(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    assert config_error(Ladders.from_toml, path).startswith(path) and message in config_error(
        Ladders.from_toml, path
    )


def test_calibration_round_trips_through_a_ladders_file_and_the_environment(tmp_path: Path) -> None:
    """``calibration`` is a ladder parameter: the file's and the environment's text become the
    model's `Calibration`, whose text is the file's again; the model's own parameters are
    untouched and a bad value is refused at load with its line."""
    from stream_rater.rating.calibration import Calibration

    text = '[ladders.football]\nmodel = "trueskill"\nbeta = 5.0\ncalibration = "platt:0.8123,-0.0456"\n'
    ladder = Ladders.from_toml(write(tmp_path, text)).get("football")
    model = ladder.rating_model
    assert model.calibration == Calibration("platt", 0.8123, -0.0456)
    assert f'calibration = "{model.calibration}"' in text and model.beta == 5.0
    env = Ladders.from_env(
        {"STREAM_RATER_LADDER_ELO": "elo", "STREAM_RATER_LADDER_ELO__CALIBRATION": "temperature:1.25"}
    )
    assert env.get("elo").rating_model.calibration == Calibration("temperature", 0.8)
    assert Ladders().default.rating_model.calibration is None
    with pytest.raises(LadderConfigError, match=r"ladders.toml:1: .*calibration 'platt:1'"):
        Ladders.from_toml(write(tmp_path, '[ladders.x]\nmodel = "elo"\ncalibration = "platt:1"\n'))
