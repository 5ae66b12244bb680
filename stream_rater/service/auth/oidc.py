"""JWTs from the studio's identity provider (OIDC access tokens), verified by PyJWT.

The signing keys come from the provider's JWKS (``STREAM_RATER_API_JWKS``): from an https URL
through PyJWT's `jwt.PyJWKClient`, which caches the set and fetches it again when a token names a
``kid`` it does not hold (a key rotation), at most once per ``STREAM_RATER_API_JWKS_REFRESH``
seconds, so that tokens with made-up kids cannot make the server fetch without end; from a file
path (a mounted secret), read again when it changed. Only asymmetric algorithms of
``STREAM_RATER_API_JWT_ALGORITHMS`` are accepted: a token of ``alg: none``, or of HS256 signed
with the public key as its secret (algorithm confusion), is refused before any signature check.
``exp``, ``nbf``, ``iss`` and ``aud`` are checked, with ``STREAM_RATER_API_JWT_LEEWAY`` seconds
of clock skew allowed on the times. Scopes come from ``scope`` (space-separated) or ``scp``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import jwt

from stream_rater.service.auth.scopes import SCOPES, Principal

log = logging.getLogger(__name__)

#: The algorithms that may be allowed: asymmetric ones (a symmetric one would share the secret).
ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
#: Seconds a fetched JWKS is kept before it is fetched again.
JWKS_LIFESPAN = 300.0
#: Fewest seconds between two fetches of the JWKS for an unknown kid (the default of
#: ``STREAM_RATER_API_JWKS_REFRESH``).
REFRESH_INTERVAL = 10.0
#: Seconds a JWKS fetch may take.
FETCH_TIMEOUT = 5.0


class KeySource(Protocol):
    """Where signing keys come from: `jwt.PyJWKClient` or `JwksFile`."""

    def get_signing_key(self, kid: str) -> jwt.PyJWK: ...


def key_source(jwks: str, refresh: float) -> KeySource:
    """The keys of `jwks`: an https URL (http only on loopback, for tests) fetched by PyJWT,
    or a file (`ValueError` if it does not exist)."""
    parts = urlsplit(jwks)
    if parts.scheme in ("http", "https"):
        host = parts.hostname or ""
        if parts.scheme == "http" and not (host == "localhost" or _loopback(host)):
            raise ValueError(f"STREAM_RATER_API_JWKS={jwks}: use https (http only on loopback)")
        return jwt.PyJWKClient(jwks, lifespan=JWKS_LIFESPAN, timeout=FETCH_TIMEOUT, cooldown_duration=refresh)
    if not Path(jwks).is_file():
        raise ValueError(f"STREAM_RATER_API_JWKS={jwks}: no such file (give a file path or an https URL)")
    return JwksFile(jwks)


class JwksFile:
    """The signing keys of a JWKS file, read again when its modification time changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp = -1
        self._keys: list[jwt.PyJWK] = []

    def get_signing_key(self, kid: str) -> jwt.PyJWK:
        """The key of `kid`; `jwt.PyJWKClientError` when the file does not hold it."""
        try:
            stamp = os.stat(self.path).st_mtime_ns
            if stamp != self._stamp:
                with open(self.path, encoding="utf-8") as file:
                    self._keys, self._stamp = list(jwt.PyJWKSet.from_json(file.read()).keys), stamp
        except (OSError, jwt.PyJWKSetError) as exc:
            raise jwt.PyJWKClientError(f"{self.path}: {exc}") from None
        for key in self._keys:
            if key.key_id == kid:
                return key
        raise jwt.PyJWKClientError(f"{self.path} holds no key {kid!r}")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_algorithms(text: str) -> list[str]:
    """The algorithms of ``STREAM_RATER_API_JWT_ALGORITHMS``; `ValueError` for a symmetric or
    unknown one (``none``, ``HS256``, …)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in ASYMMETRIC]
    if bad or not names:
        raise ValueError(
            f"STREAM_RATER_API_JWT_ALGORITHMS: {','.join(bad) or 'none given'}: only asymmetric "
            f"algorithms are accepted ({', '.join(sorted(ASYMMETRIC))})"
        )
    return names


def scopes_of(claims: dict[str, Any]) -> frozenset[str]:
    """The service's scopes a JWT grants: those of ``scope`` (space-separated) and ``scp`` (a
    list or a string), others ignored."""
    given: set[str] = set()
    for raw in (claims.get("scope"), claims.get("scp")):
        if isinstance(raw, str):
            given.update(raw.split())
        elif isinstance(raw, list):
            given.update(s for s in raw if isinstance(s, str))
    return frozenset(given) & frozenset(SCOPES)


class JwtVerifier:
    """Verifies bearer JWTs against the provider's keys, issuer and audience."""

    def __init__(
        self,
        jwks: str,
        issuer: str,
        audience: str,
        algorithms: list[str],
        leeway: float,
        refresh: float = REFRESH_INTERVAL,
    ) -> None:
        """`ValueError` when the issuer or audience is missing: a JWT of any issuer or for any
        service would otherwise pass."""
        if not issuer or not audience:
            raise ValueError(
                "STREAM_RATER_API_JWKS needs STREAM_RATER_API_ISSUER and STREAM_RATER_API_AUDIENCE"
            )
        self.issuer, self.audience, self.algorithms, self.leeway = issuer, audience, algorithms, leeway
        self.keys = key_source(jwks, refresh)

    async def principal(self, token: str) -> Principal | None:
        """Who the JWT `token` is, or None for any token that does not verify."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            return None
        if header.get("alg") not in self.algorithms:
            return None
        key = await asyncio.to_thread(self._key, header.get("kid"))
        if key is None:
            return None
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.InvalidTokenError:
            return None
        return Principal(f"jwt:{claims['sub']}", scopes_of(claims), None, float(claims["exp"]))

    def _key(self, kid: Any) -> jwt.PyJWK | None:
        """The signing key of `kid` (fetched again if the cached set lacks it), or None."""
        if not isinstance(kid, str):
            return None
        try:
            return self.keys.get_signing_key(kid)
        except jwt.PyJWKClientError as exc:
            log.info("JWT refused: %s", exc)
            return None
