"""``GET /api/docs``: the read API's interactive documentation, Swagger UI showing
``/api/openapi.yaml``. Swagger UI's files come from the ``swagger-ui-bundle`` wheel and are
served by this server under ``/api/docs/`` (no CDN: the page works offline and behind a
firewall), with Swagger UI's online spec validator turned off, so the page asks no other host.
It needs the scope ``/api/openapi.yaml`` needs (`service.auth.scopes`)."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from swagger_ui_bundle import swagger_ui_path

#: The Swagger UI files the page uses (their source maps for a browser's developer tools).
ASSETS = frozenset(
    {
        "swagger-ui.css",
        "swagger-ui.css.map",
        "swagger-ui-bundle.js",
        "swagger-ui-bundle.js.map",
        "favicon-32x32.png",
    }
)
_BUNDLE = Path(swagger_ui_path)

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>stream_rater read API</title>
<link rel="icon" type="image/png" href="/api/docs/favicon-32x32.png">
<link rel="stylesheet" href="/api/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/api/docs/swagger-ui-bundle.js"></script>
<script src="/api/docs/start.js"></script>
</body>
</html>
"""

#: In a file of its own rather than inline, so a Content-Security-Policy of ``script-src 'self'`` allows it.
START = (
    'window.ui = SwaggerUIBundle({url: "/api/openapi.yaml", dom_id: "#swagger-ui", validatorUrl: null});\n'
)


async def _page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html")


async def _asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name == "start.js":
        return web.Response(text=START, content_type="text/javascript")
    if name not in ASSETS:
        return web.json_response({"error": f"{name!r} is not a file of the API docs"}, status=404)
    return web.FileResponse(_BUNDLE / name)


def docs_routes() -> list[web.RouteDef]:
    """The page, and its files: its start script and Swagger UI's."""
    return [web.get("/api/docs", _page), web.get("/api/docs/{name}", _asset)]
