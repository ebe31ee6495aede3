"""The canonical JSON every identity is hashed from: equal values give equal text in any
key order, and the spelling does not drift (a stored workload key, schedule hash or
device key is only found again while it holds)."""

from __future__ import annotations

from scheduler_search.canonical import canonical_json, canonical_sha256, sha256_hex
from scheduler_search.ops import parse_spec

VALUE = {"b": 1, "a": [1, {"d": 2, "c": None}]}


def test_key_order_does_not_change_the_text_or_its_hash() -> None:
    reordered = {"a": [1, {"c": None, "d": 2}], "b": 1}
    assert canonical_json(VALUE) == canonical_json(reordered) == '{"a":[1,{"c":null,"d":2}],"b":1}'
    assert canonical_sha256(VALUE) == canonical_sha256(reordered) == sha256_hex(
        '{"a":[1,{"c":null,"d":2}],"b":1}')


def test_a_stored_workload_key_is_found_again() -> None:
    """The key of GEMM 4096^3 fp16 as stored databases hold it (the same before and
    after its spelling moved to one module, 2026-12-04)."""
    spec = parse_spec("gemm", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"})
    assert spec.workload_key() == (
        "398159d0f4671600161bb3fd3aa872d34f0f2b6147fbb2ae5a7d188afee476f4")
