"""Who may read, against a real ``stream-rater serve`` and a real worker (one of each per
module): API tokens (401 without or with a bad one, 403 without the scope, 200, revocation by
removing the line), JWTs of a stand-in identity provider (`tests.e2e.idp`: good, expired,
not yet valid, wrong issuer, wrong audience, ``alg: none``, HS256 signed with the public key;
a key rotation whose new kid is fetched), the 429 burst with ``Retry-After``, the refusals
metric, the refusal to start on 0.0.0.0 without authentication, and the dashboard signed in
with a token in headless Chromium (no credential in any URL, an HttpOnly cookie)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stream_rater.local.demo import start_worker, stop_process, tagged_settings, wait_ready
from stream_rater.local.processes import free_port
from stream_rater.service.auth.tokens import new_token
from tests.e2e.browser import ARTIFACTS, needs_chromium
from tests.e2e.e2e_support import worker_test_env
from tests.e2e.idp import AUDIENCE, ISSUER, IdentityProvider, serving_jwks
from tests.helpers import cli, wait_for

pytestmark = pytest.mark.e2e

#: The tokens of the module: name → (scopes, rate).
TOKENS = {
    "reader": ("read", None),
    "dash": ("dashboard", None),
    "scraper": ("metrics", None),
    "burst": ("read", 0.2),
    "docs": ("read", 1000.0),  # the API docs' page and files, more than a burst at once
}
BURST = 5


@dataclass
class Auth:
    """The module's tokens (name → token), tokens file, identity provider and their variables."""

    tokens: dict[str, str]
    file: Path
    idp: IdentityProvider

    def env(self, burst: int = BURST) -> dict[str, str]:
        return {
            "STREAM_RATER_API_TOKENS_FILE": str(self.file),
            "STREAM_RATER_API_JWKS": self.idp.url,
            "STREAM_RATER_API_ISSUER": ISSUER,
            "STREAM_RATER_API_AUDIENCE": AUDIENCE,
            "STREAM_RATER_API_JWKS_REFRESH": "0",
            "STREAM_RATER_API_BURST": str(burst),
            "STREAM_RATER_API_OIDC_AUTHORIZE_URL": f"{self.idp.base}/authorize",
            "STREAM_RATER_API_OIDC_TOKEN_URL": f"{self.idp.base}/token",
            "STREAM_RATER_API_OIDC_CLIENT_ID": "dashboard",
        }


@pytest.fixture(scope="module")
def auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Auth]:
    directory = tmp_path_factory.mktemp("auth")
    tokens, lines = {}, []
    for name, (scopes, rate) in TOKENS.items():
        tokens[name], entry = new_token(name, frozenset(scopes.split(",")), rate)
        lines.append(entry.line())
    (directory / "tokens").write_text("# the module's tokens\n" + "\n".join(lines) + "\n")
    with serving_jwks(IdentityProvider()) as idp:
        yield Auth(tokens, directory / "tokens", idp)


def call(url: str, credential: str | None = None, method: str = "GET", body: dict | None = None):
    """Status, headers and body of a request with `credential` as its bearer token."""
    headers = {"Authorization": f"Bearer {credential}"} if credential else {}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("STREAM_RATER_")}, **extra}


@pytest.fixture(scope="module")
def served(auth: Auth, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``serve`` over an in-memory store asking for credentials; its base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "stream_rater", "serve", "--store", "memory", "--web-port", str(port)],
        env=clean_env(auth.env()),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready(process, f"http://127.0.0.1:{port}/readyz", 60)
        yield f"http://127.0.0.1:{port}"
    finally:
        assert stop_process(process) in (0, -15), log.read_text()


def test_tokens_get_401_without_or_with_a_bad_one_403_without_the_scope_and_200(served: str, auth: Auth):
    ladders = f"{served}/api/ladders"
    status, headers, body = call(ladders)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer ")
    assert list(json.loads(body)) == ["error"] and b"\n" not in body.strip()
    unknown = call(ladders, "srt_" + "x" * 43)
    malformed = call(ladders, "not-a-token")
    assert unknown[0] == malformed[0] == 401 and unknown[2] == malformed[2]  # nothing tells them apart
    assert 'error="invalid_token"' in unknown[1]["WWW-Authenticate"]
    status, headers, body = call(ladders, auth.tokens["scraper"])
    assert status == 403 and "insufficient_scope" in headers["WWW-Authenticate"]
    predict = f"{served}/api/ladders/default/predict"
    assert call(predict, auth.tokens["dash"], "POST", {"teams": [["a"], ["b"]]})[0] == 403
    assert call(predict, auth.tokens["reader"], "POST", {"teams": [["a"], ["b"]]})[0] == 200
    assert call(ladders, auth.tokens["reader"])[0] == 200
    assert call(ladders, auth.tokens["dash"])[0] == 200  # the page's reads
    assert call(f"{served}/healthz")[0] == 200 and call(f"{served}/readyz")[0] == 200


