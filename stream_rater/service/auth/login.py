"""The dashboard's sign-in through the identity provider: OAuth 2.0's authorization code flow
with PKCE (RFC 7636), the provider's access token then the dashboard's session as a pasted one
would be (`guard.Guard.session`).

``GET /auth/login`` sends the browser to ``STREAM_RATER_API_OIDC_AUTHORIZE_URL`` with a random
``state`` and the S256 challenge of a random verifier, both kept in an HttpOnly cookie for ten
minutes (no server-side state, so the callback may reach another worker). ``GET /auth/callback``
checks the state, trades the code and the verifier at ``STREAM_RATER_API_OIDC_TOKEN_URL`` for an
access token, verifies it as every JWT is, and signs in. The code in the callback's URL is no
credential: it is good once, and only with the verifier that never left the browser's cookie.
The redirect URI is ``<scheme>://<host>/auth/callback`` of the request (register it with the
provider; behind a proxy, ``X-Forwarded-Proto`` gives the scheme).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Protocol
from urllib.parse import urlencode, urlsplit

import aiohttp
from aiohttp import web

from stream_rater.config.settings import Settings

#: The cookie that carries the state and the PKCE verifier from login to callback.
LOGIN_COOKIE = "stream_rater_login"
LOGIN_SECONDS = 600
TOKEN_TIMEOUT = 10.0
#: After the callback, a page that goes to the dashboard by script: a navigation the browser
#: starts from our own page sends the SameSite=Strict session cookie (a redirect that the
#: provider's page started would not).
TO_DASHBOARD = '<!doctype html><meta charset="utf-8"><script>location.replace("/")</script>'


class Sessions(Protocol):
    """What signs a browser in with a credential (`guard.Guard`)."""

    async def session(self, request: web.Request, token: str, response: web.Response) -> web.Response: ...


class ProviderLogin:
    """The two routes of the flow, for one provider and client."""

    def __init__(self, settings: Settings, sessions: Sessions) -> None:
        self.authorize_url = _endpoint(settings.api_oidc_authorize_url, "api_oidc_authorize_url")
        self.token_url = _endpoint(settings.api_oidc_token_url, "api_oidc_token_url")
        self.client_id = settings.api_oidc_client_id
        self.client_secret = settings.api_oidc_client_secret
        self.scope = settings.api_oidc_scope
        self.sessions = sessions

    @classmethod
    def of(cls, settings: Settings, sessions: Sessions) -> ProviderLogin | None:
        """The login of `settings`, or None when no provider's endpoints are set."""
        given = (settings.api_oidc_authorize_url, settings.api_oidc_token_url, settings.api_oidc_client_id)
        if not any(given):
            return None
        if not all(given):
            raise ValueError(
                "STREAM_RATER_API_OIDC_AUTHORIZE_URL, _TOKEN_URL and _CLIENT_ID: set all three or none"
            )
        return cls(settings, sessions)

    async def start(self, request: web.Request) -> web.StreamResponse:
        """``GET /auth/login``: to the provider's authorization endpoint."""
        state, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(48)
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": _callback_url(request),
            "scope": self.scope,
            "state": state,
            "code_challenge": _challenge(verifier),
            "code_challenge_method": "S256",
        }
        separator = "&" if urlsplit(self.authorize_url).query else "?"
        response = web.HTTPFound(self.authorize_url + separator + urlencode(query))
        response.set_cookie(
            LOGIN_COOKIE,
            f"{state}.{verifier}",
            max_age=LOGIN_SECONDS,
            path="/auth/callback",
            httponly=True,
            samesite="Lax",  # sent on the provider's redirect back, a top-level GET
            secure=request.secure or request.headers.get("X-Forwarded-Proto") == "https",
        )
        return response

    async def finish(self, request: web.Request) -> web.Response:
        """``GET /auth/callback?code&state``: trade the code for an access token; sign in."""
        state, _, verifier = request.cookies.get(LOGIN_COOKIE, "").partition(".")
        given = request.query.get("state", "")
        code = request.query.get("code", "")
        if not (state and code and hmac.compare_digest(state.encode(), given.encode())):
            why = request.query.get("error", "the sign-in expired or did not start here")
            return web.json_response(
                {"error": f"sign-in with the identity provider failed: {why}"}, status=401
            )
        token = await self._token(request, code, verifier)
        page = web.Response(text=TO_DASHBOARD, content_type="text/html")
        page.del_cookie(LOGIN_COOKIE, path="/auth/callback")
        return await self.sessions.session(request, token, page)

    async def _token(self, request: web.Request, code: str, verifier: str) -> str:
        """The provider's access token for `code` ("" when it gives none)."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": _callback_url(request),
            "client_id": self.client_id,
            "code_verifier": verifier,
        }
        auth = aiohttp.BasicAuth(self.client_id, self.client_secret) if self.client_secret else None
        timeout = aiohttp.ClientTimeout(total=TOKEN_TIMEOUT)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as client,
                client.post(self.token_url, data=form, auth=auth) as answer,
            ):
                body = await answer.json(content_type=None) if answer.status == 200 else {}
        except (aiohttp.ClientError, TimeoutError, ValueError):
            body = {}
        token = body.get("access_token") if isinstance(body, dict) else None
        return token if isinstance(token, str) else ""


def _endpoint(url: str, name: str) -> str:
    """`url` if https (http only on loopback, for tests); `ValueError` naming the setting."""
    parts = urlsplit(url)
    loopback = parts.hostname in ("localhost", "127.0.0.1", "::1")
    if parts.scheme == "https" or (parts.scheme == "http" and loopback):
        return url
    raise ValueError(f"STREAM_RATER_{name.upper()}={url}: use an https URL")


def _callback_url(request: web.Request) -> str:
    scheme = request.headers.get("X-Forwarded-Proto", request.scheme)
    return f"{scheme}://{request.host}/auth/callback"


def _challenge(verifier: str) -> str:
    """PKCE's S256 challenge of `verifier`."""
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
