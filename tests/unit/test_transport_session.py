"""The rule every JSON-RPC transport of ours follows (gateway/transports/session.py), on the
real API and engine over the memory store: service parameters, frames, errors, auth."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator

import pytest

from gateway.invoker import InProcessInvoker
from gateway.transports.session import Conversation, Frame, FramedJsonRpc, Link
from gen import a2a_pb2 as pb
from service.api import A2AApi
from service.auth import Authenticator
from service.auth.credentials import SecretTable
from service.calls.admission import VersionCheck
from service.calls.pipeline import Pipeline
from service.engine.bus import InProcessBus
from service.engine.registry import Engine
from service.grpc_binding import SERVICE
from service.store.memory import MemoryTaskStore
from tests.agents import ScriptedAgent

TOKENS = {"alice": "tok-alice", "bob": "tok-bob"}


class NoCards:
    def public_card(self) -> pb.AgentCard:
        return pb.AgentCard(name="t")

    def extended_card(self) -> pb.AgentCard:
        return pb.AgentCard(name="t")


@pytest.fixture
async def rpc() -> AsyncIterator[FramedJsonRpc]:
    engine = Engine(MemoryTaskStore(), ScriptedAgent(), InProcessBus())
    auth = Authenticator(bearer_tokens=SecretTable.of(list(TOKENS.items())))
    pipeline = Pipeline(authenticator=auth, interceptors=[VersionCheck()])
    yield FramedJsonRpc(
        InProcessInvoker(A2AApi(engine, NoCards()), SERVICE),
        SERVICE,
        pipeline,
        max_frame_bytes=64 * 1024,
    )
    await engine.shutdown()


def request(method: str, params: dict, rid: object = 1, **parameters: str) -> bytes:
    doc: dict = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    doc["serviceParameters"] = {"A2A-Version": "1.0", **parameters}
    return json.dumps(doc).encode()


def send(text: str) -> dict:
    return {
        "message": {
            "messageId": os.urandom(6).hex(),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
    }


async def frames(rpc: FramedJsonRpc, raw: bytes, link: Link | None = None) -> list[dict]:
    link = link or Link("test")
    return [json.loads(f.payload) async for f in rpc.answer(raw, link)]


BOB = {"Authorization": f"Bearer {TOKENS['bob']}"}
ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}


async def test_a_unary_answer_is_one_final_frame(rpc):
    [answer] = await frames(rpc, request("SendMessage", send("reply hi"), 7, **ALICE))
    assert answer["id"] == 7 and answer["final"] is True
    assert answer["result"]["message"]["parts"][0]["text"] == "hi"


async def test_a_stream_numbers_its_events_and_ends_with_a_closing_frame(rpc):
    out = await frames(rpc, request("SendStreamingMessage", send("slow 2"), "s", **ALICE))
    events, closing = out[:-1], out[-1]
    assert closing == {"jsonrpc": "2.0", "id": "s", "final": True}
    assert all(e["final"] is False and e["id"] == "s" for e in events)
    ids = [int(e["eventId"]) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and ids[0] >= 1
    assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_resume_with_last_event_id_gives_no_duplicate(rpc):
    out = await frames(rpc, request("SendStreamingMessage", send("slow 3"), 1, **ALICE))
    task_id = out[0]["result"]["task"]["id"]
    ids = [int(e["eventId"]) for e in out[:-1]]
    again = await frames(
        rpc,
        request("SubscribeToTask", {"id": task_id}, 2, **ALICE, **{"Last-Event-ID": str(ids[1])}),
    )
    # A finished task cannot be subscribed to; what matters here is that the resume
    # parameter reached the call (an ill-formed one is refused naming it).
    assert again[-1]["final"] is True
    bad = await frames(
        rpc, request("SubscribeToTask", {"id": task_id}, 3, **ALICE, **{"Last-Event-ID": "x"})
    )
    assert bad[0]["error"]["code"] == -32602 and "Last-Event-ID" in bad[0]["error"]["message"]


async def test_no_credentials_is_unauthenticated_and_tenants_are_apart(rpc):
    [refused] = await frames(rpc, request("GetTask", {"id": "nope"}, 5))
    assert refused["error"]["code"] == -32000 and refused["id"] == 5 and refused["final"]
    [made] = await frames(rpc, request("SendMessage", send("input more"), 1, **ALICE))
    task_id = made["result"]["task"]["id"]
    [mine] = await frames(rpc, request("GetTask", {"id": task_id}, 2, **ALICE))
    assert mine["result"]["id"] == task_id
    [theirs] = await frames(rpc, request("GetTask", {"id": task_id}, 3, **BOB))
    assert theirs["error"]["code"] == -32001  # TaskNotFound: another caller's task


async def test_a_vouched_principal_needs_no_credential(rpc):
    link = Link("unix", principal="uid:1000")
    [made] = await frames(rpc, request("SendMessage", send("input more")), link)
    assert made["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_bad_frames_get_json_rpc_errors(rpc):
    [parse] = await frames(rpc, b"{not json")
    assert parse["error"]["code"] == -32700 and parse["id"] is None and parse["final"]
    [params] = await frames(
        rpc, b'{"jsonrpc":"2.0","id":4,"method":"GetTask","serviceParameters":[1]}'
    )
    assert params["error"]["code"] == -32600 and "serviceParameters" in params["error"]["message"]
    [big] = await frames(rpc, b" " * (64 * 1024 + 1))
    assert big["error"]["code"] == -32600 and "max_request_bytes" in big["error"]["message"]
    [old] = await frames(rpc, request("GetTask", {"id": "x"}, 6, **{"A2A-Version": "0.3"}, **ALICE))
    assert old["error"]["code"] == -32009  # VersionNotSupported


async def test_no_version_means_1_0(rpc):
    raw = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": send("reply hi"),
            "serviceParameters": ALICE,
        }
    ).encode()
    [answer] = await frames(rpc, raw)
    assert "result" in answer


async def test_a_conversation_answers_requests_at_once_and_refuses_past_its_limit(rpc):
    written: list[dict] = []

    async def write(frame: Frame) -> None:
        written.append(json.loads(frame.payload))

    talk = Conversation(rpc, Link("test"), write, max_in_flight=1)
    talk.received(request("SendMessage", send("hang"), "a", **ALICE))
    talk.received(request("GetTask", {"id": "x"}, "b", **ALICE))
    await asyncio.sleep(0.05)
    assert [w["id"] for w in written] == ["b"] and written[0]["error"]["code"] == -32603
    assert written[0]["error"]["data"][-1]["retryDelay"] == "1s"
    await talk.close()  # the hanging call is cancelled, its record closed
    assert not talk.calls
