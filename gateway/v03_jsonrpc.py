"""JSON-RPC for A2A v0.3 clients: the slash-named methods, translated into the 1.0 API.

Like jsonrpc.py it takes a parsed request document and answers a reply (replies.py), and
knows nothing of the transport. A v0.3 method names the 1.0 RPC it runs; its `params` are
translated into that RPC's request (v03_shapes.py), which then runs the whole call
pipeline like any 1.0 call (authentication, the interceptors, the access line, telemetry,
limits, resume), and the 1.0 answer is translated back:

    message/send            SendMessage            Task | Message (`kind`)
    message/stream          SendStreamingMessage   events; the last status update `final`
    tasks/get               GetTask
    tasks/cancel            CancelTask
    tasks/resubscribe       SubscribeToTask        events
    tasks/pushNotificationConfig/set|get|list|delete
                            Create|Get|List|DeleteTaskPushNotificationConfig
                            (get without `pushNotificationConfigId`: the task's first)
    agent/getAuthenticatedExtendedCard
                            GetExtendedAgentCard   the card with its v0.3 members

Errors are in v0.3's codes (v03_shapes.error_out): -32007 for an extended card that is
not configured; one v0.3 lacks is -32603 naming the 1.0 reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message

from gateway import v03_messages as direct
from gateway import v03_shapes as shapes
from gateway.errors import details_json
from gateway.invoker import InProcessInvoker, Invoker
from gateway.jsonrpc import check_envelope, request_id
from gateway.replies import Document, ErrorReply, Reply, invoke
from gateway.transcode import build_request, to_json_dict
from gen import a2a_pb2 as pb
from service.api import CallContext
from service.calls import record
from service.calls.pipeline import Pipeline
from service.cards.v03 import add_v03_members
from service.engine.stream import NumberedEvents
from service.protocol.errors import A2AError, MethodNotFoundError, TaskNotFoundError
from service.protocol.params import VERSION_KEY

BINDING = "jsonrpc-v0.3"  # the call record's binding (VersionCheck serves 0.3 on it)
Result = Callable[[Message], Any]


def is_v03_method(doc: Any) -> bool:
    """A request document whose method is slash-named (`message/send`): a v0.3 method."""
    method = doc.get("method") if isinstance(doc, dict) else None
    return isinstance(method, str) and "/" in method


def _json(convert: Callable[[dict[str, Any]], Any]) -> Result:
    return lambda message: convert(to_json_dict(message))


def _card(message: Message) -> Any:
    assert isinstance(message, pb.AgentCard)  # GetExtendedAgentCard's answer
    return add_v03_members(to_json_dict(message), message)


def _nothing(message: Message) -> None:
    return None


@dataclass(frozen=True, slots=True)
class V03Method:
    rpc: str  # the 1.0 RPC it runs
    request: Callable[[Mapping[str, Any]], dict[str, Any]]  # params -> the RPC's request JSON
    result: Result  # the RPC's answer -> the v0.3 result
    # params -> the request message directly (v03_messages), None: take `request`'s path
    fast: Callable[[Mapping[str, Any]], Message | None] | None = None


METHODS: dict[str, V03Method] = {
    "message/send": V03Method(
        "SendMessage", shapes.send_in, direct.send_result, direct.send_request
    ),
    "message/stream": V03Method(
        "SendStreamingMessage", shapes.send_in, direct.send_result, direct.send_request
    ),
    "tasks/get": V03Method("GetTask", shapes.task_query_in, direct.task_result),
    "tasks/cancel": V03Method(
        "CancelTask", partial(shapes.task_id_in, metadata=True), direct.task_result
    ),
    "tasks/resubscribe": V03Method("SubscribeToTask", shapes.task_id_in, direct.send_result),
    "tasks/pushNotificationConfig/set": V03Method(
        "CreateTaskPushNotificationConfig", shapes.set_push_in, _json(shapes.push_config_out)
    ),
    "tasks/pushNotificationConfig/get": V03Method(
        "GetTaskPushNotificationConfig", shapes.push_ref_in, _json(shapes.push_config_out)
    ),
    "tasks/pushNotificationConfig/list": V03Method(
        "ListTaskPushNotificationConfigs", shapes.push_ref_in, _json(shapes.push_configs_out)
    ),
    "tasks/pushNotificationConfig/delete": V03Method(
        "DeleteTaskPushNotificationConfig", shapes.push_ref_in, _nothing
    ),
    "agent/getAuthenticatedExtendedCard": V03Method(
        "GetExtendedAgentCard", lambda params: {}, _card
    ),
}


def _first_config(task_id: str) -> Result:
    """v0.3's get without a config id: the task's first config (v0.3 had one per task)."""

    def first(message: Message) -> Any:
        configs = shapes.push_configs_out(to_json_dict(message))
        if not configs:
            raise TaskNotFoundError(f"Task {task_id!r} has no push notification config.")
        return configs[0]

    return first


@dataclass(frozen=True, slots=True)
class V03Envelope:
    """The response documents for one request id, in v0.3 shapes and error codes."""

    id: Any
    convert: Result

    def result(self, message: Message) -> Document:
        return {"jsonrpc": "2.0", "id": self.id, "result": self.convert(message)}

    def error(self, err: A2AError) -> Document:
        return {"jsonrpc": "2.0", "id": self.id, "error": shapes.error_out(err, details_json(err))}


class AsV10:
    """The translated request is a 1.0 request: an upstream (proxy mode) is told so, as
    the caller's own A2A-Version (0.3 or none) was checked here already."""

    __slots__ = ("_inner",)

    def __init__(self, inner: Invoker) -> None:
        self._inner = inner

    @staticmethod
    def _v10(call: CallContext) -> CallContext:
        return dataclasses.replace(call, metadata={**call.metadata, VERSION_KEY: "1.0"})

    async def unary(self, name: str, request: Message, call: CallContext) -> Message:
        return await self._inner.unary(name, request, self._v10(call))

    async def stream(
        self, name: str, request: Message, call: CallContext
    ) -> NumberedEvents[Message]:
        return await self._inner.stream(name, request, self._v10(call))

    async def close(self) -> None:
        await self._inner.close()


