"""`GET /.well-known/agent-card.json`: the public agent card, cacheable.

The card is built by the same `CardBuilder` that answers GetExtendedAgentCard,
rendered once (it does not change while the process runs) and served with
`Cache-Control: public, max-age=N`, a strong `ETag` (a hash of the exact bytes)
and `Last-Modified` (when it was built). Conditional requests follow RFC 9110:
`If-None-Match` (a list, `*`, weak `W/` tags -- weak comparison) answers 304;
`If-Modified-Since` is consulted only when `If-None-Match` is absent. A card that lists
`protocolVersion` 0.3 interfaces carries v0.3's members too (service/cards/v03.py), so
one card serves 1.0 and v0.3 clients; its ETag is that of the bytes served.
"""

from __future__ import annotations

import hashlib
import re
import time
from email.utils import formatdate, parsedate_to_datetime

from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import Response

from gateway.body import JSON_MEDIA_TYPE
from gateway.dispatch import REST_JSON, forward_error
from gateway.errors import MethodNotAllowedError
from gateway.transcode import to_json_dict
from gen import a2a_pb2 as pb
from service.cards.v03 import add_v03_members
from service.protocol.json_text import dumps

WELL_KNOWN_PATH = "/.well-known/agent-card.json"
_ENTITY_TAG = re.compile(r'\s*(?:(W/)?"([^"]*)"|(\*))\s*(?:,|$)')


def if_none_match_hits(header: str, etag: str) -> bool:
    """Whether an If-None-Match value matches `etag` under weak comparison."""
    opaque = etag[2:] if etag.startswith("W/") else etag
    for m in _ENTITY_TAG.finditer(header):
        if m.group(3) == "*":
            return True
        if m.group(2) is not None and f'"{m.group(2)}"' == opaque:
            return True
    return False


def not_modified_since(header: str, last_modified: float) -> bool:
    try:
        since = parsedate_to_datetime(header).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return False  # an unparsable date is ignored (RFC 9110 13.1.3)
    return int(last_modified) <= since


class CardEndpoint:
    def __init__(self, card: Message, max_age: int, built_at: float | None = None) -> None:
        document = to_json_dict(card)
        if isinstance(card, pb.AgentCard):  # one card for both: v0.3 members when it lists 0.3
            add_v03_members(document, card)
        self.body = dumps(document)
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'
        self.built_at = time.time() if built_at is None else built_at
        self.headers = {
            "Cache-Control": f"public, max-age={max_age}",
            "ETag": self.etag,
            "Last-Modified": formatdate(self.built_at, usegmt=True),
        }

    async def handle(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            refused = MethodNotAllowedError("The agent card is read with GET.", ["GET", "HEAD"])
            return forward_error(refused, REST_JSON, request.url.path)
        inm = request.headers.get("if-none-match")
        ims = request.headers.get("if-modified-since")
        if (inm is not None and if_none_match_hits(inm, self.etag)) or (
            inm is None and ims is not None and not_modified_since(ims, self.built_at)
        ):
            return Response(status_code=304, headers=self.headers)
        return Response(self.body, media_type=JSON_MEDIA_TYPE, headers=self.headers)
