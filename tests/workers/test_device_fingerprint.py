"""The fingerprint key is a stable hash of the fingerprint's content."""

from __future__ import annotations

from workers.device import _cuda_version, arch_of, fingerprint_key
from workers.testing import STANDIN_FINGERPRINT


def test_key_is_stable_and_order_independent() -> None:
    key = fingerprint_key(STANDIN_FINGERPRINT)
    assert len(key) == 64
    assert fingerprint_key(dict(reversed(list(STANDIN_FINGERPRINT.items())))) == key
    assert fingerprint_key({**STANDIN_FINGERPRINT, "codegen_version": "2"}) != key


def test_versions_and_arch() -> None:
    assert _cuda_version(13000) == "13.0" and _cuda_version(12080) == "12.8"
    assert arch_of({"compute_capability": "9.0"}) == "90"
