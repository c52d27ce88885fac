"""Resuming a stream on every binding, over a real server with real clients: each streamed
event carries its sequence number (gRPC: `a2a_service.eventId` in the event's payload
metadata; SSE: `id:`), a resumed SubscribeToTask (gRPC metadata `last-event-id`, HTTP
`Last-Event-ID`) starts with the task as it is now, numbered with the last event it
includes, then every event after the resume point, with no gap and no duplicate; the same
through a proxy (`--upstream`). (Across replicas sharing a store: tests/integration/
test_scale_out.py; the engine's rules: tests/unit/test_engine_rules.py.)"""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc, a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from tests.conftest import user_message
from tests.grpc_util import error_details
from tests.integration.test_gateway_http import SSE, V1, message, rpc

WAIT = 20  # seconds: a stream that does not end fails the test instead of stalling it


def metadata_of(event) -> dict:
    """The payload metadata of a StreamResponse (1.0 or v0.3), as a dict."""
    payload = getattr(event, event.WhichOneof("payload"))
    return json_format.MessageToDict(payload.metadata)


def event_id(event) -> int:
    """The sequence number a gRPC event carries (a string of digits, as SSE's id)."""
    raw = metadata_of(event)["a2a_service"]["eventId"]
    assert isinstance(raw, str) and raw.isdigit(), raw
    return int(raw)


def without_event_id(event: pb.StreamResponse) -> pb.StreamResponse:
    """The event as the HTTP bindings send it: the number is the SSE id there."""
    out = pb.StreamResponse()
    out.CopyFrom(event)
    payload = getattr(out, out.WhichOneof("payload"))
    fields = payload.metadata.fields
    del fields["a2a_service"].struct_value.fields["eventId"]
    if not fields["a2a_service"].struct_value.fields:
        del fields["a2a_service"]
    if not fields:
        payload.ClearField("metadata")
    return out


def resume_from(seq: int | str) -> tuple[tuple[str, str], ...]:
    return (("last-event-id", str(seq)),)


async def read(call, limit: int | None = None) -> list:
    """Events of a gRPC stream until `limit` or its end."""
    out = []

    async def go() -> None:
        async for event in call:
            out.append(event)
            if limit is not None and len(out) >= limit:
                return

    await asyncio.wait_for(go(), WAIT)
    return out


@pytest.fixture
async def server(start_service):
    service = await start_service(http_port=0, store="memory:", agent="tests.agents:ScriptedAgent")
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}", timeout=WAIT) as http,
    ):
        yield a2a_pb2_grpc.A2AServiceStub(channel), channel, http


# ------------------------------------------------------------------------------------ gRPC


async def test_grpc_resume_with_last_event_id_metadata_starts_with_the_current_task(server):
    stub, _, _ = server
    send = pb.SendMessageRequest(message=user_message("slow 8"))
    streamed = stub.SendStreamingMessage(send)
    head = await read(streamed, 3)
    streamed.cancel()  # the connection is lost here
    assert head[0].HasField("task")
    task_id = head[0].task.id
    assert [event_id(e) for e in head] == [1, 2, 3]  # every event carries its number
    last_seen = event_id(head[-1])

    live = await read(
        stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id), metadata=resume_from(last_seen))
    )
    now, rest = live[0], live[1:]
    # The current task first (spec 1.0.1 §3.1.6), numbered with the last event it includes.
    assert now.HasField("task") and now.task.id == task_id
    assert event_id(now) >= last_seen
    ids = [event_id(e) for e in head + rest]
    assert ids == list(range(1, ids[-1] + 1)), ids  # no gap, no duplicate
    assert rest[-1].status_update.status.state == pb.TASK_STATE_COMPLETED

    # Resumed again once the task is over, the same events come from the store, after the
    # final task (the one GetTask answers), numbered with the last event.
    done = await stub.GetTask(pb.GetTaskRequest(id=task_id))
    again = await read(
        stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id), metadata=resume_from(last_seen))
    )
    assert without_event_id(again[0]) == pb.StreamResponse(task=done)
    assert event_id(again[0]) == ids[-1]
    assert again[1:] == rest
    # Resumed at the last event: the final task alone, then the end.
    final = await read(
        stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id), metadata=resume_from(ids[-1]))
    )
    assert [(event_id(e), e.task.status.state) for e in final] == [
        (ids[-1], pb.TASK_STATE_COMPLETED)
    ]
    # Resumed from 0: the final task, then every stored event, the submitted task first.
    whole = await read(
        stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id), metadata=resume_from(0))
    )
    assert [event_id(e) for e in whole] == [ids[-1], *ids]
    assert whole[1].task.status.state == pb.TASK_STATE_SUBMITTED


async def test_grpc_subscribe_without_resume_point_and_a_direct_reply(server):
    stub, _, _ = server
    streamed = stub.SendStreamingMessage(
        pb.SendMessageRequest(message=user_message("input more please"))
    )
    turn = await read(streamed)
    assert turn[-1].status_update.status.state == pb.TASK_STATE_INPUT_REQUIRED
    task_id = turn[0].task.id
    subscribed = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id))
    [now] = await read(subscribed, 1)
    assert now.task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert event_id(now) == event_id(turn[-1])  # the last event the snapshot includes
    subscribed.cancel()
    # A direct Message reply has no number: its metadata carries none.
    [reply] = await read(
        stub.SendStreamingMessage(pb.SendMessageRequest(message=user_message("reply hi")))
    )
    assert reply.HasField("message") and "a2a_service" not in metadata_of(reply)


