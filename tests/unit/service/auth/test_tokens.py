"""The tokens file: lines as `token new` prints them, hashes only, reloaded when it changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stream_rater.service.auth.tokens import TOKEN_PREFIX, TokenFile, new_token, parse_line


def test_a_new_token_is_random_and_its_line_holds_only_its_hash():
    token, entry = new_token("grafana", frozenset({"metrics"}), 5.0)
    again, _ = new_token("grafana", frozenset({"metrics"}), 5.0)
    assert token.startswith(TOKEN_PREFIX) and len(token) > 40 and token != again
    assert token not in entry.line() and parse_line(entry.line(), "f:1") == entry


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("a sha256:00 read", "SHA-256"),
        ("a md5:00 read", "expected"),
        ("a sha256:" + "0" * 64 + " admin", "scopes are"),
        ("a sha256:" + "0" * 64 + " read fast", "rate"),
    ],
)
def test_a_bad_line_is_named_with_its_file_and_line(line: str, why: str):
    with pytest.raises(ValueError, match=f"^tokens:7: .*{why}"):
        parse_line(line, "tokens:7")


def test_tokens_are_found_and_a_removed_line_is_no_longer_after_the_file_changes(tmp_path: Path):
    kept, kept_entry = new_token("kept", frozenset({"read"}), None)
    gone, gone_entry = new_token("gone", frozenset({"read", "dashboard"}), 2.0)
    path = tmp_path / "tokens"
    path.write_text(f"# comment\n\n{kept_entry.line()}\n{gone_entry.line()}\n")
    now = [0.0]
    tokens = TokenFile(str(path), clock=lambda: now[0])
    found = tokens.principal(gone)
    assert found is not None and found.identity == "token:gone" and found.scopes == {"read", "dashboard"}
    assert found.rate == 2.0 and tokens.principal("srt_unknown") is None
    path.write_text(kept_entry.line() + "\n")
    os.utime(path, ns=(1, 1))  # a new modification time, whatever the clock's resolution
    assert tokens.principal(gone) is not None  # not looked at again within a second
    now[0] = 1.5
    assert tokens.principal(gone) is None and tokens.principal(kept) is not None


def test_a_file_turned_malformed_keeps_the_tokens_last_read(tmp_path: Path):
    token, entry = new_token("kept", frozenset({"read"}), None)
    path = tmp_path / "tokens"
    path.write_text(entry.line() + "\n")
    now = [0.0]
    tokens = TokenFile(str(path), clock=lambda: now[0])
    path.write_text("broken\n")
    os.utime(path, ns=(1, 1))
    now[0] = 2.0
    assert tokens.principal(token) is not None and "expected" in (tokens.error or "")


def test_a_missing_file_fails_at_start_naming_the_variable(tmp_path: Path):
    with pytest.raises(ValueError, match="STREAM_RATER_API_TOKENS_FILE="):
        TokenFile(str(tmp_path / "none"))
