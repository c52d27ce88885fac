"""The rule every JSON-RPC transport of ours follows, written once.

A transport hands `FramedJsonRpc.answer` one request frame (the raw bytes of one JSON-RPC
request document) and the `Link` it came on, and writes the `Frame`s it gets back, in
order, each as one frame of its own:

- Service parameters (A2A-Version, A2A-Extensions, the credentials, Last-Event-ID) travel
  in the request's `serviceParameters` member, a sibling of `params`: an object of
  parameter names (any case) to strings. A transport may also carry them once per
  connection (WebSocket handshake headers); a request's own win. No version means 1.0:
  these bindings are 1.0's own, no v0.3 client speaks them.
- Authentication takes the credentials from there (the schemes the card declares; a
  transport that identified its peer itself, unix socket peer credentials, vouches for a
  principal when no credential is sent). Refused: -32000 Unauthenticated, as a frame.
- Every answer frame is the JSON-RPC response document plus `"final"`: a unary answer
  and an error are one frame with `final: true`; a stream is one frame per event, each with
  `final: false` and the event's sequence number as `"eventId"` (a string, as SSE's `id:`),
  then one closing frame `{"jsonrpc": "2.0", "id": ..., "final": true}`; an error while
  streaming (a drain: UNAVAILABLE, resumable) is the stream's last frame, `final: true`.
- Errors are those of JSON-RPC over HTTP, with the same codes and details; a frame that is
  not JSON is -32700 with `id` null, and the transport goes on serving.

`Conversation` serves the requests of one connection concurrently (responses carry their
request's id), for the transports that have connections.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import ServiceDescriptor

from gateway.errors import PayloadTooLargeError, jsonrpc_error_body
from gateway.invoker import Invoker
from gateway.jsonrpc import Envelope, JsonRpcDispatcher, request_id
from gateway.params import GRPC_METADATA_PREFIX, last_event_id
from gateway.replies import DocumentStream, ErrorReply
from gateway.transcode import parse_json_body
from service.api import CallContext
from service.calls.pipeline import CallerUnknown, Pipeline
from service.inputs.early import PartLimits, json_oversized, json_rpc_send
from service.protocol.errors import (
    A2AError,
    InvalidRequestError,
    OverloadedError,
    UnauthenticatedError,
    as_a2a_error,
)
from service.protocol.json_text import dumps
from service.protocol.params import EXTENSIONS_KEY, VERSION_KEY

PARAMETERS_MEMBER = "serviceParameters"
DEFAULT_VERSION = "1.0"
BINDING_URI_PREFIX = "urn:a2a-service:binding:"  # + the transport's name: the card's binding
FORWARDED = frozenset({VERSION_KEY, EXTENSIONS_KEY})
RESUME_KEY = "last-event-id"


def binding_uri(transport: str) -> str:
    """The `protocolBinding` the card lists for one of these transports (an identifier,
    not a URL that resolves)."""
    return BINDING_URI_PREFIX + transport


@dataclass(frozen=True, slots=True)
class Link:
    """Where a request came from: its transport (the access line's binding), the peer, the
    service parameters the connection carries for all its requests, and the principal the
    transport vouches for (None: only credentials identify the caller)."""

    transport: str
    client: str = ""
    parameters: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    principal: str | None = None


@dataclass(frozen=True, slots=True)
class Frame:
    """One answer frame: a JSON document (compact UTF-8) and whether it is the request's last."""

    payload: bytes
    final: bool
    event_id: int | None = None  # a stream event's sequence number (also in the payload)


def _frame(document: dict[str, Any], final: bool, event_id: int | None = None) -> Frame:
    document["final"] = final
    if event_id:
        document["eventId"] = str(event_id)
    return Frame(dumps(document), final, event_id or None)


def error_frame(err: A2AError, rid: Any = None) -> Frame:
    """An error as a closing frame (a transport's own refusals: too large, too many)."""
    return _frame(jsonrpc_error_body(err, rid), True)


def _parameters(link: Link, doc: Any) -> dict[str, str]:
    """The request's service parameters over the connection's, names lower-cased."""
    merged = dict(link.parameters)
    own = doc.get(PARAMETERS_MEMBER) if isinstance(doc, dict) else None
    if own is None:
        return merged
    if not isinstance(own, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in own.items()
    ):
        raise InvalidRequestError(
            f'"{PARAMETERS_MEMBER}" must be an object of parameter names to strings, '
            'e.g. {"A2A-Version": "1.0", "Authorization": "Bearer ..."}.'
        )
    merged.update((k.lower(), v) for k, v in own.items())
    return merged


class FramedJsonRpc:
    """JSON-RPC for the transports of this package; one per server, shared by them all."""

    def __init__(
        self,
        invoker: Invoker,
        service: ServiceDescriptor,
        pipeline: Pipeline,
        *,
        max_frame_bytes: int,
        part_limits: PartLimits | None = None,
        reject_unknown_fields: bool = False,
    ) -> None:
        self.pipeline = pipeline
        self.dispatcher = JsonRpcDispatcher(
            invoker, service, reject_unknown_fields=reject_unknown_fields, pipeline=pipeline
        )
        self.max_frame_bytes = max_frame_bytes
        self.part_limits = part_limits

    def too_large(self, rid: Any = None) -> Frame:
        """The answer to a frame over `max_frame_bytes` (its transport stops reading it)."""
        return error_frame(PayloadTooLargeError(self.too_large_message()), rid)

    async def answer(
        self, raw: bytes, link: Link, *, unary: bool = False
    ) -> AsyncGenerator[Frame, None]:
        """The frames answering the request frame `raw`. The call's record closes after the
        last frame is taken (or, if the transport stops taking them, as cancelled).
        `unary`: the transport's call carries one answer frame only (the gRPC envelope's
        Send), so a streaming method is refused (-32600) before it starts."""
        pipeline = self.pipeline
        call = pipeline.open(link.transport)
        call.client = link.client
        stream: DocumentStream | None = None
        finished = False
        try:
            rid: Any = None
            try:
                if len(raw) > self.max_frame_bytes:
                    raise PayloadTooLargeError(self.too_large_message())
                if self.part_limits is not None:
                    send, early_id = json_rpc_send(raw)
                    refused = (
                        json_oversized(raw, self.part_limits, enveloped=True) if send else None
                    )
                    if refused is not None:
                        rid = early_id
                        raise refused
                doc = parse_json_body(raw)
                rid = request_id(doc)
                parameters = _parameters(link, doc)
                principal = await self._principal(call, link, parameters)
                if unary:
                    self._refuse_stream(doc)
            except CallerUnknown as exc:
                call.failed(exc)
                yield _frame(jsonrpc_error_body(UnauthenticatedError(exc.message), rid), True)
                finished = True
                return
            except Exception as exc:
                yield _frame(ErrorReply.of(exc, Envelope(rid), "JSON-RPC ?").document, True)
                finished = True
                return
            metadata = self._metadata(parameters)
            version = metadata.get(VERSION_KEY, "")

            def context() -> CallContext:
                return CallContext(
                    metadata=metadata,
                    principal=principal,
                    default_version=DEFAULT_VERSION,
                    resume_after=last_event_id(parameters),
                )

            reply = await self.dispatcher.dispatch(
                doc,
                context,
                CallContext(
                    metadata={VERSION_KEY: version} if version else {},
                    default_version=DEFAULT_VERSION,
                ),
            )
            if isinstance(reply, dict):
                yield _frame(reply, True)
            elif isinstance(reply, ErrorReply):
                yield _frame(reply.document, True)
            else:
                stream = reply
                async for item in stream:
                    if isinstance(item, ErrorReply):
                        yield _frame(item.document, True)
                        finished = True
                        return
                    yield _frame(item, False, stream.seq)
                yield _frame({"jsonrpc": "2.0", "id": rid}, True)
            finished = True
        finally:
            if stream is not None:
                await stream.aclose()
            if not finished:
                call.cancelled()
            pipeline.close(call)

    def _refuse_stream(self, doc: Any) -> None:
        """On a one-answer call, a method whose descriptor streams is refused."""
        name = doc.get("method") if isinstance(doc, dict) else None
        entry = self.dispatcher.methods.get(name) if isinstance(name, str) else None
        if entry is not None and entry[0].server_streaming:
            raise InvalidRequestError(
                f"{name} streams its answer, which this call cannot carry; send it with the "
                "streaming call (gRPC envelope: JsonRpc.Stream)."
            )

    def too_large_message(self) -> str:
        return (
            f"A request frame may hold at most {self.max_frame_bytes} bytes "
            "(max_request_bytes); send large files by URL."
        )

    async def _principal(self, call: Any, link: Link, parameters: dict[str, str]) -> str:
        keys = self.pipeline.credential_keys
        credentials = {k: v for k, v in parameters.items() if k in keys}
        if link.principal is not None and not credentials:
            call.identified(link.principal)
            return link.principal
        return await self.pipeline.authenticate(call, credentials)

    def _metadata(self, parameters: Mapping[str, str]) -> dict[str, str]:
        """Call metadata from the service parameters, as the HTTP bindings forward headers:
        version and extensions, `grpc-metadata-<name>` as `<name>`; credentials only in
        proxy mode (the upstream authenticates again)."""
        keys = self.pipeline.credential_keys
        forward = self.pipeline.forward_credentials
        metadata: dict[str, str] = {}
        for name, value in parameters.items():
            if name in FORWARDED or (forward and name in keys):
                metadata[name] = value
            elif name.startswith(GRPC_METADATA_PREFIX) and len(name) > len(GRPC_METADATA_PREFIX):
                metadata[name[len(GRPC_METADATA_PREFIX) :]] = value
        return metadata


Write = Callable[[Frame], Awaitable[None]]


class Conversation:
    """The requests of one connection, served at once (each answer's frames in order; the
    frames of different requests interleave, told apart by their ids). Past `max_in_flight`
    unanswered requests, a new one is refused with a retry hint rather than queued."""

    def __init__(
        self, rpc: FramedJsonRpc, link: Link, write: Write, *, max_in_flight: int = 64
    ) -> None:
        self.rpc = rpc
        self.link = link
        self.write = write
        self.max_in_flight = max_in_flight
        self.calls: set[asyncio.Task[None]] = set()
        self.unstarted: set[asyncio.Task[None]] = set()  # no answer frame written yet
        self._progress = asyncio.Event()

    def received(self, raw: bytes) -> None:
        """Start answering one request frame."""
        if len(self.calls) >= self.max_in_flight:
            task = asyncio.create_task(self._refuse(raw))
        else:
            task = asyncio.create_task(self._serve(raw))
        self.calls.add(task)
        self.unstarted.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.calls.discard(task)
        self._started(task)

    def _started(self, task: asyncio.Task[None] | None) -> None:
        if task is not None and task in self.unstarted:
            self.unstarted.discard(task)
            self._progress.set()

    async def started(self) -> None:
        """Wait until every request received so far has its first answer frame written (a
        unary call its answer, a stream its first event: past admission) or has ended."""
        while self.unstarted:
            self._progress.clear()
            await self._progress.wait()

    async def _serve(self, raw: bytes) -> None:
        frames = self.rpc.answer(raw, self.link)
        try:
            async for frame in frames:
                await self.write(frame)
                self._started(asyncio.current_task())
        except (ConnectionError, asyncio.CancelledError):
            pass  # the peer is gone, or the connection closes: the record says cancelled
        except Exception as exc:  # a write that failed otherwise: logged with a ref, once
            as_a2a_error(exc, f"{self.link.transport} write")
        finally:
            await frames.aclose()

    async def _refuse(self, raw: bytes) -> None:
        rid = None
        with contextlib.suppress(Exception):
            rid = request_id(parse_json_body(raw))
        err = OverloadedError(
            f"At most {self.max_in_flight} requests may be unanswered on one connection; "
            "retry when one is answered, or open another connection.",
            retry_after=1.0,
        )
        with contextlib.suppress(ConnectionError):
            await self.write(error_frame(err, rid))

    async def finish(self) -> None:
        """Wait for every request received so far to be answered (the peer said it is done)."""
        while self.calls:
            await asyncio.gather(*list(self.calls), return_exceptions=True)

    async def close(self) -> None:
        """The connection is gone: stop answering (each unfinished call is logged cancelled)."""
        for task in list(self.calls):
            task.cancel()
        await self.finish()
