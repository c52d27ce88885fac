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
        listed_json = (await v03.http.get(base)).json()
        assert [c["name"] for c in listed_json["configs"]] == [
            f"tasks/{task.id}/pushNotificationConfigs/c1"
        ]
        assert (await v03.http.delete(f"{base}/c1")).status_code == 200
    with pytest.raises(sdk_errors.TaskNotFoundError):
        await v03.unary.get_task_push_notification_config(
            sdk.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
        )


async def test_agent_card_is_the_extended_one(v03):
    if v03.binding == "GRPC":
        card = await v03.unary.get_extended_agent_card(sdk.GetExtendedAgentCardRequest())
    else:  # the REST client returns the card it was made with unless it says "extended"
        raw = (await v03.http.get(f"{v03.base}/v1/card")).json()
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
