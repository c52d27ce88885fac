"""Interop: a2a-sdk 1.3.0's v0.3 compat client (CompatGrpcTransport, CompatRestTransport)
against the v0.3 gRPC service and the `/v1/...` REST routes, beside 1.0 on one server.

The client is chosen by the interface's `protocolVersion: "0.3"` in the card we hand the
factory, so every call below travels in v0.3 shapes; what it gets back it turns into 1.0
messages, which is what these tests read."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as sdk
from a2a.utils import errors as sdk_errors

from gen import a2a_pb2 as pb
from tests.conftest import user_message

BINDINGS = ["GRPC", "HTTP+JSON"]
EXTENDED_SKILLS = [{"id": "more", "name": "More", "description": "extra", "tags": ["t"]}]

V03 = {"A2A-Version": "0.3"}  # the shared httpx client carries a2a-sdk's default 1.0


def v03_card(service, binding: str) -> sdk.AgentCard:
    card = sdk.AgentCard()
    card.CopyFrom(service.cards.public_card())
    del card.supported_interfaces[:]
    url = (
        f"127.0.0.1:{service.grpc_port}"
        if binding == "GRPC"
        else f"http://127.0.0.1:{service.http_port}"
    )
    card.supported_interfaces.add(url=url, protocol_binding=binding, protocol_version="0.3")
    return card


async def v03_clients(service, binding: str) -> SimpleNamespace:
    http = httpx.AsyncClient(timeout=10)
    channels: list[grpc.aio.Channel] = []

    def channel_factory(url: str) -> grpc.aio.Channel:
        channels.append(grpc.aio.insecure_channel(url))
        return channels[-1]

    def client(streaming: bool):
        config = ClientConfig(
            streaming=streaming,
            supported_protocol_bindings=[binding],
            httpx_client=http,
            grpc_channel_factory=channel_factory,
        )
        return ClientFactory(config).create(v03_card(service, binding))

    async def close():
        await http.aclose()
        for channel in channels:
            await channel.close()

    return SimpleNamespace(
        unary=client(False),
        streaming=client(True),
        close=close,
        service=service,
        binding=binding,
        http=http,
        base=f"http://127.0.0.1:{service.http_port}",
    )


@pytest.fixture(params=BINDINGS)
async def v03(request, start_service):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        extended_card=True,
        extended_skills=EXTENDED_SKILLS,
    )
    clients = await v03_clients(service, request.param)
    yield clients
    await clients.close()


async def collect(iterator):
    return [event async for event in iterator]


async def send(client, text: str, **config) -> sdk.StreamResponse:
    request = sdk.SendMessageRequest(message=user_message(text))
    if config:
        request.configuration.CopyFrom(sdk.SendMessageConfiguration(**config))
    [event] = await collect(client.send_message(request))
    return event


def test_the_compat_transport_is_chosen(v03):
    names = {"GRPC": "CompatGrpcTransport", "HTTP+JSON": "CompatRestTransport"}
    assert type(v03.unary._transport).__name__ == names[v03.binding]


async def test_blocking_send_and_get(v03):
    event = await send(v03.unary, "echo hello")
    task = event.task
    assert task.status.state == sdk.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "echo hello"
    assert [m.parts[0].text for m in task.history] == ["echo hello"]
    got = await v03.unary.get_task(sdk.GetTaskRequest(id=task.id))
    assert got.id == task.id and got.status.state == sdk.TASK_STATE_COMPLETED
    assert len(got.history) == 1  # v0.3: history_length 0 (unset) is all of it
    limited = await v03.unary.get_task(sdk.GetTaskRequest(id=task.id, history_length=1))
    assert len(limited.history) == 1


async def test_direct_reply_is_a_message(v03):
    event = await send(v03.unary, "reply hi there")
    assert event.HasField("message") and event.message.parts[0].text == "hi there"
    assert event.message.role == sdk.ROLE_AGENT


async def test_non_blocking_send_returns_at_once(v03):
    event = await send(v03.unary, "sleep 0.3", return_immediately=True)
    assert event.task.status.state in (sdk.TASK_STATE_SUBMITTED, sdk.TASK_STATE_WORKING)


async def test_stream_to_the_end(v03):
    events = await collect(
        v03.streaming.send_message(sdk.SendMessageRequest(message=user_message("chunks 3")))
    )
    assert events[0].HasField("task")
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [c.artifact.parts[0].text for c in chunks] == ["c0", "c1", "c2"]
    assert chunks[-1].last_chunk and chunks[1].append
    assert events[-1].status_update.status.state == sdk.TASK_STATE_COMPLETED


async def test_stream_through_input_required_and_follow_up(v03):
    events = await collect(
        v03.streaming.send_message(sdk.SendMessageRequest(message=user_message("ask colour?")))
    )
    last = events[-1].status_update
    assert last.status.state == sdk.TASK_STATE_INPUT_REQUIRED
    assert last.status.message.parts[0].text == "colour?"
    follow = user_message("blue", task_id=last.task_id, context_id=last.context_id)
    more = await collect(v03.streaming.send_message(sdk.SendMessageRequest(message=follow)))
    assert more[-1].status_update.status.state == sdk.TASK_STATE_COMPLETED
    got = await v03.unary.get_task(sdk.GetTaskRequest(id=last.task_id))
    assert got.artifacts[-1].parts[0].text == "you said: blue"


async def test_cancel_a_running_task_while_resubscribed(v03):
    started = (await send(v03.unary, "hang", return_immediately=True)).task
    sub = v03.streaming.subscribe(sdk.SubscribeToTaskRequest(id=started.id))
    snapshot = await sub.__anext__()
    assert snapshot.task.id == started.id
    canceled = await v03.unary.cancel_task(sdk.CancelTaskRequest(id=started.id))
    assert canceled.status.state == sdk.TASK_STATE_CANCELED
    rest = await collect(sub)
    assert rest[-1].status_update.status.state == sdk.TASK_STATE_CANCELED


async def test_push_config_set_get_list_delete(v03):
    task = (await send(v03.unary, "echo")).task
    config = sdk.TaskPushNotificationConfig(
        task_id=task.id, id="c1", url="https://example.com/cb", token="tok"
    )
    config.authentication.scheme = "Bearer"
    config.authentication.credentials = "secret"
    made = await v03.unary.create_task_push_notification_config(config)
    assert (made.task_id, made.id, made.url) == (task.id, "c1", "https://example.com/cb")
    got = await v03.unary.get_task_push_notification_config(
        sdk.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
    )
    assert got.url == "https://example.com/cb" and got.authentication.scheme == "Bearer"
    if v03.binding == "GRPC":  # a2a-sdk's v0.3 REST client has no list or delete
        listed = await v03.unary.list_task_push_notification_configs(
            sdk.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert [c.id for c in listed.configs] == ["c1"]
        await v03.unary.delete_task_push_notification_config(
            sdk.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
        )
    else:
        base = f"{v03.base}/v1/tasks/{task.id}/pushNotificationConfigs"
        listed_json = (await v03.http.get(base, headers=V03)).json()
        assert [c["name"] for c in listed_json["configs"]] == [
            f"tasks/{task.id}/pushNotificationConfigs/c1"
        ]
        assert (await v03.http.delete(f"{base}/c1", headers=V03)).status_code == 200
    with pytest.raises(sdk_errors.TaskNotFoundError):
        await v03.unary.get_task_push_notification_config(
            sdk.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
        )


async def test_agent_card_is_the_extended_one(v03):
    if v03.binding == "GRPC":
        card = await v03.unary.get_extended_agent_card(sdk.GetExtendedAgentCardRequest())
    else:  # the REST client returns the card it was made with unless it says "extended"
        raw = (await v03.http.get(f"{v03.base}/v1/card", headers=V03)).json()
        card = SimpleNamespace(skills=[SimpleNamespace(id=s["id"]) for s in raw["skills"]])
        assert raw["protocolVersion"].startswith("0.3")
    assert "more" in [s.id for s in card.skills]


async def _completed(v03) -> str:
    return (await send(v03.unary, "echo")).task.id


async def _err_unknown_task(v03):
    await v03.unary.get_task(sdk.GetTaskRequest(id="missing"))


async def _err_cancel_completed(v03):
    await v03.unary.cancel_task(sdk.CancelTaskRequest(id=await _completed(v03)))


async def _err_message_to_completed(v03):
    message = user_message("again", task_id=await _completed(v03))
    await collect(v03.unary.send_message(sdk.SendMessageRequest(message=message)))


async def _err_missing_message_id(v03):
    message = sdk.Message(role=sdk.ROLE_USER, parts=[sdk.Part(text="x")])
    await collect(v03.unary.send_message(sdk.SendMessageRequest(message=message)))


async def _err_unknown_push_config(v03):
    await v03.unary.get_task_push_notification_config(
        sdk.GetTaskPushNotificationConfigRequest(task_id=await _completed(v03), id="nope")
    )


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (_err_unknown_task, sdk_errors.TaskNotFoundError),
        (_err_cancel_completed, sdk_errors.TaskNotCancelableError),
        (_err_message_to_completed, sdk_errors.UnsupportedOperationError),
        (_err_missing_message_id, sdk_errors.InvalidParamsError),
        (_err_unknown_push_config, sdk_errors.TaskNotFoundError),
    ],
)
async def test_errors_map_to_the_sdk_exception(v03, case, expected):
    with pytest.raises(expected):
        await case(v03)


async def test_push_not_supported(start_service):
    service = await start_service(
        http_port=0, store="memory:", agent="tests.agents:ScriptedAgent", push_notifications=False
    )
    for binding in BINDINGS:
        clients = await v03_clients(service, binding)
        try:
            task = (await send(clients.unary, "echo")).task
            with pytest.raises(sdk_errors.PushNotificationNotSupportedError):
                await clients.unary.create_task_push_notification_config(
                    sdk.TaskPushNotificationConfig(task_id=task.id, id="c", url="https://e.x/cb")
                )
        finally:
            await clients.close()


async def test_tasks_are_shared_with_1_0(v03):
    """A task made over v0.3 is visible over 1.0 and the reverse (same caller)."""
    from gen import a2a_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{v03.service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        made_v03 = (await send(v03.unary, "echo from v0.3")).task
        seen = await stub.GetTask(pb.GetTaskRequest(id=made_v03.id))
        assert seen.artifacts[0].parts[0].text == "echo from v0.3"
        made_v10 = await stub.SendMessage(
            pb.SendMessageRequest(message=user_message("echo from 1.0"))
        )
        seen_v03 = await v03.unary.get_task(sdk.GetTaskRequest(id=made_v10.task.id))
        assert seen_v03.artifacts[0].parts[0].text == "echo from 1.0"
        assert seen_v03.status.state == sdk.TASK_STATE_COMPLETED


# --- raw requests: negotiation, /v1 never a tenant, either field spelling -----------------


@pytest.fixture
async def raw(start_service):
    service = await start_service(http_port=0, store="memory:", agent="tests.agents:ScriptedAgent")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        yield SimpleNamespace(http=http, service=service)


V03_BODY = {
    "message": {"messageId": "m1", "role": "ROLE_USER", "content": [{"text": "echo plain"}]}
}


@pytest.mark.parametrize("version", [None, "0.3"])
async def test_v1_paths_are_v03_and_never_a_tenant(raw, version):
    headers = {"A2A-Version": version} if version else {}
    reply = await raw.http.post("/v1/message:send", json=V03_BODY, headers=headers)
    assert reply.status_code == 200, reply.text
    task = reply.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["history"][0]["content"][0]["text"] == "echo plain"
    # The task lives in the default tenant: 1.0 finds it there, and tenant v1 is refused.
    seen = await raw.http.get(f"/tasks/{task['id']}", headers={"A2A-Version": "1.0"})
    assert seen.status_code == 200 and seen.json()["id"] == task["id"]
    listed = await raw.http.get("/v1/tasks", headers={"A2A-Version": "1.0"})
    assert listed.status_code == 404  # a v0.3 path with no v0.3 operation, not ListTasks of v1


async def test_a_1_0_header_on_a_v1_path_is_refused_and_makes_no_tenant(raw):
    """`/v1/...` are the v0.3 routes: a caller that says it speaks 1.0 there is told which
    to call, and no task is made (before, this made a task in a tenant named `v1`)."""
    reply = await raw.http.post("/v1/message:send", json=V03_BODY, headers={"A2A-Version": "1.0"})
    assert reply.status_code == 400 and reply.json()["type"] == "VersionNotSupportedError"
    assert "0.3" in reply.json()["message"]
    listed = await raw.http.get("/tasks", headers={"A2A-Version": "1.0"})
    assert listed.json().get("tasks", []) == []


async def test_tenant_v1_is_reserved_on_1_0_bindings(raw):
    from gen import a2a_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{raw.service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.SendMessage(pb.SendMessageRequest(tenant="v1", message=user_message("x")))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "reserved" in caught.value.details()


async def test_proto_field_names_in_body_and_query(raw):
    body = {
        "request": {
            "message_id": "m2",
            "role": "ROLE_USER",
            "content": [
                {"text": "echo named"},
                {"file": {"file_with_bytes": "aGk=", "mime_type": "text/plain", "name": "f"}},
            ],
        },
        "configuration": {"blocking": True, "history_length": 0},
    }
    reply = await raw.http.post("/v1/message:send", json=body)
    assert reply.status_code == 200, reply.text
    task = reply.json()["task"]
    file_part = task["history"][0]["content"][1]["file"]
    assert file_part == {"fileWithBytes": "aGk=", "mimeType": "text/plain", "name": "f"}
    for query in ("history_length=1", "historyLength=1"):
        got = await raw.http.get(f"/v1/tasks/{task['id']}?{query}")
        assert got.status_code == 200 and len(got.json()["history"]) == 1


async def test_canceled_state_is_spelled_cancelled(raw):
    body = {"message": {"messageId": "m3", "role": "ROLE_USER", "content": [{"text": "hang"}]}}
    body["configuration"] = {"blocking": False}
    task = (await raw.http.post("/v1/message:send", json=body)).json()["task"]
    canceled = await raw.http.post(f"/v1/tasks/{task['id']}:cancel", json={})
    assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELLED"


async def test_v03_rest_error_names_the_error(raw):
    reply = await raw.http.get("/v1/tasks/missing")
    assert reply.status_code == 404
    body = reply.json()
    assert body["type"] == "TaskNotFoundError" and body["error"]["status"] == "NOT_FOUND"


async def test_version_the_v03_binding_refuses(raw):
    reply = await raw.http.post("/v1/message:send", json=V03_BODY, headers={"A2A-Version": "0.2"})
    assert reply.status_code == 400 and reply.json()["type"] == "VersionNotSupportedError"


async def test_v03_stub_version_metadata(raw):
    """A v0.3 gRPC stub with or without `a2a-version: 0.3` is served; 0.2 is refused in the
    form v0.3 clients parse."""
    from gen import a2a_v0_3_pb2 as v03
    from gen import a2a_v0_3_pb2_grpc

    request = v03.SendMessageRequest(
        request=v03.Message(message_id="m", role=v03.ROLE_USER, content=[v03.Part(text="echo")])
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{raw.service.grpc_port}") as channel:
        stub = a2a_v0_3_pb2_grpc.A2AServiceStub(channel)
        for metadata in ((), (("a2a-version", "0.3"),)):
            reply = await stub.SendMessage(request, metadata=metadata)
            assert reply.task.status.state == v03.TASK_STATE_COMPLETED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.SendMessage(request, metadata=(("a2a-version", "0.2"),))
        assert caught.value.details().startswith("VersionNotSupportedError: ")


async def test_compat_off_refuses_v03_grpc_and_rest_naming_the_setting(start_service):
    """`compat_v03 = false`: the v0.3 gRPC service and the /v1 routes answer
    VersionNotSupported saying why, and nothing reaches the engine."""
    from gen import a2a_v0_3_pb2 as v03
    from gen import a2a_v0_3_pb2_grpc

    service = await start_service(http_port=0, store="memory:", compat_v03=False)
    request = v03.SendMessageRequest(
        request=v03.Message(message_id="m", role=v03.ROLE_USER, content=[v03.Part(text="echo")])
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_v0_3_pb2_grpc.A2AServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.SendMessage(request)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.details().startswith("VersionNotSupportedError: ")
    assert "compat_v03" in caught.value.details()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        reply = await http.post("/v1/message:send", json=V03_BODY)
        assert reply.status_code == 400 and reply.json()["type"] == "VersionNotSupportedError"
        assert "compat_v03" in reply.json()["message"]
        listed = await http.get("/tasks", headers={"A2A-Version": "1.0"})
    assert listed.json().get("tasks", []) == []


def test_grpcurl_lists_and_describes_the_v03_service(tmp_path):
    from tests.interop.test_grpcurl import grpcurl
    from tests.process import ServerProcess

    proc = ServerProcess(
        "--store", f"sqlite:{tmp_path / 'tasks.db'}", "--agent", "tests.agents:ScriptedAgent"
    ).start()
    try:
        out = grpcurl(proc, "list")
        assert out.returncode == 0, out.stderr
        assert {"a2a.v1.A2AService", "lf.a2a.v1.A2AService"} <= set(out.stdout.split())
        described = grpcurl(proc, "describe", "a2a.v1.A2AService")
        assert described.returncode == 0 and "TaskSubscription" in described.stdout
        health = grpcurl(proc, "grpc.health.v1.Health/Check", data={"service": "a2a.v1.A2AService"})
        assert health.returncode == 0 and "SERVING" in health.stdout, health.stderr
    finally:
        proc.stop()
