"""API tokens: made by ``stream-rater token new``, kept in ``STREAM_RATER_API_TOKENS_FILE`` as
a hash only, one line a token::

    # name  sha256:<hex of SHA-256(token)>  scopes  [rate]
    grafana  sha256:9f86d0…  metrics
    matchmaker  sha256:2c26b4…  read  50

A token is 32 random bytes, so a fast hash suffices (no guessing a preimage of one); a token
shown is hashed and compared with every line's hash in constant time (`hmac.compare_digest`),
and answered the same whether it is unknown or malformed. The file is read again when its
modification time or size changes (checked at most once a second): revoking a token is
removing its line, without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from stream_rater.service.auth.scopes import SCOPES, Principal

#: What every token starts with, so that a leaked one is recognised by secret scanners.
TOKEN_PREFIX = "srt_"
#: Seconds between two looks at the file's modification time.
RELOAD_CHECK = 1.0


@dataclass(frozen=True)
class TokenEntry:
    """One line of the tokens file."""

    name: str
    digest: bytes
    scopes: frozenset[str]
    rate: float | None

    def line(self) -> str:
        """The line as the tokens file holds it."""
        rate = "" if self.rate is None else f"  {self.rate:g}"
        return f"{self.name}  sha256:{self.digest.hex()}  {','.join(sorted(self.scopes))}{rate}"


def digest(token: str) -> bytes:
    """The SHA-256 of a token, as the file keeps it."""
    return hashlib.sha256(token.encode()).digest()


def new_token(name: str, scopes: frozenset[str], rate: float | None) -> tuple[str, TokenEntry]:
    """A random token and its line for the tokens file."""
    check_scopes(scopes, "--scopes")
    if not name or any(c.isspace() for c in name) or name.startswith("#"):
        raise ValueError(f"--name {name!r}: a name is one word, not starting with #")
    if rate is not None and rate <= 0:
        raise ValueError(f"--rate {rate:g}: must be positive")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, TokenEntry(name, digest(token), scopes, rate)


def check_scopes(scopes: frozenset[str], where: str) -> None:
    """`ValueError` naming `where` for an empty or unknown scope."""
    unknown = sorted(scopes - set(SCOPES))
    if unknown or not scopes:
        raise ValueError(f"{where}: scopes are {', '.join(SCOPES)}; got {','.join(sorted(scopes)) or 'none'}")


def parse_line(text: str, where: str) -> TokenEntry | None:
    """A line of the tokens file (None for a blank line or a comment); `ValueError` naming
    `where` (file:line) and what is wrong."""
    parts = text.split("#", 1)[0].split()
    if not parts:
        return None
    if len(parts) not in (3, 4) or not parts[1].startswith("sha256:"):
        raise ValueError(f"{where}: expected 'NAME sha256:HEX SCOPES [RATE]'")
    try:
        hashed = bytes.fromhex(parts[1].removeprefix("sha256:"))
        rate = float(parts[3]) if len(parts) == 4 else None
    except ValueError:
        raise ValueError(f"{where}: the hash is not hex or the rate not a number") from None
    if len(hashed) != hashlib.sha256().digest_size:
        raise ValueError(f"{where}: the hash is not a SHA-256 (64 hex digits)")
    scopes = frozenset(parts[2].split(","))
    check_scopes(scopes, where)
    return TokenEntry(parts[0], hashed, scopes, rate)


class TokenFile:
    """The tokens of ``STREAM_RATER_API_TOKENS_FILE``, read again when the file changes. A file
    that turns unreadable or malformed keeps the tokens last read (and says so once in `error`)."""

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic) -> None:
        """Read `path` now: a missing or malformed file is a `ValueError` at start."""
        self.path = path
        self.clock = clock
        self.error: str | None = None
        self._stamp = self._stat()
        self._entries = self._read()
        self._checked = clock()

    def _stat(self) -> tuple[int, int]:
        try:
            found = os.stat(self.path)
        except OSError as exc:
            raise ValueError(f"STREAM_RATER_API_TOKENS_FILE={self.path}: {exc.strerror}") from None
        return found.st_mtime_ns, found.st_size

    def _read(self) -> list[TokenEntry]:
        with open(self.path, encoding="utf-8") as file:
            lines = list(file)
        entries = [parse_line(text, f"{self.path}:{n}") for n, text in enumerate(lines, 1)]
        return [entry for entry in entries if entry is not None]

    def _refresh(self) -> None:
        now = self.clock()
        if now - self._checked < RELOAD_CHECK:
            return
        self._checked = now
        try:
            stamp = self._stat()
            if stamp != self._stamp:
                self._entries, self._stamp, self.error = self._read(), stamp, None
        except (OSError, ValueError) as exc:
            self.error = str(exc)

    def principal(self, token: str) -> Principal | None:
        """Who `token` is, or None: every line is compared, in constant time each."""
        self._refresh()
        shown = digest(token)
        found = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, shown):
                found = entry
        if found is None:
            return None
        return Principal(f"token:{found.name}", found.scopes, found.rate, expires=None)
