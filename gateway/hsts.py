"""`Strict-Transport-Security` on every HTTPS response of the gateway (RFC 6797).

A pure ASGI middleware, so it wraps the whole application from the outside: every
response passes it, including the 401 of the auth guard, 404/405, the card, `/health`,
event streams and the 500 starlette's error middleware writes. The header goes only on
responses to requests that came over TLS (`scope["scheme"] == "https"`): RFC 6797 §7.2
forbids it over plain HTTP, where an active attacker could add or strip it anyway. A
header the application set itself is replaced, so there is always exactly one.

Responses written by the HTTP server itself without calling the application (uvicorn's
answer to a request it cannot parse) do not carry it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEADER = b"strict-transport-security"
DEFAULT_MAX_AGE_SECONDS = 31_536_000  # one year


def hsts_value(max_age_seconds: int) -> str:
    return f"max-age={int(max_age_seconds)}"


class HstsMiddleware:
    """Adds `Strict-Transport-Security: max-age=N` to every response to an https request."""

    def __init__(self, app: ASGIApp, max_age_seconds: int = DEFAULT_MAX_AGE_SECONDS) -> None:
        if max_age_seconds <= 0:
            raise ValueError(
                "max_age_seconds must be positive (0 means: do not install the middleware)"
            )
        self.app = app
        self.header = (HEADER, hsts_value(max_age_seconds).encode("latin-1"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("scheme") != "https":
            await self.app(scope, receive, send)
            return

        async def send_with_hsts(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != HEADER]
                headers.append(self.header)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_hsts)
