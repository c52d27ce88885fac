"""The v0.3 REST binding: the `/v1/...` routes of the v0.3 contract's HttpRules.

Routed like the 1.0 REST binding (rest.py: `build_router` over the v0.3 service
descriptor, grpc-gateway style), with v0.3 ProtoJSON bodies built by the same transcoder
from the v0.3 messages, so a body or query may name a field by its JSON or its proto
name (`messageId` or `message_id`, `historyLength` or `history_length`). The v0.3 request
is then translated into the 1.0 request of the RPC that serves it
(service/protocol/v03_proto.py) and runs the same pipeline and invoker as any call; the
answer (each event of a stream) is translated back and written as v0.3 ProtoJSON. A
stream ends after the event v0.3 marks `final`.

Its calls are recorded under the binding `rest-v0.3`, so the version check accepts "0.3"
(or no version header) for them. `/v1` is never a tenant: every path under it is this
binding's (an unknown one is 404), and the API refuses the tenant name `v1` anyway.
Errors carry the 1.0 REST error body plus `type` (the error's name) and `message` at the
top, which is what a2a-sdk's v0.3 REST client reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import Response

from gateway.body import JSON_MEDIA_TYPE
from gateway.dispatch import HttpOptions, forward, forward_error
from gateway.errors import rest_error_body
from gateway.invoker import Invoker
from gateway.params import Caller, call_context
from gateway.replies import Document, invoke
from gateway.rest import build_router, routed
from gateway.transcode import build_request, to_json_dict
from gen import a2a_pb2 as pb
from gen import a2a_v0_3_pb2 as v03
from service.api import CallContext
from service.calls.pipeline import Pipeline
from service.engine.stream import NumberedEvents
from service.inputs.early import V03_REST
from service.protocol import v03_proto
from service.protocol.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
)
from service.protocol.event_ids import opens_replay
from service.protocol.states import ends_stream

SERVICE = v03.DESCRIPTOR.services_by_name["A2AService"]
ACCESS_BINDING = "rest-v0.3"  # ends with "-v0.3": the version check reads it
PREFIX = "/v1"  # every v0.3 REST path; never a tenant
_API = {m.name: m for m in pb.DESCRIPTOR.services_by_name["A2AService"].methods}


def v03_error_body(err: A2AError) -> Document:
    """The 1.0 REST error body, with the error's name (`type`) and `message` on top."""
    body = rest_error_body(err)
    name = v03_proto.error_name(err)
    if name:
        body["type"] = name
    body["message"] = err.message
    return body


def _same(message: Message) -> Message:
    return message


@dataclass(frozen=True, slots=True)
class RestV03Codec:
    """REST v0.3: JSON bodies of the v0.3 messages `reply` makes of the API's answers."""

    reply: Callable[[Any], Message] = _same
    media_type: str = JSON_MEDIA_TYPE

    def result(self, message: Message) -> Document:
        return to_json_dict(self.reply(message))

    def error(self, err: A2AError) -> Document:
        return v03_error_body(err)

    def status(self, err: A2AError) -> int:
        return err.http_status


class _UntilFinal:
    """The API's events until the one after which a v0.3 stream ends."""

    __slots__ = ("_events", "_done", "_resume_after")

    def __init__(self, events: NumberedEvents[Message], resume_after: int | None) -> None:
        self._events = events
        self._done = False
        # Set until the first event: a resumed subscription's snapshot does not end it.
        self._resume_after = resume_after

    @property
    def seq(self) -> int | None:
        return self._events.seq

    def __aiter__(self) -> _UntilFinal:
        return self

    async def __anext__(self) -> Message:
        if self._done:
            raise StopAsyncIteration
        event = await self._events.__anext__()
        opening, self._resume_after = self._resume_after, None
        if isinstance(event, pb.StreamResponse) and ends_stream(event):
            self._done = not opens_replay(event, self._events.seq, opening)
        return event

    async def aclose(self) -> None:
        await self._events.aclose()


class _V03Invoker:
    """The binding's invoker: streams end where v0.3 streams do."""

    __slots__ = ("inner",)

    def __init__(self, inner: Invoker) -> None:
        self.inner = inner

    async def unary(self, name: str, request: Message, call: CallContext) -> Message:
        return await self.inner.unary(name, request, call)

    async def stream(
        self, name: str, request: Message, call: CallContext
    ) -> NumberedEvents[Message]:
        return _UntilFinal(await self.inner.stream(name, request, call), call.resume_after)

    async def close(self) -> None:
        return None  # the inner invoker is closed by its owner


def _names(descriptor: Descriptor) -> set[str]:
    return {f.name for f in descriptor.fields} | {f.json_name for f in descriptor.fields}


def _whole_request(cls: type[Message], body_field: str, body: Any) -> bool:
    """A body sent as the whole request where the rule names one field of it (v0.3 clients
    send a CreateTaskPushNotificationConfigRequest, not its `config`): it has a member that
    names a field of the request and none of that field's message."""
    if body_field in ("", "*") or not isinstance(body, dict):
        return False
    field = cls.DESCRIPTOR.fields_by_name[body_field]
    inner = _names(field.message_type) if field.message_type is not None else set()
    outer = _names(cls.DESCRIPTOR) - inner
    return any(k in outer for k in body) and not any(k in inner for k in body)


def _bound(cls: type[Message], path_vars: dict[str, str]) -> set[str]:
    """The body members the path sets (either spelling): the path's values win."""
    fields = cls.DESCRIPTOR.fields_by_name
    return {n for v in path_vars if v in fields for n in (v, fields[v].json_name)}


class RestV03Endpoint:
    def __init__(
        self,
        invoker: Invoker,
        options: HttpOptions,
        pipeline: Pipeline,
        card: Message,
    ) -> None:
        self.invoker = _V03Invoker(invoker)
        self.pipeline = pipeline
        self.router = build_router(SERVICE)
        self.request_classes = {
            m.name: message_factory.GetMessageClass(m.input_type) for m in SERVICE.methods
        }
        self.options = options
        self.card = card  # the public card: v0.3's GetAgentCard without an extended one

    async def handle(self, request: Request, caller: Caller) -> Response:
        codec = RestV03Codec()
        name = "?"
        try:
            route, path_vars, body = await routed(
                self.router,
                request,
                "A2A v0.3",
                self.options.max_body_bytes,
                self.options.part_limits,
                V03_REST,
            )
            name = route.method.name
            cls = self.request_classes[name]
            body_field = route.body
            if isinstance(body, dict) and _whole_request(cls, body_field, body):
                body = {k: v for k, v in body.items() if k not in _bound(cls, path_vars)}
                body_field = "*"
            message = build_request(
                cls,
                body=body,
                body_field=body_field,
                path_vars=path_vars,
                query=request.query_params.multi_items(),
                reject_unknown=self.options.reject_unknown_fields,
            )
            target, request_in, reply_out = v03_proto.ROUTES[name]
            translated = request_in(message)
            call = call_context(caller, request.headers, request.query_params)
            codec = RestV03Codec(reply_out)
            where = f"REST v0.3 {name}"
            try:
                reply = await invoke(
                    self.invoker, self.pipeline, _API[target], translated, call, codec, where
                )
            except ExtendedAgentCardNotConfiguredError:
                if name != "GetAgentCard":
                    raise
                reply = codec.result(self.card)  # admitted already: only no extended card
        except Exception as exc:
            return forward_error(exc, codec, f"REST v0.3 {name}")
        return forward(reply, codec, self.options)
