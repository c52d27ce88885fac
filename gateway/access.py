"""An A2A route's entry: the call's record, authentication, and the record's close.

Every route that is an A2A call (JSON-RPC `POST /`, the REST routes, a file download)
is wrapped here: the call pipeline (service.calls) opens its record when the request
reaches the route, authenticates the caller (auth.py: 401 with its challenges before
the body is read or the path routed), hands the endpoint its `Caller`, and closes the
record when the last part of the response — the end of an event stream included — is
sent, so the access line's duration and outcome are those the caller saw; on the way out
it notes the response's status and body bytes for that line. Routes that
are not A2A calls (the card, /health, the JWKS) have no record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway.auth import Handler, HttpAuth
from service.calls.pipeline import CallerUnknown, Pipeline
from service.calls.record import Call

Endpoint = Callable[[Request], Awaitable[Response]]


class _Sent:
    """The endpoint's response; the call is closed as its last body part goes out (so its
    line is in the log by the time the caller has the answer), or when sending fails."""

    __slots__ = ("response", "call", "pipeline", "_open")

    def __init__(self, response: Response, call: Call, pipeline: Pipeline) -> None:
        self.response = response
        self.call = call
        self.pipeline = pipeline
        self._open = True

    def _close(self) -> None:
        if self._open:
            self._open = False
            self.pipeline.close(self.call)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = self.call

        async def sending(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.body":
                call.bytes += len(message.get("body", b""))
                if not message.get("more_body", False):
                    self._close()
            elif kind == "http.response.start":
                call.status = message["status"]
            await send(message)

        try:
            await self.response(scope, receive, sending)
        except BaseException:
            if self._open:
                self.call.cancelled()  # the caller went away (or sending failed)
            raise
        finally:
            self._close()


def a2a_route(
    binding: str, handler: Handler, pipeline: Pipeline, auth: HttpAuth, method: str = ""
) -> Endpoint:
    """`handler` as an A2A call on `binding` (jsonrpc, rest); `method` names routes that are
    no A2A method (the bindings name theirs once routed)."""

    async def endpoint(request: Request) -> Response:
        call = pipeline.open(binding, method)
        if call.logged:  # the access line's transport fields
            client = request.scope.get("client")
            if client:
                call.client = client[0]
            call.user_agent = request.headers.get("user-agent", "")
        try:
            caller = await auth.caller(call, request)
        except CallerUnknown as exc:
            call.failed(exc)
            response = auth.unauthorized()
        else:
            try:
                response = await handler(request, caller)
            except BaseException:
                call.cancelled()
                pipeline.close(call)
                raise
        return _Sent(response, call, pipeline)  # type: ignore[return-value]  # an ASGI app, as starlette calls it

    return endpoint
