"""Authentication on the HTTP bindings: who calls, from the request's headers.

Every A2A operation over HTTP (JSON-RPC `POST /`, every REST route, unknown paths
included, and so `GET /extendedAgentCard`) asks `HttpAuth.caller` before anything else
(access.py); the public agent card, `/health` and any other explicitly public route do
not. The credential headers go to the call pipeline's authentication (the same
`service.auth.Authenticator` the gRPC binding uses):

- no valid credential, or one credential header sent twice: `401 {"error":"Unauthorized"}`
  with one `WWW-Authenticate` challenge per enabled scheme, before the body is read or
  the path is routed;
- otherwise the endpoint gets the resolved `params.Caller`: the principal, and the
  headers call metadata may come from. In-process, those are without the credential
  headers, so they never reach the API or the agent; in proxy mode they keep them, for
  the upstream service, which authenticates the caller again.

Without authentication every caller is anonymous, with all its headers. The caller is
an argument, not something left in the ASGI scope, so an endpoint cannot run without one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from gateway.params import FORWARDED_HEADERS, GRPC_METADATA_PREFIX, Caller
from service.auth import Authenticator
from service.auth.schemes import call_metadata
from service.calls.pipeline import CallerUnknown, Pipeline
from service.calls.record import Call

Endpoint = Callable[[Request], Awaitable[Response]]  # what starlette routes to
Handler = Callable[[Request, Caller], Awaitable[Response]]  # an endpoint that needs its caller
UNAUTHORIZED_BODY = b'{"error":"Unauthorized"}'


class HttpAuth:
    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.auth: Authenticator | None = pipeline.authenticator  # None: everyone is anonymous
        self.forward_credentials = pipeline.forward_credentials
        self.credential_keys = pipeline.credential_keys

    async def caller(self, call: Call | None, request: Request) -> Caller:
        """The request's caller, or CallerUnknown."""
        headers = request.scope["headers"]
        if self.auth is None:
            return Caller("", headers)
        keys = self.credential_keys
        credentials = call_metadata(
            (name, value.decode("latin-1"))
            for raw_name, value in headers
            if (name := raw_name.decode("latin-1").lower()) in keys
        )
        principal = await self.pipeline.authenticate(call, credentials)
        return Caller(principal, self._pass_on(headers))

    def unauthorized(self) -> Response:
        response = Response(
            UNAUTHORIZED_BODY,
            status_code=401,
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )
        for challenge in self.auth.challenges() if self.auth is not None else ():
            response.headers.append("WWW-Authenticate", challenge)
        return response

    def guard(self, handler: Handler) -> Endpoint:
        """`handler` behind authentication, without a call record (e.g. `/metrics`)."""

        async def guarded(request: Request) -> Response:
            try:
                caller = await self.caller(None, request)
            except CallerUnknown:
                return self.unauthorized()
            return await handler(request, caller)

        return guarded

    def _pass_on(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The headers call metadata comes from: without credentials in-process; in proxy mode
        with them, a custom API key header re-sent as gRPC metadata so the upstream gets it."""
        kept = []
        for raw_name, raw_value in headers:
            name = raw_name.decode("latin-1").lower()
            if name not in self.credential_keys:
                kept.append((raw_name, raw_value))
            elif self.forward_credentials:
                kept.append((raw_name, raw_value))
                if name not in FORWARDED_HEADERS:
                    kept.append(((GRPC_METADATA_PREFIX + name).encode("latin-1"), raw_value))
        return kept
