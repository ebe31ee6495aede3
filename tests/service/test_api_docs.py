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


def test_ops_lists_each_operators_parameters(client: TestClient) -> None:
    answer = client.get("/v1/ops").json()
    ops = {entry["op"]: entry for entry in answer["data"]}
    assert set(ops) == {"gemm", "attention", "attention_backward", "mamba2_chunk_scan",
                        "mamba2_chunk_state", "mamba2_ssd"}
    assert answer["count"] == 6
    gemm = ops["gemm"]
    assert gemm["required"] == ["m", "n", "k"] and gemm["baseline"] == "cublas"
    props = gemm["parameters"]["properties"]
    assert props["m"]["minimum"] == 1 and props["b_layout"]["default"] == "kn"
    assert set(props["dtype"]["enum"]) == {"float16", "bfloat16", "float8_e4m3", "float8_e5m2"}
    assert "epilogue" in props and "out_dtype" in props
    attention = ops["attention"]["parameters"]["properties"]
    assert set(attention["dtype"]["enum"]) == {"float16", "bfloat16", "float8_e4m3"}
    assert ops["attention"]["peers"] == ["sdpa_flash"]
    assert "kv_heads" in ops["attention"]["parameters"]["properties"]
    assert all(entry["generates_cuda"] for entry in ops.values())
    backward = ops["attention_backward"]
    assert backward["baseline"] == "sdpa_cudnn_backward"
    assert backward["peers"] == ["sdpa_flash_backward"]
    assert "deterministic" in backward["parameters"]["properties"]
    spec = client.get("/openapi.json").json()
    assert "/v1/ops" in spec["paths"]
    assert "GET /v1/ops" in spec["components"]["schemas"]["TuneRequest"]["properties"][
        "params"]["description"].replace("`", "")
