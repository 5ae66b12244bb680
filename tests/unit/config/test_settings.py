"""How many rating changes Redis keeps per player: two without an archive, none with one."""

from __future__ import annotations

from dataclasses import fields

import pytest

from stream_rater.config.settings import DEFAULT_HISTORY, Settings, secret_names


def test_redis_keeps_the_default_history_without_an_archive_and_none_with_one():
    assert Settings().redis_history() == DEFAULT_HISTORY == 2
    assert Settings(archive_url="postgresql://db/archive").redis_history() == 0


def test_a_history_limit_given_wins_over_the_archive():
    environ = {"STREAM_RATER_HISTORY_LIMIT": "5", "STREAM_RATER_ARCHIVE_URL": "postgresql://db/archive"}
    assert Settings.from_env(environ).redis_history() == 5
    assert Settings(history_limit=0).redis_history() == 0


def test_a_secret_is_read_from_the_file_its_file_variable_names(tmp_path):
    """``…_FILE``, as Kubernetes and Docker mount secrets (one final line end dropped); the
    secret never shows in the settings' repr; the variable and its file together are refused."""
    (tmp_path / "password").write_text("s3cret-value\n")
    settings = Settings.from_env({"STREAM_RATER_REDIS_PASSWORD_FILE": str(tmp_path / "password")})
    assert settings.redis_password == "s3cret-value" and "s3cret" not in repr(settings)
    with pytest.raises(ValueError, match="set one, not both"):
        Settings.from_env(
            {
                "STREAM_RATER_REDIS_PASSWORD": "x",
                "STREAM_RATER_REDIS_PASSWORD_FILE": str(tmp_path / "password"),
            }
        )
    with pytest.raises(ValueError, match=r"^STREAM_RATER_KAFKA_SASL_PASSWORD_FILE=.*none: No such file"):
        Settings.from_env({"STREAM_RATER_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "none")})


def test_every_password_is_a_secret():
    """The settings a ``…_FILE`` may give: every password and client secret."""
    assert set(secret_names()) == {
        f.name for f in fields(Settings) if f.name.endswith(("password", "secret"))
    }


def test_a_switch_interval_that_is_not_positive_is_refused_naming_its_variable_and_flag():
    with pytest.raises(
        ValueError, match=r"^STREAM_RATER_SWITCH_INTERVAL \(--switch-interval\) = 0.0: expected"
    ):
        Settings.from_env({"STREAM_RATER_SWITCH_INTERVAL": "0"})
