"""One small client per binding for the permission tests, protobuf in and out: a grpcio
stub (gRPC), httpx JSON-RPC, httpx REST. A refused call raises `Refused` with the error's
reason, field violations and message, whichever binding it came from."""

from __future__ import annotations

import json
import os
from typing import Any

import grpc
import httpx
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.grpc_util import error_details

BINDINGS = ["GRPC", "JSONRPC", "HTTP+JSON"]
V1 = {"A2A-Version": "1.0"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


class Refused(Exception):
    def __init__(self, reason: str, fields: list[str], text: str) -> None:
        super().__init__(f"{reason} {fields}: {text}")
        self.reason, self.fields, self.text = reason, fields, text


def _refused_http(details: list[dict], text: str) -> Refused:
    reason = next(d["reason"] for d in details if d["@type"] == ERROR_INFO)
    fields = [
        v["field"] for d in details if d["@type"] == BAD_REQUEST for v in d["fieldViolations"]
    ]
    return Refused(reason, fields, text)


class Client:
    def __init__(
        self, binding: str, grpc_address: str, http_base: str, token: str | None = None
    ) -> None:
        self.binding = binding
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.channel = grpc.aio.insecure_channel(grpc_address)
        self.stub = a2a_pb2_grpc.A2AServiceStub(self.channel)
        self.metadata = tuple((k.lower(), v) for k, v in auth.items())
        self.http = httpx.AsyncClient(base_url=http_base, timeout=15, headers=V1 | auth)

    @classmethod
    def of(cls, service: Any, binding: str, token: str | None = None) -> Client:
        return cls(
            binding,
            f"127.0.0.1:{service.grpc_port}",
            f"http://127.0.0.1:{service.http_port}",
            token,
        )

    async def close(self) -> None:
        await self.channel.close()
        await self.http.aclose()

    async def _unary(self, method: str, request: Any, response: Any, rest: tuple[str, str]) -> Any:
        if self.binding == "GRPC":
            try:
                return await getattr(self.stub, method)(request, metadata=self.metadata)
            except grpc.aio.AioRpcError as err:
                info, violations = error_details(err)
                raise Refused(
                    info.reason if info else err.code().name,
                    [f for f, _ in violations],
                    err.details() or "",
                ) from None
        params = json_format.MessageToDict(request)
        if self.binding == "JSONRPC":
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            reply = (await self.http.post("/", json=body)).json()
            if "error" in reply:
                raise _refused_http(reply["error"].get("data", []), reply["error"]["message"])
            return json_format.ParseDict(reply["result"], response, ignore_unknown_fields=True)
        verb, path = rest
        r = await (self.http.get(path) if verb == "GET" else self.http.post(path, json=params))
        if r.status_code != 200:
            error = r.json()["error"]
            raise _refused_http(error.get("details", []), error["message"])
        return json_format.ParseDict(r.json(), response, ignore_unknown_fields=True)

    async def send(self, message: pb.Message, tenant: str = "") -> pb.Task:
        request = pb.SendMessageRequest(message=message, tenant=tenant)
        reply = await self._unary(
            "SendMessage", request, pb.SendMessageResponse(), ("POST", "/message:send")
        )
        assert reply.HasField("task"), reply
        return reply.task

    async def get(self, task_id: str) -> pb.Task:
        return await self._unary(
            "GetTask", pb.GetTaskRequest(id=task_id), pb.Task(), ("GET", f"/tasks/{task_id}")
        )

    async def stream(self, message: pb.Message) -> list[pb.StreamResponse]:
        request = pb.SendMessageRequest(message=message)
        if self.binding == "GRPC":
            return [
                e async for e in self.stub.SendStreamingMessage(request, metadata=self.metadata)
            ]
        params = json_format.MessageToDict(request)
        if self.binding == "JSONRPC":
            call = (
                "/",
                {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params},
            )
        else:
            call = ("/message:stream", params)
        events = []
        async with self.http.stream("POST", call[0], json=call[1]) as r:
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    doc = json.loads(line[5:])
                    doc = doc.get("result", doc) if self.binding == "JSONRPC" else doc
                    events.append(
                        json_format.ParseDict(doc, pb.StreamResponse(), ignore_unknown_fields=True)
                    )
        return events


def text_message(text: str, **fields: Any) -> pb.Message:
    msg = pb.Message(message_id=os.urandom(8).hex(), role=pb.ROLE_USER, **fields)
    msg.parts.add(text=text)
    return msg


def ours(metadata: Any) -> dict:
    """The a2a_service namespace of a metadata Struct, as plain data."""
    return json_format.MessageToDict(metadata).get("a2a_service", {})


def envelope_of(task: pb.Task) -> dict:
    return ours(task.metadata)["input"]


def answer(
    task: pb.Task, decision: str = "allow_once", *, drop: str = "", **changes: Any
) -> pb.Message:
    """The caller's answer to the task's pending request; `changes` replace (or add) fields,
    `drop` leaves one out."""
    env = envelope_of(task)
    data = {
        "schemaVersion": 1,
        "kind": "permission",
        "requestTaskId": env["requestTaskId"],
        "inputId": env["inputId"],
        "toolUseId": env["toolUseId"],
        "decision": decision,
        **changes,
    }
    data.pop(drop, None)
    msg = pb.Message(message_id=os.urandom(8).hex(), role=pb.ROLE_USER, task_id=task.id)
    part = msg.parts.add(media_type="application/json")
    part.data.struct_value.update(data)
    return msg


def audit(task: pb.Task) -> list[dict]:
    return ours(task.metadata).get("permissionAudit", [])
