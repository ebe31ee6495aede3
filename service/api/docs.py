"""``/docs`` (Swagger UI) and ``/redoc`` that work offline: their scripts and styles are
served from the installed ``fastapi-offline`` wheel's package data, never from a CDN, so
the API's pages render on a machine without internet access."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

#: Where the documentation pages' assets are served.
ASSETS_URL = "/docs-assets"


def _assets_dir() -> Path:
    """The wheel's static folder (located without importing the package)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        raise RuntimeError("fastapi-offline is not installed: pip install fastapi-offline")
    return Path(spec.origin).parent / "static"


def mount_api_docs(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Serve ``/docs`` and ``/redoc`` (create the app with ``docs_url=None`` and
    ``redoc_url=None``) and their assets at :data:`ASSETS_URL`."""
    app.mount(ASSETS_URL, StaticFiles(directory=_assets_dir()), name="docs-assets")
    title = f"{app.title} API"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=title,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url, title=title,
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png", with_google_fonts=False,
        )
