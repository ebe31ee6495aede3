"""API keys and who a request is: tokens (made, hashed, checked), scopes, the principal
of a request, and per-key request rate limits."""

from service.auth.principal import ANONYMOUS, SCOPES, Principal
from service.auth.rate import RateLimiter
from service.auth.tokens import IssuedKey, issue, parse, verify

__all__ = [
    "ANONYMOUS",
    "SCOPES",
    "IssuedKey",
    "Principal",
    "RateLimiter",
    "issue",
    "parse",
    "verify",
]
