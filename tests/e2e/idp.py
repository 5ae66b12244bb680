"""A stand-in identity provider for the tests: RSA signing keys made here, their JWKS served by
a local HTTP server (which counts its fetches and can rotate keys), access tokens signed by
PyJWT, well-formed or broken in one way each, and the two endpoints of the authorization code
flow with PKCE (``/authorize`` approves at once; ``/token`` checks the verifier)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://idp.example.test/"
AUDIENCE = "stream-rater"


class IdentityProvider:
    """Keys by kid, the JWKS of the published ones, and a count of JWKS fetches."""

    def __init__(self) -> None:
        self.keys = {
            kid: rsa.generate_private_key(public_exponent=65537, key_size=2048) for kid in ("k1", "k2")
        }
        self.published = ["k1"]
        self.fetches = 0
        self.url = ""
        self.base = ""
        #: Code → (its PKCE challenge, redirect URI, scope) while not yet traded.
        self.codes: dict[str, tuple[str, str, str]] = {}

    def jwks(self) -> dict[str, Any]:
        found = []
        for kid in self.published:
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.keys[kid].public_key()))
            found.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": found}

    def public_pem(self, kid: str = "k1") -> bytes:
        return (
            self.keys[kid]
            .public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )

    def token(self, scope: str = "read", kid: str = "k1", **claims: Any) -> str:
        """An RS256 access token of subject ``alice`` for `scope`, valid for 5 minutes;
        `claims` replace or add claims."""
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 300, "scope": scope}
        return jwt.encode({**body, **claims}, self.keys[kid], algorithm="RS256", headers={"kid": kid})

    def unsigned(self, scope: str = "read") -> str:
        """The same claims with ``alg: none`` and no signature."""
        return _compact({"alg": "none", "typ": "JWT", "kid": "k1"}, self._claims(scope), b"")

    def hs256_with_public_key(self, scope: str = "read") -> str:
        """Algorithm confusion: HS256 whose HMAC secret is the published public key (PEM)."""
        header, claims = {"alg": "HS256", "typ": "JWT", "kid": "k1"}, self._claims(scope)
        signing_input = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())
        signature = hmac.new(self.public_pem(), signing_input.encode(), hashlib.sha256).digest()
        return signing_input + "." + _b64(signature)

    def _claims(self, scope: str) -> dict[str, Any]:
        now = int(time.time())
        return {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "mallory",
            "iat": now,
            "exp": now + 300,
            "scope": scope,
        }


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _compact(header: dict[str, Any], claims: dict[str, Any], signature: bytes) -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}.{_b64(signature)}"


@contextmanager
def serving_jwks(idp: IdentityProvider) -> Iterator[IdentityProvider]:
    """Serve `idp`'s JWKS at ``http://127.0.0.1:PORT/jwks.json`` from a thread; shut down after."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            if path == "/authorize":
                self._authorize(dict(parse_qsl(query)))
                return
            idp.fetches += 1
            self._json(200, idp.jwks())

        def do_POST(self) -> None:
            form = dict(parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
            challenge, redirect, scope = idp.codes.pop(form.get("code", ""), ("", "", ""))
            verifier = form.get("code_verifier", "").encode()
            expected = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=").decode()
            if not challenge or challenge != expected or form.get("redirect_uri") != redirect:
                self._json(400, {"error": "invalid_grant"})
                return
            self._json(200, {"access_token": idp.token(scope=scope), "token_type": "Bearer"})

        def _authorize(self, query: dict[str, str]) -> None:
            code = secrets.token_urlsafe(16)
            idp.codes[code] = (query["code_challenge"], query["redirect_uri"], query["scope"])
            back = urlencode({"code": code, "state": query["state"]})
            self.send_response(302)
            self.send_header("Location", f"{query['redirect_uri']}?{back}")
            self.end_headers()

        def _json(self, status: int, answer: dict[str, Any]) -> None:
            body = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    idp.base = f"http://127.0.0.1:{server.server_address[1]}"
    idp.url = f"{idp.base}/jwks.json"
    try:
        yield idp
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
