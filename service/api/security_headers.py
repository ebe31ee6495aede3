"""Security headers on every answer (pure ASGI middleware, as ``guards``): pages cannot
be framed (clickjacking), their scripts come from this server only, no answer is
sniffed into another type, and no URL of the dashboard leaks to another site.

The dashboard's pages load their scripts from ``/static`` (no inline script or event
handler attribute: ``tests/dashboard/test_dashboard_security.py`` checks), so
``script-src 'self'`` holds. Styles allow ``'unsafe-inline'``: the pages set bar widths in
``style`` attributes and plotly.js adds its own ``<style>`` elements. ``/docs`` and
``/redoc`` are Swagger UI's and ReDoc's pages, which start themselves from inline
scripts: they get the other headers but no Content-Security-Policy.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The dashboard pages' Content-Security-Policy.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])
_ALWAYS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]
_NO_POLICY = ("/docs", "/redoc")


class SecurityHeaders:
    """Adds the headers above to each HTTP answer (a header the app set is kept)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with_policy = scope["path"] not in _NO_POLICY

        async def add_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                extra = list(_ALWAYS)
                if with_policy and _is_html(headers):
                    extra.append((b"content-security-policy",
                                  CONTENT_SECURITY_POLICY.encode()))
                headers.extend(h for h in extra if h[0] not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, add_headers)


def _is_html(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() == b"content-type" and value.startswith(b"text/html")
               for name, value in headers)
