"""Authentication on the HTTP bindings: a guard around the JSON-RPC and REST endpoints.

Every A2A operation over HTTP (JSON-RPC `POST /`, every REST route, unknown paths
included, and so `GET /extendedAgentCard`) passes the guard; the public agent card,
`/health` and any other explicitly public route do not, because they are not
wrapped. The guard asks the same `service.auth.Authenticator` the gRPC binding uses:

- no valid credential: `401 {"error":"Unauthorized"}` with one `WWW-Authenticate`
  challenge per enabled scheme, before the body is read or the path is routed;
- otherwise the principal is put in the ASGI scope (`params.PRINCIPAL_KEY`), where
  `params.call_context` picks it up. In-process, the credential headers are removed
  from the scope so they never reach the API or the agent; in proxy mode they are
  forwarded to the upstream service, which authenticates the caller again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from gateway.params import FORWARDED_HEADERS, GRPC_METADATA_PREFIX, PRINCIPAL_KEY
from service.auth import Authenticator
from service.protocol.errors import UnauthenticatedError

Endpoint = Callable[[Request], Awaitable[Response]]
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


class HttpAuth:
    def __init__(self, auth: Authenticator, *, forward_credentials: bool) -> None:
        self.auth = auth
        self.forward_credentials = forward_credentials
        self.credential_keys = frozenset(auth.credential_keys)

    def guard(self, endpoint: Endpoint) -> Endpoint:
        async def guarded(request: Request) -> Response:
            scope = request.scope
            credentials: dict[str, str] = {}
            for raw_name, raw_value in scope["headers"]:
                name = raw_name.decode("latin-1").lower()
                if name in self.credential_keys:
                    if name in credentials:  # two credentials in one header: ambiguous, refused
                        return unauthorized(self.auth)
                    credentials[name] = raw_value.decode("latin-1")
            try:
                principal = await self.auth.principal(credentials)
            except UnauthenticatedError:
                return unauthorized(self.auth)
            scope[PRINCIPAL_KEY] = principal
            scope["headers"] = self._pass_on(scope["headers"])
            return await endpoint(request)

        return guarded

    def _pass_on(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The headers the endpoint sees: without credentials in-process; in proxy mode with
        them, a custom API key header re-sent as gRPC metadata so the upstream gets it."""
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
