"""Interop: the official a2a-sdk 1.3.0 client over gRPC, every RPC, streams and errors."""

from __future__ import annotations

import grpc
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as sdk
from a2a.utils import errors as sdk_errors

from tests.conftest import user_message


@pytest.fixture
async def client(start_service):
    service = await start_service(
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        extended_card=True,
        extended_skills=[{"id": "more", "name": "More", "description": "d", "tags": ["t"]}],
    )
    card = service.cards.public_card()
    assert card.supported_interfaces[0].protocol_binding == "GRPC"
    channels = []

    def channel_factory(url: str) -> grpc.aio.Channel:
        channels.append(grpc.aio.insecure_channel(url))
        return channels[-1]

    config = ClientConfig(
        streaming=False, supported_protocol_bindings=["GRPC"], grpc_channel_factory=channel_factory
    )
    streaming = ClientConfig(
        streaming=True, supported_protocol_bindings=["GRPC"], grpc_channel_factory=channel_factory
    )
    unary_client = ClientFactory(config).create(card)
    stream_client = ClientFactory(streaming).create(card)
    yield unary_client, stream_client
    for ch in channels:
        await ch.close()


async def collect(iterator):
    return [e async for e in iterator]


async def test_every_rpc_through_the_sdk_client(client):
    unary, streaming = client
    # SendMessage (non-streaming client turns the response into one StreamResponse)
    [first] = await collect(
        unary.send_message(sdk.SendMessageRequest(message=user_message("echo hello")))
    )
    task = first.task
    assert task.status.state == sdk.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "echo hello"
    # SendStreamingMessage
    events = await collect(
        streaming.send_message(sdk.SendMessageRequest(message=user_message("chunks 2")))
    )
    assert (
        events[0].HasField("task")
        and events[-1].status_update.status.state == sdk.TASK_STATE_COMPLETED
    )
    # GetTask
    got = await unary.get_task(sdk.GetTaskRequest(id=task.id, history_length=0))
    assert got.id == task.id and len(got.history) == 0
    # ListTasks
    listed = await unary.list_tasks(sdk.ListTasksRequest(page_size=1))
    assert listed.total_size == 2 and len(listed.tasks) == 1 and listed.next_page_token
    # CancelTask + SubscribeToTask on a long-running task
    [started] = await collect(
        unary.send_message(
            sdk.SendMessageRequest(
                message=user_message("hang"),
                configuration=sdk.SendMessageConfiguration(return_immediately=True),
            )
        )
    )
    running = started.task
    sub = streaming.subscribe(sdk.SubscribeToTaskRequest(id=running.id))
    snapshot = await sub.__anext__()
    assert snapshot.task.id == running.id
    canceled = await unary.cancel_task(sdk.CancelTaskRequest(id=running.id))
    assert canceled.status.state == sdk.TASK_STATE_CANCELED
    rest = await collect(sub)
    assert rest[-1].status_update.status.state == sdk.TASK_STATE_CANCELED
    # Push config CRUD
    cfg = await unary.create_task_push_notification_config(
        sdk.TaskPushNotificationConfig(task_id=task.id, id="c1", url="https://example.com/cb")
    )
    assert cfg.id == "c1"
    got_cfg = await unary.get_task_push_notification_config(
        sdk.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
    )
    assert got_cfg.url == "https://example.com/cb"
    cfgs = await unary.list_task_push_notification_configs(
        sdk.ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert [c.id for c in cfgs.configs] == ["c1"]
    await unary.delete_task_push_notification_config(
        sdk.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
    )
    # GetExtendedAgentCard
    card = await unary.get_extended_agent_card(sdk.GetExtendedAgentCardRequest())
    assert "more" in [s.id for s in card.skills]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.get_task(sdk.GetTaskRequest(id="missing")), sdk_errors.TaskNotFoundError),
        (
            lambda c: c.get_task(sdk.GetTaskRequest(id="x", history_length=-1)),
            sdk_errors.InvalidParamsError,
        ),
        (
            lambda c: c.cancel_task(sdk.CancelTaskRequest(id="missing")),
            sdk_errors.TaskNotFoundError,
        ),
        (
            lambda c: c.list_tasks(sdk.ListTasksRequest(page_size=1000)),
            sdk_errors.InvalidParamsError,
        ),
    ],
)
async def test_errors_map_to_sdk_exception_classes(client, call, error):
    unary, _ = client
    with pytest.raises(error):
        await call(unary)


async def test_terminal_errors_map_to_sdk_classes(client):
    unary, streaming = client
    [first] = await collect(
        unary.send_message(sdk.SendMessageRequest(message=user_message("echo")))
    )
    with pytest.raises(sdk_errors.TaskNotCancelableError):
        await unary.cancel_task(sdk.CancelTaskRequest(id=first.task.id))
    with pytest.raises(sdk_errors.UnsupportedOperationError):
        await collect(streaming.subscribe(sdk.SubscribeToTaskRequest(id=first.task.id)))
    with pytest.raises(sdk_errors.UnsupportedOperationError):
        await collect(
            unary.send_message(
                sdk.SendMessageRequest(message=user_message("again", task_id=first.task.id))
            )
        )
    with pytest.raises(sdk_errors.TaskNotFoundError):
        await collect(
            streaming.send_message(
                sdk.SendMessageRequest(message=user_message("x", task_id="nope"))
            )
        )