#: What the docs page's files ask for, by file: the page's attributes, our start script's spec
#: url, a style sheet's url(), a script's source map (Swagger UI's own defaults, such as its
#: demo spec's address, are overridden by the start script, which the test reads).
REFERENCES = {
    "/api/docs": r'(?:src|href)="([^"]+)"',
    "/start.js": r'url: "([^"]+)"',
    ".css": r"url\(['\"]?([^)'\"]+)",
    ".js": r"sourceMappingURL=(\S+)",
}


def references(url: str, text: str) -> list[str]:
    """The URLs the file at `url` references (`REFERENCES`; data: URLs aside), made absolute."""
    pattern = next((p for suffix, p in REFERENCES.items() if url.endswith(suffix)), None)
    found = re.findall(pattern, text) if pattern else []
    return [urllib.parse.urljoin(url, ref) for ref in found if not ref.startswith("data:")]


def test_api_docs_are_served_whole_from_the_server_with_the_spec_scope(served: str, auth: Auth):
    """/api/docs and every file it references, followed down to the OpenAPI document, come from
    the server itself (no other host: no CDN, no online validator), and need the scope that
    /api/openapi.yaml needs (read): no credential 401, the dashboard's scope 403."""
    token, page = auth.tokens["docs"], f"{served}/api/docs"
    assert [call(page)[0], call(page, auth.tokens["dash"])[0]] == [401, 403]
    seen, queue = {page}, [page]
    while queue:
        url = queue.pop()
        status, _, body = call(url, token)
        assert status == 200, (url, status)
        for target in references(url, body.decode(errors="replace")):
            assert urllib.parse.urlsplit(target).netloc == urllib.parse.urlsplit(served).netloc, (url, target)
            if target not in seen:
                seen.add(target)
                queue.append(target)
    assert {f"{served}/api/openapi.yaml", f"{served}/api/docs/swagger-ui-bundle.js.map"} <= seen, seen
    assert b"validatorUrl: null" in call(f"{served}/api/docs/start.js", token)[2]


def test_a_token_whose_line_is_removed_is_refused_without_a_restart(served: str, auth: Auth):
    token, entry = new_token("temporary", frozenset({"read"}), None)
    kept = auth.file.read_text()
    auth.file.write_text(kept + entry.line() + "\n")
    wait_for(lambda: call(f"{served}/api/ladders", token)[0] == 200, "the new token let in", 10)
    auth.file.write_text(kept)
    wait_for(lambda: call(f"{served}/api/ladders", token)[0] == 401, "the removed token refused", 10)


def test_jwts_only_well_signed_current_ones_of_the_issuer_for_this_audience(served: str, auth: Auth):
    idp, ladders = auth.idp, f"{served}/api/ladders"
    assert call(ladders, idp.token())[0] == 200
    assert call(ladders, idp.token(scope="", scp=["profile", "read"]))[0] == 200
    assert call(ladders, idp.token(scope="metrics"))[0] == 403
    refused = {
        "expired": idp.token(exp=int(__import__("time").time()) - 120),
        "not yet valid": idp.token(nbf=int(__import__("time").time()) + 600),
        "wrong issuer": idp.token(iss="https://elsewhere.example.test/"),
        "wrong audience": idp.token(aud="another-service"),
        "alg none": idp.unsigned(),
        "HS256 with the public key": idp.hs256_with_public_key(),
        "unknown kid": idp.token(kid="k2"),  # k2 is not published (yet)
    }
    answers = {what: call(ladders, token) for what, token in refused.items()}
    assert {what: a[0] for what, a in answers.items()} == dict.fromkeys(refused, 401)
    assert len({a[2] for a in answers.values()}) == 1  # one answer, whatever is wrong


def test_a_rotated_key_is_fetched_by_its_new_kid(served: str, auth: Auth):
    idp, ladders = auth.idp, f"{served}/api/ladders"
    assert call(ladders, idp.token(kid="k1"))[0] == 200
    before = idp.fetches
    idp.published = ["k1", "k2"]
    try:
        assert call(ladders, idp.token(kid="k2"))[0] == 200
        assert idp.fetches == before + 1
        assert call(ladders, idp.token(kid="k2"))[0] == 200 and idp.fetches == before + 1  # cached
    finally:
        idp.published = ["k1"]


