"""One behavioural suite, three bindings: the a2a-sdk 1.3.0 client over gRPC, JSON-RPC and
HTTP+JSON against the same server, found through its agent card. Each test runs once per
binding and must see the same results and the same exception classes."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import httpx
import pytest
from a2a.client import ClientCallContext, ClientConfig, create_client
from a2a.types import a2a_pb2 as sdk
from a2a.utils import errors as sdk_errors

from tests.conftest import user_message

BINDINGS = ["GRPC", "JSONRPC", "HTTP+JSON"]
EXTENDED_SKILLS = [{"id": "more", "name": "More", "description": "extra", "tags": ["t"]}]


async def _clients(service, binding: str):
    base = f"http://127.0.0.1:{service.http_port}"
    http = httpx.AsyncClient(timeout=10)
    channels: list[grpc.aio.Channel] = []

    def channel_factory(url: str) -> grpc.aio.Channel:
        channels.append(grpc.aio.insecure_channel(url))
        return channels[-1]

    def config(streaming: bool) -> ClientConfig:
        return ClientConfig(
            streaming=streaming,
            supported_protocol_bindings=[binding],
            use_client_preference=True,
            httpx_client=http,
            grpc_channel_factory=channel_factory,
        )

    unary = await create_client(base, config(False))  # resolves /.well-known/agent-card.json
    streaming = await create_client(base, config(True))

    async def close():
        await http.aclose()
        for channel in channels:
            await channel.close()

    return SimpleNamespace(
        unary=unary, streaming=streaming, close=close, service=service, binding=binding
    )


@pytest.fixture(params=BINDINGS)
async def a2a(request, start_service):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        extended_card=True,
        extended_skills=EXTENDED_SKILLS,
    )
    clients = await _clients(service, request.param)
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


async def test_card_lists_every_binding_preferred_first(a2a):
    card = a2a.unary._card
    bindings = [i.protocol_binding for i in card.supported_interfaces]
    # 1.0 first, then the same bindings for v0.3 clients (compat_v03, issue 22)
    assert bindings == 2 * ["JSONRPC", "HTTP+JSON", "GRPC"]
    assert all(i.protocol_version == "1.0" for i in card.supported_interfaces[:3])
    assert all(i.protocol_version == "0.3" for i in card.supported_interfaces[3:])
    grpc_url = card.supported_interfaces[2].url
    assert grpc_url == f"127.0.0.1:{a2a.service.grpc_port}"  # bare host:port


async def test_send_get_and_direct_reply(a2a):
    task = (await send(a2a.unary, "echo hello")).task
    assert task.status.state == sdk.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "echo hello"
    got = await a2a.unary.get_task(sdk.GetTaskRequest(id=task.id, history_length=0))
    assert got.id == task.id and got.context_id == task.context_id and len(got.history) == 0
    full = await a2a.unary.get_task(sdk.GetTaskRequest(id=task.id))
    assert full.history[0].parts[0].text == "echo hello"
    reply = await send(a2a.unary, "reply hi there")
    assert reply.HasField("message") and reply.message.parts[0].text == "hi there"


async def test_stream_ends_at_terminal_state(a2a):
    events = await collect(
        a2a.streaming.send_message(sdk.SendMessageRequest(message=user_message("chunks 3")))
    )
    assert events[0].HasField("task")
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [c.artifact.parts[0].text for c in chunks] == ["c0", "c1", "c2"]
    assert chunks[-1].last_chunk and not chunks[0].append and chunks[1].append
    assert events[-1].status_update.status.state == sdk.TASK_STATE_COMPLETED
    reply = await collect(
        a2a.streaming.send_message(sdk.SendMessageRequest(message=user_message("reply yo")))
    )
    assert len(reply) == 1 and reply[0].message.parts[0].text == "yo"


async def test_interrupted_turn_and_follow_up(a2a):
    events = await collect(
        a2a.streaming.send_message(sdk.SendMessageRequest(message=user_message("input more")))
    )
    assert events[-1].status_update.status.state == sdk.TASK_STATE_INPUT_REQUIRED
    task_id = events[0].task.id
    follow = user_message("the answer", task_id=task_id)
    done = (await collect(a2a.unary.send_message(sdk.SendMessageRequest(message=follow))))[0].task
    assert done.status.state == sdk.TASK_STATE_COMPLETED
    assert done.artifacts[-1].parts[0].text == "follow-up: the answer"


async def test_list_with_paging_and_filters(a2a):
    ids = [(await send(a2a.unary, f"echo {i}")).task.id for i in range(3)]
    failed = (await send(a2a.unary, "fail")).task
    page1 = await a2a.unary.list_tasks(sdk.ListTasksRequest(page_size=2))
    assert page1.total_size == 4 and page1.page_size == 2 and len(page1.tasks) == 2
    assert page1.next_page_token
    page2 = await a2a.unary.list_tasks(
        sdk.ListTasksRequest(page_size=2, page_token=page1.next_page_token)
    )
    assert len(page2.tasks) == 2 and page2.next_page_token == ""
    seen = [t.id for t in page1.tasks] + [t.id for t in page2.tasks]
    assert sorted(seen) == sorted(ids + [failed.id])
    assert not any(t.artifacts for t in page1.tasks)  # includeArtifacts defaults to false
    only_failed = await a2a.unary.list_tasks(sdk.ListTasksRequest(status=sdk.TASK_STATE_FAILED))
    assert [t.id for t in only_failed.tasks] == [failed.id] and only_failed.total_size == 1
    with_art = await a2a.unary.list_tasks(
        sdk.ListTasksRequest(
            context_id=page1.tasks[0].context_id, include_artifacts=True, history_length=0
        )
    )
    assert len(with_art.tasks) == 1 and not with_art.tasks[0].history
    assert with_art.tasks[0].artifacts or with_art.tasks[0].status.state == sdk.TASK_STATE_FAILED


async def test_cancel_while_subscribed(a2a):
    running = (await send(a2a.unary, "hang", return_immediately=True)).task
    sub = a2a.streaming.subscribe(sdk.SubscribeToTaskRequest(id=running.id))
    snapshot = await sub.__anext__()
    assert snapshot.task.id == running.id
    canceled = await a2a.unary.cancel_task(sdk.CancelTaskRequest(id=running.id))
    assert canceled.status.state == sdk.TASK_STATE_CANCELED
    rest = await collect(sub)
    assert rest[-1].status_update.status.state == sdk.TASK_STATE_CANCELED


@pytest.mark.parametrize("text", ["input more", "ask what?"])  # turn ended / agent in ctx.ask()
async def test_subscribe_while_paused_hears_the_resumption_until_the_end(a2a, text):
    paused = (await send(a2a.unary, text)).task
    assert paused.status.state == sdk.TASK_STATE_INPUT_REQUIRED
    sub = a2a.streaming.subscribe(sdk.SubscribeToTaskRequest(id=paused.id))
    snapshot = await sub.__anext__()
    assert snapshot.task.status.state == sdk.TASK_STATE_INPUT_REQUIRED
    follow = user_message("the answer", task_id=paused.id)
    done = (await collect(a2a.unary.send_message(sdk.SendMessageRequest(message=follow))))[0].task
    assert done.status.state == sdk.TASK_STATE_COMPLETED
    rest = await collect(sub)  # the pause did not end it; the terminal state does
    states = [e.status_update.status.state for e in rest if e.HasField("status_update")]
    assert states == [sdk.TASK_STATE_WORKING, sdk.TASK_STATE_COMPLETED]
    [artifact] = [e.artifact_update.artifact for e in rest if e.HasField("artifact_update")]
    assert artifact.parts[0].text in ("follow-up: the answer", "you said: the answer")


async def test_push_config_crud(a2a):
    task = (await send(a2a.unary, "echo x")).task
    created = await a2a.unary.create_task_push_notification_config(
        sdk.TaskPushNotificationConfig(
            task_id=task.id, id="c1", url="https://example.com/cb", token="tok"
        )
    )
    assert created.id == "c1" and created.task_id == task.id
    unnamed = await a2a.unary.create_task_push_notification_config(
        sdk.TaskPushNotificationConfig(task_id=task.id, url="https://example.com/other")
    )
    assert unnamed.id
    got = await a2a.unary.get_task_push_notification_config(
        sdk.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
    )
    assert got.url == "https://example.com/cb" and got.token == "tok"
    listed = await a2a.unary.list_task_push_notification_configs(
        sdk.ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert sorted(c.id for c in listed.configs) == sorted(["c1", unnamed.id])
    await a2a.unary.delete_task_push_notification_config(
        sdk.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
    )
    listed = await a2a.unary.list_task_push_notification_configs(
        sdk.ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert [c.id for c in listed.configs] == [unnamed.id]
    with pytest.raises(sdk_errors.TaskNotFoundError):
        await a2a.unary.get_task_push_notification_config(
            sdk.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
        )


async def test_extended_card(a2a):
    card = await a2a.unary.get_extended_agent_card(sdk.GetExtendedAgentCardRequest())
    assert "more" in [s.id for s in card.skills]


# ---------------------------------------------------------------- errors, same class everywhere


async def _completed(a2a) -> str:
    return (await send(a2a.unary, "echo done")).task.id


async def _err_unknown_task(a2a):
    await a2a.unary.get_task(sdk.GetTaskRequest(id="no-such-task"))


async def _err_bad_id(a2a):
    await a2a.unary.get_task(sdk.GetTaskRequest(id="not a valid id!"))


async def _err_cancel_completed(a2a):
    await a2a.unary.cancel_task(sdk.CancelTaskRequest(id=await _completed(a2a)))


async def _err_subscribe_completed(a2a):
    await collect(a2a.streaming.subscribe(sdk.SubscribeToTaskRequest(id=await _completed(a2a))))


async def _err_message_to_completed(a2a):
    message = user_message("more", task_id=await _completed(a2a))
    await collect(a2a.unary.send_message(sdk.SendMessageRequest(message=message)))


async def _err_stream_unknown_task(a2a):
    message = user_message("more", task_id="no-such-task")
    await collect(a2a.streaming.send_message(sdk.SendMessageRequest(message=message)))


async def _err_version(a2a):
    context = ClientCallContext(service_parameters={"A2A-Version": "2.0"})
    await a2a.unary.get_task(sdk.GetTaskRequest(id="whatever"), context=context)


async def _err_missing_message_id(a2a):
    message = user_message("x")
    message.ClearField("message_id")
    await collect(a2a.unary.send_message(sdk.SendMessageRequest(message=message)))


ERROR_CASES = [
    (_err_unknown_task, sdk_errors.TaskNotFoundError),
    (_err_bad_id, sdk_errors.InvalidParamsError),
    (_err_cancel_completed, sdk_errors.TaskNotCancelableError),
    (_err_subscribe_completed, sdk_errors.UnsupportedOperationError),
    (_err_message_to_completed, sdk_errors.UnsupportedOperationError),
    (_err_stream_unknown_task, sdk_errors.TaskNotFoundError),
    (_err_version, sdk_errors.VersionNotSupportedError),
    (_err_missing_message_id, sdk_errors.InvalidParamsError),
]


@pytest.mark.parametrize("case,expected", ERROR_CASES, ids=[c.__name__[5:] for c, _ in ERROR_CASES])
async def test_errors_map_to_the_same_sdk_exception(a2a, case, expected):
    with pytest.raises(expected) as info:
        await case(a2a)
    assert type(info.value) is expected  # exactly that class, not a generic client error


@pytest.mark.parametrize("binding", BINDINGS)
async def test_push_not_supported_and_extension_required(start_service, binding):
    service = await start_service(
        http_port=0, store="memory:", agent="tests.agents:ScriptedAgent", push_notifications=False
    )
    clients = await _clients(service, binding)
    try:
        with pytest.raises(sdk_errors.PushNotificationNotSupportedError):
            await clients.unary.list_task_push_notification_configs(
                sdk.ListTaskPushNotificationConfigsRequest(task_id="t1")
            )
    finally:
        await clients.close()
    strict = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        required_extensions=["urn:example:ext"],
    )
    clients = await _clients(strict, binding)
    try:
        with pytest.raises(sdk_errors.ExtensionSupportRequiredError):
            await clients.unary.get_task(sdk.GetTaskRequest(id="t1"))
        context = ClientCallContext(service_parameters={"A2A-Extensions": "urn:example:ext"})
        with pytest.raises(sdk_errors.TaskNotFoundError):  # admitted: now the real answer
            await clients.unary.get_task(sdk.GetTaskRequest(id="t1"), context=context)
    finally:
        await clients.close()
