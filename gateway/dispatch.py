"""The HTTP tail of both bindings: a reply (replies.py) written as an HTTP response.

In the manner of grpc-gateway's runtime (ForwardResponseMessage,
ForwardResponseStream, HTTPError), written once and parameterised by a small
`Codec` per binding, so JSON-RPC and REST cannot drift apart:

- a result document is the body, in the codec's media type;
- an error document gets the codec's status (REST: the error's HTTP status;
  JSON-RPC: 200, as JSON-RPC over HTTP does, except the transport-level
  refusals 401, 405, 413, 415, 429 past a limit and 503 while draining, which keep theirs) and
  the headers the error asks for (`Allow`, `Retry-After`);
- a stream is Server-Sent Events: one event per document, whose `id:` is the
  task event's sequence number, so a client can resume SubscribeToTask with
  `Last-Event-ID` (an event without a number, a direct Message reply, carries
  no `id:`; in proxy mode the number is the upstream's). Idle streams get keep-alive comments; responses say
  `Cache-Control: no-store`. The stream ends when the API's iterator ends (a
  terminal or interrupted state); an error after it started is sent as one
  `event: error` whose data is the binding's error document, then it ends. A
  client that disconnects only ends its own subscription.

The error bodies themselves are errors.py's, the one place that renders them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from google.protobuf.message import Message
from sse_starlette.event import ServerSentEvent
from starlette.responses import Response

from gateway.body import A2A_MEDIA_TYPE, JSON_MEDIA_TYPE, MAX_BODY_BYTES, rest_media_type
from gateway.errors import http_headers, jsonrpc_error_body, rest_error_body
from gateway.replies import Document, DocumentStream, ErrorReply, Reply
from gateway.sse import SseResponse
from gateway.transcode import dumps_str, to_json_dict
from service.inputs.early import PartLimits
from service.protocol.errors import A2AError
from service.protocol.json_text import dumps

# JSON-RPC errors travel with HTTP 200, except these transport-level refusals.
JSONRPC_KEPT_STATUSES = frozenset({401, 405, 413, 415, 429, 503})
KEEPALIVE = ServerSentEvent(comment="keep-alive").encode()  # on an idle stream


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """The settings both bindings' endpoints share."""

    keepalive_seconds: float = 15.0  # between SSE keep-alive comments on an idle stream
    max_body_bytes: int = MAX_BODY_BYTES  # a larger request body is 413
    # A send's part too large for any media type, refused before its body is parsed.
    part_limits: PartLimits | None = None
    reject_unknown_fields: bool = False  # json_unknown_fields = "reject": strict request JSON


class Codec(Protocol):
    """What a binding decides about its HTTP responses."""

    @property
    def media_type(self) -> str: ...

    def error(self, err: A2AError) -> Document:
        """The error document of an error the endpoint meets itself (for JSON-RPC, one
        before there is a request document, so without an id)."""
        ...

    def status(self, err: A2AError) -> int: ...


@dataclass(frozen=True, slots=True)
class RestCodec:
    """REST: the message is the body; errors are `{"error": {...}}` with their HTTP
    status. Also its own Renderer (REST documents do not depend on the request)."""

    media_type: str

    def result(self, message: Message) -> Document:
        return to_json_dict(message)

    def error(self, err: A2AError) -> Document:
        return rest_error_body(err)

    def status(self, err: A2AError) -> int:
        return err.http_status


REST_A2A = RestCodec(A2A_MEDIA_TYPE)
REST_JSON = RestCodec(JSON_MEDIA_TYPE)


def rest_codec(accept: str | None) -> RestCodec:
    """The REST codec for a request's Accept header (see body.rest_media_type)."""
    return REST_JSON if rest_media_type(accept) == JSON_MEDIA_TYPE else REST_A2A


class JsonRpcCodec:
    """JSON-RPC over HTTP: `application/json`, HTTP 200 for JSON-RPC errors. Its
    documents come from the JSON-RPC dispatcher (jsonrpc.py), which knows the id."""

    media_type = JSON_MEDIA_TYPE

    def error(self, err: A2AError) -> Document:
        return jsonrpc_error_body(err, None)  # no request document, so no id

    def status(self, err: A2AError) -> int:
        return err.http_status if err.http_status in JSONRPC_KEPT_STATUSES else 200


JSONRPC = JsonRpcCodec()


def forward(reply: Reply, codec: Codec, options: HttpOptions) -> Response:
    """Write `reply` as the HTTP response."""
    if isinstance(reply, dict):
        return Response(dumps(reply), media_type=codec.media_type)
    if isinstance(reply, ErrorReply):
        return _error_response(reply, codec)
    return SseResponse(
        _frames(reply), keepalive_seconds=options.keepalive_seconds, keepalive=KEEPALIVE
    )


def forward_error(exc: BaseException, codec: Codec, where: str) -> Response:
    """An error found before (or instead of) a call, as the codec's error response."""
    return _error_response(ErrorReply.of(exc, codec, where), codec)


def _error_response(reply: ErrorReply, codec: Codec) -> Response:
    return Response(
        dumps(reply.document),
        status_code=codec.status(reply.error),
        media_type=codec.media_type,
        headers=http_headers(reply.error),
    )


# How sse-starlette's ServerSentEvent.encode() writes a frame, with its default separator:
# the frames are made here as bytes, the same bytes (tests/unit/test_sse_frames.py),
# without an object per event.
_SEP = "\r\n"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def sse_frame(data: str, *, id: str | None = None, event: str | None = None) -> bytes:
    """One SSE frame: `id:`, `event:`, a `data:` line per line of `data`, a blank line."""
    head = ""
    if id is not None:
        head = "id: " + _LINE_BREAK.sub("", id) + _SEP
    if event is not None:
        head += "event: " + _LINE_BREAK.sub("", event) + _SEP
    if "\n" in data or "\r" in data:
        body = "".join(f"data: {line}{_SEP}" for line in _LINE_BREAK.split(data))
    else:
        body = "data: " + data + _SEP
    return (head + body + _SEP).encode("utf-8")


async def _frames(stream: DocumentStream) -> AsyncIterator[bytes]:
    try:
        async for item in stream:
            if isinstance(item, ErrorReply):
                yield sse_frame(dumps_str(item.document), event="error")
            else:
                seq = stream.seq
                yield sse_frame(dumps_str(item), id=str(seq) if seq else None)
    finally:
        await stream.aclose()
