"""Canonical JSON and its sha256: the one spelling of every identity pipetune hashes (a
workload's key, a schedule's hash, a kernel's hash, a device's fingerprint and key, a
range's key). Sorted keys and no whitespace, so equal values give equal text whatever
the order their keys were built in; a stored key stays valid only while this spelling
does."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """``value`` as JSON with sorted keys and no whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def sha256_hex(text: str) -> str:
    """The sha256 of ``text`` (UTF-8), in hex."""
    return hashlib.sha256(text.encode()).hexdigest()


def canonical_sha256(value: Any) -> str:
    """The sha256 of ``value``'s canonical JSON."""
    return sha256_hex(canonical_json(value))


__all__ = ["canonical_json", "canonical_sha256", "sha256_hex"]
