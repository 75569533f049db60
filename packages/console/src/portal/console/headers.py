"""The headers every answer of the console carries: what a browser may load, run and frame.

The console's pages load one script and one stylesheet of their own and fetch their own JSON
API; the charts are SVG put in the page as elements (presentation attributes, no ``style``).
So the policy allows exactly that and nothing else: no inline script or style, nothing from
another origin, no plugin, and no page of another site may frame the console (clickjacking).
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "SecurityHeaders"]

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    # For browsers that predate frame-ancestors.
    "X-Frame-Options": "DENY",
    # A log served as text is never run as a script because a browser guessed its type.
    "X-Content-Type-Options": "nosniff",
    # An address with ?token= never leaves in a Referer header.
    "Referrer-Policy": "no-referrer",
}


class SecurityHeaders:
    """ASGI middleware that adds :data:`SECURITY_HEADERS` to every HTTP answer of ``app``.

    It wraps the whole application (outside Starlette's own error handling), so a refusal of
    a host, a 401 and an internal error carry the headers as a page does.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
