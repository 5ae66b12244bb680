"""How many rating changes Redis keeps per player: two without an archive, none with one."""

from __future__ import annotations

from stream_rater.config.settings import DEFAULT_HISTORY, Settings


def test_redis_keeps_the_default_history_without_an_archive_and_none_with_one():
    assert Settings().redis_history() == DEFAULT_HISTORY == 2
    assert Settings(archive_url="postgresql://db/archive").redis_history() == 0


def test_a_history_limit_given_wins_over_the_archive():
    environ = {"STREAM_RATER_HISTORY_LIMIT": "5", "STREAM_RATER_ARCHIVE_URL": "postgresql://db/archive"}
    assert Settings.from_env(environ).redis_history() == 5
    assert Settings(history_limit=0).redis_history() == 0
