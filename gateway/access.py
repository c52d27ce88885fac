"""The access line of an HTTP call (service.net.access): opened when the request reaches a
binding's endpoint, written when the last part of its response — the end of an event
stream included — is sent, so the duration and outcome are those the caller saw. Routes that are not A2A calls
(the card, /health, the JWKS) write none."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from service.net.access import CANCELLED, OK, AccessLog, Call

Endpoint = Callable[[Request], Awaitable[Response]]


class _Sent:
    """The endpoint's response; the call's line is written as its last body part goes out
    (so it is in the log by the time the caller has the answer), or when sending fails."""

    __slots__ = ("response", "call", "_open")

    def __init__(self, response: Response, call: Call) -> None:
        self.response = response
        self.call = call
        self._open = True

    def _close(self) -> None:
        if self._open:
            self._open = False
            self.call.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self._close()
            await send(message)

        try:
            await self.response(scope, receive, sending)
        except BaseException:
            if self._open and self.call.outcome == OK:
                self.call.outcome = CANCELLED  # the caller went away (or sending failed)
            raise
        finally:
            self._close()


def logged(
    binding: str, endpoint: Endpoint, access: AccessLog | None, method: str = ""
) -> Endpoint:
    """`endpoint` with an access line per request (itself when the access log is off);
    `method` names routes that are no A2A method (the bindings name theirs once routed)."""
    if access is None:
        return endpoint

    async def handle(request: Request) -> Response:
        call = access.open(binding, method)
        if call is None:
            return await endpoint(request)
        try:
            response = await endpoint(request)
        except BaseException:
            if call.outcome == OK:
                call.outcome = CANCELLED
            call.close()
            raise
        return _Sent(response, call)  # type: ignore[return-value]  # an ASGI app, as starlette calls it

    return handle