class V03JsonRpcDispatcher:
    def __init__(
        self, invoker: Invoker, service: ServiceDescriptor, pipeline: Pipeline | None = None
    ) -> None:
        self.invoker = invoker if isinstance(invoker, InProcessInvoker) else AsV10(invoker)
        self.pipeline = pipeline or Pipeline()
        by_name = {m.name: m for m in service.methods}
        self.rpcs: dict[str, tuple[MethodDescriptor, type[Message]]] = {
            name: (by_name[m.rpc], message_factory.GetMessageClass(by_name[m.rpc].input_type))
            for name, m in METHODS.items()
        }

    def refusal(self, err: A2AError, rid: Any, name: str) -> Reply:
        """`err`, found in the request's bytes before they were parsed, answered as this
        dispatcher answers a refused `name` call with id `rid`."""
        current = record.current()
        if current is not None:
            current.binding = BINDING
        return ErrorReply.of(err, V03Envelope(rid, _nothing), f"JSON-RPC {name}")

    async def dispatch(self, doc: Any, call: Callable[[], CallContext]) -> Reply:
        """Answer the v0.3 request document `doc`; `call` builds its call context once the
        request is valid."""
        rid = request_id(doc)
        envelope = V03Envelope(rid, _nothing)
        name = "?"
        current = record.current()
        if current is not None:
            current.binding = BINDING
        try:
            name, params = check_envelope(doc)
            entry = METHODS.get(name)
            if entry is None:
                raise MethodNotFoundError(
                    f"Unknown method {name!r}; the A2A 0.3 methods are {', '.join(METHODS)}."
                )
            rpc_name, convert = entry.rpc, entry.result
            if name == "tasks/pushNotificationConfig/get" and not params.get(
                "pushNotificationConfigId"
            ):
                rpc_name = "ListTaskPushNotificationConfigs"
                convert = _first_config(str(params.get("id", "")))
            method, request_cls = self.rpcs[name]
            if rpc_name != entry.rpc:
                method, request_cls = self.rpcs["tasks/pushNotificationConfig/list"]
            record.name_method(method.name)
            envelope = V03Envelope(rid, convert)
            message = entry.fast(params) if entry.fast is not None else None
            if message is None:
                message = build_request(request_cls, body=entry.request(params), body_field="*")
            return await invoke(
                self.invoker,
                self.pipeline,
                method,
                message,
                call(),
                envelope,
                f"JSON-RPC {name}",
            )
        except Exception as exc:
            return ErrorReply.of(exc, envelope, f"JSON-RPC {name}")
