"""``/docs`` and ``/redoc`` render offline: every script and style they load is served by
pipetune itself, none from a CDN."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize(("page", "script"), [("/docs", "swagger-ui-bundle.js"),
                                              ("/redoc", "redoc.standalone.js")])
def test_docs_pages_load_only_local_assets(client: TestClient, page: str, script: str) -> None:
    html = client.get(page)
    assert html.status_code == 200 and "/openapi.json" in html.text
    urls = re.findall(r'(?:src|href)="([^"]+)"', html.text)
    urls += re.findall(r"url: '([^']+)'", html.text)
    assert any(u.endswith(script) for u in urls), urls
    assert not [u for u in urls if u.startswith(("http:", "https:", "//"))], urls
    assert "fonts.googleapis" not in html.text
    for url in urls:
        if url.startswith("/docs-assets/"):
            asset = client.get(url)
            assert asset.status_code == 200 and len(asset.content) > 1000, url
