"""`GET <card_jwks_path>` (default `/.well-known/jwks.json`): the card signing keys.

The public keys the agent card's signatures verify with, as a JWK Set (RFC 7517
§5): the current signing key and the older ones kept for rotation. Cached like
the card: `Cache-Control: public, max-age=N` and a strong ETag.
"""

from __future__ import annotations

import hashlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.card import if_none_match_hits
from gateway.dispatch import REST_JSON, forward_error
from gateway.errors import MethodNotAllowedError
from service.protocol.json_text import dumps

JWKS_MEDIA_TYPE = "application/jwk-set+json"


class JwksEndpoint:
    def __init__(self, jwks: dict[str, Any], max_age: int) -> None:
        self.body = dumps(jwks)
        etag = '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'
        self.headers = {"Cache-Control": f"public, max-age={max_age}", "ETag": etag}

    async def handle(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            refused = MethodNotAllowedError("The key set is read with GET.", ["GET", "HEAD"])
            return forward_error(refused, REST_JSON, request.url.path)
        inm = request.headers.get("if-none-match")
        if inm is not None and if_none_match_hits(inm, self.headers["ETag"]):
            return Response(status_code=304, headers=self.headers)
        return Response(self.body, media_type=JWKS_MEDIA_TYPE, headers=self.headers)
