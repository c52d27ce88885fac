"""Authentication on the HTTP bindings: a guard around the JSON-RPC and REST endpoints.

Every A2A operation over HTTP (JSON-RPC `POST /`, every REST route, unknown paths
included, and so `GET /extendedAgentCard`) passes the guard; the public agent card,
`/health` and any other explicitly public route do not, because they are not
wrapped. The guard asks the same `service.auth.Authenticator` the gRPC binding uses:

- no valid credential: `401 {"error":"Unauthorized"}` with one `WWW-Authenticate`
  challenge per enabled scheme, before the body is read or the path is routed;
- otherwise the endpoint is called with the resolved `params.Caller`: the principal,
  and the headers call metadata may come from. In-process, those are without the
  credential headers, so they never reach the API or the agent; in proxy mode they
  keep them, for the upstream service, which authenticates the caller again.

Without authentication, `anonymous` calls the endpoint with the empty principal. The
caller is an argument, not something left in the ASGI scope, so an endpoint cannot
run without one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from gateway.params import FORWARDED_HEADERS, GRPC_METADATA_PREFIX, Caller
from service.auth import Authenticator
from service.net import access
from service.protocol.errors import UnauthenticatedError

Endpoint = Callable[[Request], Awaitable[Response]]  # what starlette routes to
Handler = Callable[[Request, Caller], Awaitable[Response]]  # an endpoint that needs its caller
UNAUTHORIZED_BODY = b'{"error":"Unauthorized"}'


def unauthorized(auth: Authenticator) -> Response:
    response = Response(
        UNAUTHORIZED_BODY,
        status_code=401,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )
    for challenge in auth.challenges():
        response.headers.append("WWW-Authenticate", challenge)
    return response


def anonymous(handler: Handler) -> Endpoint:
    """No authentication: every caller is anonymous, with all its headers."""

    async def endpoint(request: Request) -> Response:
        return await handler(request, Caller("", request.scope["headers"]))

    return endpoint


class HttpAuth:
    def __init__(self, auth: Authenticator, *, forward_credentials: bool) -> None:
        self.auth = auth
        self.forward_credentials = forward_credentials
        self.credential_keys = frozenset(auth.credential_keys)

    def guard(self, handler: Handler) -> Endpoint:
        async def guarded(request: Request) -> Response:
            call = access.current()
            headers = request.scope["headers"]
            credentials: dict[str, str] = {}
            for raw_name, raw_value in headers:
                name = raw_name.decode("latin-1").lower()
                if name in self.credential_keys:
                    if name in credentials:  # two credentials in one header: ambiguous, refused
                        if call is not None:
                            call.failed(UnauthenticatedError())
                        return unauthorized(self.auth)
                    credentials[name] = raw_value.decode("latin-1")
            try:
                principal = await self.auth.principal(credentials)
            except UnauthenticatedError as exc:
                if call is not None:
                    call.failed(exc)
                return unauthorized(self.auth)
            if call is not None:
                call.principal = principal
            return await handler(request, Caller(principal, self._pass_on(headers)))

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