def test_a_burst_beyond_the_bucket_is_429_with_retry_after(served: str, auth: Auth):
    answers = [call(f"{served}/api/ladders", auth.tokens["burst"]) for _ in range(BURST + 2)]
    assert [a[0] for a in answers] == [200] * BURST + [429, 429]
    assert 1 <= int(answers[-1][1]["Retry-After"]) <= 5  # one request at 0.2 per second
    assert call(f"{served}/api/ladders", auth.tokens["reader"])[0] == 200  # buckets are per token


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_refuses_to_start_on_all_interfaces_without_authentication(command: str):
    store = (
        ["--store", "memory"]
        if command == "serve"
        else ["--broker", "kafka://127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1"]
    )
    run = cli(command, *store, "--web-host", "0.0.0.0", env={"STREAM_RATER_API_AUTH": "auto"}, timeout=60)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "STREAM_RATER_API_AUTH=none" in run.stderr, run.stderr
    assert run.stderr.startswith(f"stream-rater {command}: --web-host 0.0.0.0 is not a loopback address")


@pytest.fixture(scope="module")
def worker(
    auth: Auth, broker_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A worker asking for credentials, with no matches, and a burst the dashboard's first
    requests fit in; its base URL."""
    directory = tmp_path_factory.mktemp("worker")
    settings = tagged_settings(
        uuid.uuid4().hex[:10], broker=broker_url, redis_url=redis_url, web_port=free_port(), partitions=1
    )
    env = {**worker_test_env(["auth-ladder"], directory / "faust-data"), **auth.env(burst=40)}
    log = directory / "worker.log"
    process = start_worker(settings, env, log.open("w"))
    try:
        wait_ready(process, f"http://127.0.0.1:{settings.web_port}/readyz", 90)
        yield f"http://127.0.0.1:{settings.web_port}"
    finally:
        assert stop_process(process) == 0, log.read_text()[-3000:]


def test_worker_metrics_and_dashboard_feeds_need_their_scopes(worker: str, auth: Auth):
    assert call(f"{worker}/metrics")[0] == 401
    assert call(f"{worker}/metrics", auth.tokens["reader"])[0] == 403
    assert call(f"{worker}/api/overview", auth.tokens["reader"])[0] == 403
    assert call(f"{worker}/api/overview", auth.tokens["dash"])[0] == 200
    assert call(f"{worker}/api/overview", auth.idp.token(scope="dashboard"))[0] == 200
    assert call(f"{worker}/api/overview", auth.idp.token(scope="dashboard", exp=1))[0] == 401
    status, _, body = call(f"{worker}/metrics", auth.tokens["scraper"])
    assert status == 200
    refusals = {
        line.split('reason="')[1].split('"')[0]: float(line.split()[-1])
        for line in body.decode().splitlines()
        if line.startswith("stream_rater_api_refusals_total{")
    }
    assert refusals["no_credential"] >= 1 and refusals["scope"] >= 2 and refusals["bad_credential"] >= 1


def sign_in_page(page, worker: str) -> list[str]:
    """Open the dashboard (its sign-in page); the URLs the page requests from then on."""
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    page.goto(f"{worker}/")
    return urls


def dashboard_shown(page) -> None:
    """Wait for the signed-in dashboard: loaded, and the worker ready."""
    page.wait_for_selector("body[data-loaded=true]")
    page.wait_for_function("document.querySelector('#status').textContent === 'ready'")


@needs_chromium
def test_dashboard_signs_in_with_a_token_in_a_browser(worker: str, auth: Auth, browser_page):
    page = browser_page
    urls = sign_in_page(page, worker)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-sign-in.png"))
    page.fill("#token", auth.tokens["scraper"])  # no dashboard scope
    page.click("button[type=submit]")
    page.wait_for_selector("#error:has-text('no scope dashboard')")
    page.fill("#token", auth.tokens["dash"])
    page.click("button[type=submit]")
    dashboard_shown(page)
    page.screenshot(path=str(ARTIFACTS / "dashboard-signed-in.png"))
    (cookie,) = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] == auth.tokens["dash"]
    assert not [url for url in urls if auth.tokens["dash"] in url or auth.tokens["scraper"] in url]
    assert any(url.endswith("/api/overview") for url in urls)


@needs_chromium
def test_dashboard_signs_in_through_the_identity_provider_in_a_browser(worker: str, auth: Auth, browser_page):
    """The provider's button: authorization code with PKCE, back to the dashboard signed in."""
    page = browser_page
    urls = sign_in_page(page, worker)
    page.click("#provider")
    dashboard_shown(page)
    assert any(
        url.startswith(f"{auth.idp.base}/authorize?") and "code_challenge_method=S256" in url for url in urls
    )
    session = [c for c in page.context.cookies() if c["name"] == "stream_rater_session"]
    assert session and session[0]["httpOnly"] and not [url for url in urls if session[0]["value"] in url]
    assert not auth.idp.codes  # the code was traded, once
