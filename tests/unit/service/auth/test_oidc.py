"""JWT settings and keys: asymmetric algorithms only, scopes from scope or scp, a JWKS file
read again when it changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from stream_rater.service.auth.oidc import JwksFile, JwtVerifier, allowed_algorithms, key_source, scopes_of


@pytest.mark.parametrize("algorithms", ["none", "HS256", "RS256,HS512", ""])
def test_only_asymmetric_algorithms_may_be_allowed(algorithms: str):
    with pytest.raises(ValueError, match="only asymmetric"):
        allowed_algorithms(algorithms)


def test_scopes_come_from_scope_and_scp_and_unknown_ones_are_dropped():
    assert scopes_of({"scope": "openid read"}) == {"read"}
    assert scopes_of({"scp": ["metrics", "admin"]}) == {"metrics"}
    assert scopes_of({"scope": "", "scp": "dashboard"}) == {"dashboard"}
    assert scopes_of({"scp": [1, None]}) == frozenset()


def test_a_jwks_over_http_is_only_for_loopback(tmp_path: Path):
    with pytest.raises(ValueError, match="use https"):
        key_source("http://idp.example.test/jwks.json", 10)
    with pytest.raises(ValueError, match="no such file"):
        key_source(str(tmp_path / "none.json"), 10)
    assert isinstance(key_source("https://idp.example.test/jwks.json", 10), jwt.PyJWKClient)


def test_an_issuer_and_an_audience_are_required(tmp_path: Path):
    with pytest.raises(ValueError, match="STREAM_RATER_API_ISSUER"):
        JwtVerifier(str(tmp_path), "", "api", ["RS256"], 30)


def write_jwks(path: Path, keys: dict[str, ec.EllipticCurvePrivateKey], stamp: int) -> None:
    jwks = [
        {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key())), "kid": kid}
        for kid, key in keys.items()
    ]
    path.write_text(json.dumps({"keys": jwks}))
    os.utime(path, ns=(stamp, stamp))


def test_a_jwks_file_is_read_again_when_it_changes(tmp_path: Path):
    path = tmp_path / "jwks.json"
    first, second = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    write_jwks(path, {"a": first}, 1)
    keys = JwksFile(str(path))
    assert keys.get_signing_key("a").key_id == "a"
    with pytest.raises(jwt.PyJWKClientError, match="no key 'b'"):
        keys.get_signing_key("b")
    write_jwks(path, {"a": first, "b": second}, 2)
    assert keys.get_signing_key("b").key_id == "b"
