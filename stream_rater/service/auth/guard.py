"""Who may ask what of a worker's or ``serve``'s HTTP server: one aiohttp middleware in front of
every route (`protect`), checking the credential, the scope the route needs
(`scopes.required_scopes`) and the caller's request rate.

A credential is a bearer token (``Authorization: Bearer …``): an API token (`tokens`) or a JWT
of the identity provider (`oidc`). The dashboard signs in by posting one to ``/auth/session``,
which sets it as an ``HttpOnly``, ``SameSite=Strict`` cookie that only GET requests may use;
a credential is never put in a URL. Answers, each one line of JSON:

- 401 with ``WWW-Authenticate: Bearer`` for no credential or a bad one (unknown, malformed,
  expired, wrong issuer or audience: all alike, so that nothing tells whether a token exists);
  a browser asking for the dashboard page gets the sign-in page instead;
- 403 when the credential lacks the route's scope;
- 429 with ``Retry-After`` when the caller's bucket is empty (`limits`).

Each refusal counts in ``stream_rater_api_refusals_total{reason}``.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from stream_rater.config.settings import Settings
from stream_rater.service import metrics
from stream_rater.service.auth.limits import RateLimiter, retry_after
from stream_rater.service.auth.login import ProviderLogin
from stream_rater.service.auth.scopes import Principal, required_scopes
from stream_rater.service.auth.tokens import TOKEN_PREFIX, TokenFile

if TYPE_CHECKING:
    from stream_rater.service.auth.oidc import JwtVerifier

log = logging.getLogger(__name__)

REFUSALS = metrics.API_REFUSALS
#: The dashboard's session cookie.
COOKIE = "stream_rater_session"
#: Longest a dashboard session lasts, in seconds (a JWT's own expiry ends it sooner).
SESSION_SECONDS = 8 * 3600
SIGN_IN_PAGE = Path(__file__).parent.parent / "web_static" / "signin.html"
REALM = 'Bearer realm="stream-rater"'

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """Whether the web server's bind address `host` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings) -> None:
    """Refuse (`ValueError`, exit 2) to serve a non-loopback address without authentication,
    unless ``STREAM_RATER_API_AUTH=none`` says so on purpose."""
    configured = settings.api_tokens_file or settings.api_jwks
    if settings.api_auth == "none" or configured or is_loopback(settings.web_host):
        return
    raise ValueError(
        f"--web-host {settings.web_host} is not a loopback address and no authentication is configured: "
        "set STREAM_RATER_API_TOKENS_FILE or STREAM_RATER_API_JWKS, or STREAM_RATER_API_AUTH=none to "
        "serve anyone who reaches the port"
    )


