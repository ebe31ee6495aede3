"""API key tokens (``ptk_<prefix>_<secret>``) and the dashboard's session secrets.

The prefix (12 hex digits, stored in clear and unique) finds the key's row; the secret
(256 random bits) is stored only as HMAC-SHA256 under a per-key salt. A slow password
hash buys nothing for a random 256-bit secret (nobody can guess it) and would cost every
request milliseconds; the digest is compared with ``hmac.compare_digest``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

TOKEN_PREFIX = "ptk"
_PREFIX_BYTES = 6
_SECRET_BYTES = 32
_SALT_BYTES = 16


@dataclass(frozen=True)
class IssuedKey:
    """A new key: the token to hand out once, and what is stored of it."""

    token: str
    prefix: str
    salt: str
    digest: str


def _digest(salt: str, secret: str) -> str:
    return hmac.new(bytes.fromhex(salt), secret.encode(), hashlib.sha256).hexdigest()


def issue() -> IssuedKey:
    """A fresh random token with its prefix, salt and digest."""
    prefix = secrets.token_hex(_PREFIX_BYTES)
    secret = secrets.token_urlsafe(_SECRET_BYTES)
    salt = secrets.token_hex(_SALT_BYTES)
    return IssuedKey(f"{TOKEN_PREFIX}_{prefix}_{secret}", prefix, salt, _digest(salt, secret))


def parse(token: str) -> tuple[str, str] | None:
    """``(prefix, secret)`` of a well-formed token, else ``None``."""
    parts = token.strip().split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def verify(secret: str, *, salt: str, digest: str) -> bool:
    """Whether ``secret`` is the one stored as ``digest`` (constant-time comparison)."""
    return hmac.compare_digest(_digest(salt, secret), digest)


def session_secret() -> str:
    """A new dashboard session's cookie value (256 random bits)."""
    return secrets.token_urlsafe(_SECRET_BYTES)


def fingerprint(token: str) -> str:
    """SHA-256 of a session secret (its row's id) or of any presented token (its cache
    entry): a store of fingerprints opens nothing. Unsalted on purpose: the secrets
    are random, and the row must be found by it."""
    return hashlib.sha256(token.encode()).hexdigest()