async def test_grpc_resume_point_that_is_not_one_is_invalid_argument(server):
    stub, _, _ = server
    done = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("echo x")))).task
    request = pb.SubscribeToTaskRequest(id=done.id)
    latest = event_id((await read(stub.SubscribeToTask(request, metadata=resume_from(1))))[0])
    for bad in ("soon", "-1", "1.0", "9" * 40, str(latest + 1)):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read(stub.SubscribeToTask(request, metadata=resume_from(bad)))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
        _, violations = error_details(refused.value)
        assert [field for field, _ in violations] == ["Last-Event-ID"], bad
    # Without a resume point, a finished task has nothing to subscribe to (as before).
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await read(stub.SubscribeToTask(request))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # On HTTP, a digit that is not an ASCII digit is refused too (not a server error).
    _, _, http = server
    r = await http.get(
        f"/tasks/{done.id}:subscribe", headers=V1 | {"Last-Event-ID": "²".encode("latin-1")}
    )
    assert r.status_code == 400, r.text


async def test_grpc_v03_events_carry_ids_and_resume(server):
    stub, channel, _ = server
    v03 = a2a_v0_3_pb2_grpc.A2AServiceStub(channel)
    done = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("chunks 3")))).task
    events = await read(
        v03.TaskSubscription(
            a2a_v0_3_pb2.TaskSubscriptionRequest(name=f"tasks/{done.id}"),
            metadata=(("a2a-version", "0.3"), *resume_from(2)),
        )
    )
    assert events[0].HasField("task") and events[0].task.id == done.id
    ids = [event_id(e) for e in events]
    assert ids[1:] == list(range(3, ids[0] + 1)) and ids[0] == ids[-1]
    assert events[-1].status_update.final


# ------------------------------------------------------------------------------------ SSE


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_sse_resume_starts_with_the_current_task(server, binding):
    stub, _, http = server
    streamed = stub.SendStreamingMessage(pb.SendMessageRequest(message=user_message("slow 4")))
    task_id = (await read(streamed, 1))[0].task.id
    grpc_events = await read(streamed)
    done = await stub.GetTask(pb.GetTaskRequest(id=task_id))
    for after in (2, 0):
        frames = await sse_subscribe(http, binding, task_id, str(after))
        payloads = [data.get("result", data) for _, _, data in frames]
        # The final task first, with the id of the last event, then the events after it:
        # the same ids and payloads a gRPC client gets.
        assert payloads[0] == {"task": json_format.MessageToDict(done)}
        assert int(frames[0][0]) == event_id(grpc_events[-1])
        replayed = [e for e in grpc_events if event_id(e) > after]
        assert [int(i) for i, _, _ in frames[1:]][-len(replayed) :] == [
            event_id(e) for e in replayed
        ]
        assert payloads[-len(replayed) :] == [
            json_format.MessageToDict(without_event_id(e)) for e in replayed
        ]


async def sse_subscribe(http: httpx.AsyncClient, binding: str, task_id: str, after: str) -> list:
    headers = V1 | {"Last-Event-ID": after}
    if binding == "JSONRPC":
        opened = http.stream(
            "POST", "/", json=rpc("SubscribeToTask", {"id": task_id}), headers=headers
        )
    else:
        opened = http.stream("GET", f"/tasks/{task_id}:subscribe", headers=headers)
    async with opened as r:
        assert r.status_code == 200
        return await asyncio.wait_for(SSE(r).events(), WAIT)


# ------------------------------------------------------------------------------ proxy mode


async def test_resume_through_a_proxy(start_service):
    upstream = await start_service(http_port=0, store="memory:", agent="tests.agents:ScriptedAgent")
    proxy = await start_service(
        http_port=0, upstream=f"127.0.0.1:{upstream.grpc_port}", agent="tests.agents:ScriptedAgent"
    )
    async with (
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{proxy.http_port}", timeout=WAIT) as via,
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{upstream.http_port}", timeout=WAIT
        ) as direct,
    ):
        async with via.stream("POST", "/message:stream", json=message("slow 6"), headers=V1) as r:
            head = await asyncio.wait_for(SSE(r).events(limit=3), WAIT)
        task_id = head[0][2]["task"]["id"]
        assert [i for i, _, _ in head] == ["1", "2", "3"]  # the upstream's numbers, as SSE ids
        rest = await sse_subscribe(via, "JSONRPC", task_id, head[-1][0])
        now, *after = rest
        assert now[2]["result"]["task"]["id"] == task_id and int(now[0]) >= 3
        ids = [int(i) for i, _, _ in head + after]
        assert ids == list(range(1, ids[-1] + 1)), ids  # no gap, no duplicate
        assert after[-1][2]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        # Through the proxy, the frames are those of the upstream's own gateway: same ids,
        # same payloads (the gRPC event number taken out of them again).
        for after_id in ("0", "4"):
            for binding in ("JSONRPC", "HTTP+JSON"):
                assert await sse_subscribe(via, binding, task_id, after_id) == await sse_subscribe(
                    direct, binding, task_id, after_id
                )
        # A resume point the upstream refuses is refused through the proxy the same way.
        r = await via.get(f"/tasks/{task_id}:subscribe", headers=V1 | {"Last-Event-ID": "99"})
        assert r.status_code == 400
        assert (
            r.json()
            == (
                await direct.get(
                    f"/tasks/{task_id}:subscribe", headers=V1 | {"Last-Event-ID": "99"}
                )
            ).json()
        )