class Guard:
    """The credential, scope and rate checks of the settings' ``api_*`` fields."""

    def __init__(self, settings: Settings) -> None:
        """Read the tokens file and set up the JWKS now: a bad setting fails at start."""
        check_exposure(settings)
        off = settings.api_auth == "none"
        self.tokens = TokenFile(settings.api_tokens_file) if settings.api_tokens_file and not off else None
        self.jwt: JwtVerifier | None = None
        if settings.api_jwks and not off:
            # only here: PyJWT and cryptography (about 0.2 CPU-s) load where JWTs are accepted
            from stream_rater.service.auth.oidc import JwtVerifier, allowed_algorithms

            self.jwt = JwtVerifier(
                settings.api_jwks,
                settings.api_issuer,
                settings.api_audience,
                allowed_algorithms(settings.api_jwt_algorithms),
                settings.api_jwt_leeway,
                settings.api_jwks_refresh,
            )
        self.limiter = RateLimiter(settings.api_rate, settings.api_burst)
        self.login = ProviderLogin.of(settings, self) if self.jwt is not None else None
        self.networks = _networks(settings.api_metrics_networks)

    @property
    def enabled(self) -> bool:
        """Whether requests are checked at all."""
        return self.tokens is not None or self.jwt is not None

    async def principal(self, credential: str) -> Principal | None:
        """Who `credential` is, or None."""
        if self.tokens is not None and credential.startswith(TOKEN_PREFIX):
            return self.tokens.principal(credential)
        if self.jwt is not None and credential.count(".") == 2:
            return await self.jwt.principal(credential)
        return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Let `request` through to `handler`, or refuse it."""
        needed = required_scopes(request.method, request.path)
        if not needed or (request.path == "/metrics" and self._trusted(request.remote)):
            return await handler(request)
        credential = _credential(request)
        principal = await self.principal(credential) if credential else None
        if principal is None:
            reason = "bad_credential" if credential else "no_credential"
            REFUSALS.labels(reason).inc()
            if request.path == "/" and request.method == "GET":
                return _sign_in_page(self.login is not None)
            return _unauthorized(reason)
        if not principal.scopes & needed:
            REFUSALS.labels("scope").inc()
            wanted = " ".join(sorted(needed))
            return _error(
                403,
                f"this credential has no scope {' or '.join(sorted(needed))}",
                f'{REALM}, error="insufficient_scope", scope="{wanted}"',
            )
        wait = self.limiter.take(principal.identity, principal.rate)
        if wait:
            REFUSALS.labels("rate").inc()
            response = _error(429, f"too many requests from {principal.identity}; retry later")
            response.headers["Retry-After"] = retry_after(wait)
            return response
        return await handler(request)

    def _trusted(self, remote: str | None) -> bool:
        try:
            address = ipaddress.ip_address(remote or "")
        except ValueError:
            return False
        return any(address in network for network in self.networks)

    async def sign_in(self, request: web.Request) -> web.Response:
        """``POST /auth/session`` ``{"token": …}``: the token as the dashboard's session cookie,
        if it has the ``dashboard`` scope."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        given = body.get("token") if isinstance(body, dict) else None
        token = given.strip() if isinstance(given, str) else ""
        return await self.session(request, token, web.json_response({"signed_in": True}))

    async def session(self, request: web.Request, token: str, response: web.Response) -> web.Response:
        """`response` with `token` as the dashboard's session cookie if it is a credential with
        the ``dashboard`` scope, else the 401 or 403 that says why not."""
        principal = await self.principal(token) if token else None
        if principal is None:
            REFUSALS.labels("bad_credential").inc()
            return _unauthorized("bad_credential")
        if "dashboard" not in principal.scopes:
            REFUSALS.labels("scope").inc()
            return _error(403, "this credential has no scope dashboard")
        lasts = SESSION_SECONDS
        if principal.expires is not None:
            lasts = max(0, min(lasts, int(principal.expires - time.time())))
        response.set_cookie(
            COOKIE, token, max_age=lasts, path="/", httponly=True, samesite="Strict", secure=is_https(request)
        )
        log.info("dashboard signed in: %s, for %d s", principal.identity, lasts)
        return response

    async def sign_out(self, request: web.Request) -> web.Response:
        """``DELETE /auth/session``: forget the session cookie."""
        response = web.json_response({"signed_in": None})
        response.del_cookie(COOKIE, path="/")
        return response


def is_https(request: web.Request) -> bool:
    """Whether the browser reached us over HTTPS (here, or at a proxy that says so)."""
    return request.secure or request.headers.get("X-Forwarded-Proto") == "https"


def _networks(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    try:
        return [ipaddress.ip_network(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise ValueError(f"STREAM_RATER_API_METRICS_NETWORKS={text}: {exc}") from None


def _credential(request: web.Request) -> str | None:
    """The bearer token of the request, or for a GET its session cookie."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if request.method in ("GET", "HEAD"):
        return request.cookies.get(COOKIE) or None
    return None


def _error(status: int, message: str, challenge: str | None = None) -> web.Response:
    response = web.json_response({"error": message}, status=status)
    if challenge:
        response.headers["WWW-Authenticate"] = challenge
    return response


def _unauthorized(reason: str) -> web.Response:
    if reason == "no_credential":
        return _error(401, "authentication required: send Authorization: Bearer <token or JWT>", REALM)
    return _error(401, "invalid credential", f'{REALM}, error="invalid_token"')


def _sign_in_page(with_provider: bool) -> web.Response:
    page = SIGN_IN_PAGE.read_text()
    if with_provider:  # the page hides the provider's button unless told
        page = page.replace('id="provider" hidden', 'id="provider"')
    response = web.Response(status=401, text=page, content_type="text/html")
    response.headers["WWW-Authenticate"] = REALM
    return response


def protect(application: web.Application, settings: Settings) -> None:
    """Put the `Guard` of `settings` in front of `application`'s routes, with the dashboard's
    sign-in routes; nothing when no authentication is configured (loopback only, or
    ``STREAM_RATER_API_AUTH=none``)."""
    guard = Guard(settings)
    if not guard.enabled:
        log.info(
            "the API and dashboard ask for no credential (%s)",
            "STREAM_RATER_API_AUTH=none" if settings.api_auth == "none" else "loopback, none configured",
        )
        return
    application.middlewares.insert(0, guard.middleware)
    application.router.add_post("/auth/session", guard.sign_in)
    application.router.add_delete("/auth/session", guard.sign_out)
    if guard.login is not None:
        application.router.add_get("/auth/login", guard.login.start)
        application.router.add_get("/auth/callback", guard.login.finish)
    kinds = [kind for kind, on in (("API tokens", guard.tokens), ("JWTs", guard.jwt)) if on]
    log.info("the API and dashboard ask for credentials: %s", " or ".join(kinds))
