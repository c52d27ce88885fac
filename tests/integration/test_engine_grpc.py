"""Task engine semantics, over the real gRPC server with grpcio stubs."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gen import a2a_pb2 as pb
from tests.conftest import user_message
from tests.grpc_util import drain, error_details, expect_error

C = grpc.StatusCode


def send(text: str, **config) -> pb.SendMessageRequest:
    req = pb.SendMessageRequest(message=user_message(text))
    for key, value in config.items():
        setattr(req.configuration, key, value)
    return req


async def test_new_message_creates_task_with_server_ids(stub):
    resp = await stub.SendMessage(send("echo hi"))
    task = resp.task
    assert task.id and task.context_id
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert [p.text for p in task.artifacts[0].parts] == ["echo hi"]
    assert task.history[0].task_id == task.id
    assert task.history[0].context_id == task.context_id
    got = await stub.GetTask(pb.GetTaskRequest(id=task.id))
    assert got == task


async def test_context_id_kept_when_given(stub):
    resp = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("echo", context_id="ctx-1"))
    )
    assert resp.task.context_id == "ctx-1"


async def test_direct_reply_returns_message_and_stores_no_task(stub):
    resp = await stub.SendMessage(send("reply hey"))
    assert resp.WhichOneof("payload") == "message"
    assert resp.message.role == pb.ROLE_AGENT
    assert resp.message.parts[0].text == "hey"
    listed = await stub.ListTasks(pb.ListTasksRequest())
    assert listed.total_size == 0


async def test_multi_turn_input_required_then_follow_up(stub):
    first = (await stub.SendMessage(send("input which file?"))).task
    assert first.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert first.status.message.parts[0].text == "which file?"
    follow = user_message("readme", task_id=first.id)
    second = (await stub.SendMessage(pb.SendMessageRequest(message=follow))).task
    assert second.id == first.id and second.context_id == first.context_id
    assert second.status.state == pb.TASK_STATE_COMPLETED
    assert [m.parts[0].text for m in second.history if m.role == pb.ROLE_USER] == [
        "input which file?",
        "readme",
    ]
    assert second.artifacts[-1].parts[0].text == "follow-up: readme"


async def test_ask_pauses_mid_turn_and_resumes_same_coroutine(stub):
    first = (await stub.SendMessage(send("ask your name?"))).task
    assert first.status.state == pb.TASK_STATE_INPUT_REQUIRED
    follow = user_message("Ada", task_id=first.id, context_id=first.context_id)
    second = (await stub.SendMessage(pb.SendMessageRequest(message=follow))).task
    assert second.status.state == pb.TASK_STATE_COMPLETED
    assert second.artifacts[-1].parts[0].text == "you said: Ada"


async def test_auth_required_is_interrupted(stub):
    task = (await stub.SendMessage(send("auth"))).task
    assert task.status.state == pb.TASK_STATE_AUTH_REQUIRED


async def test_follow_up_to_terminal_task_is_unsupported(stub):
    task = (await stub.SendMessage(send("echo"))).task
    msg = user_message("again", task_id=task.id)
    err = await expect_error(
        stub.SendMessage(pb.SendMessageRequest(message=msg)),
        C.FAILED_PRECONDITION,
        "UNSUPPORTED_OPERATION",
    )
    assert "COMPLETED" in err.details()


async def test_follow_up_to_unknown_task_is_not_found(stub):
    msg = user_message("hi", task_id="no-such-task")
    await expect_error(
        stub.SendMessage(pb.SendMessageRequest(message=msg)), C.NOT_FOUND, "TASK_NOT_FOUND"
    )


async def test_task_and_context_mismatch_rejected(stub):
    task = (await stub.SendMessage(send("input"))).task
    msg = user_message("x", task_id=task.id, context_id="other-context")
    err = await expect_error(
        stub.SendMessage(pb.SendMessageRequest(message=msg)), C.INVALID_ARGUMENT, "INVALID_PARAMS"
    )
    assert error_details(err)[1][0][0] == "message.contextId"


async def test_second_message_to_working_task_rejected(stub):
    task = (await stub.SendMessage(send("hang", return_immediately=True))).task
    msg = user_message("more", task_id=task.id)
    err = await expect_error(
        stub.SendMessage(pb.SendMessageRequest(message=msg)),
        C.FAILED_PRECONDITION,
        "UNSUPPORTED_OPERATION",
    )
    assert err.details() == "Task is already working."
    await stub.CancelTask(pb.CancelTaskRequest(id=task.id))


async def test_different_contexts_run_in_parallel(stub):
    # A task that never finishes on its own does not hold up work in another context.
    busy = (await stub.SendMessage(send("hang", return_immediately=True))).task
    other = (await stub.SendMessage(send("echo meanwhile"))).task
    assert other.status.state == pb.TASK_STATE_COMPLETED and other.context_id != busy.context_id
    assert (await stub.GetTask(pb.GetTaskRequest(id=busy.id))).status.state == pb.TASK_STATE_WORKING
    await stub.CancelTask(pb.CancelTaskRequest(id=busy.id))


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("message.messageId", pb.Message(role=pb.ROLE_USER, parts=[pb.Part(text="x")])),
        ("message.role", pb.Message(message_id="m1", parts=[pb.Part(text="x")])),
        ("message.parts", pb.Message(message_id="m1", role=pb.ROLE_USER)),
        ("message.parts[0]", pb.Message(message_id="m1", role=pb.ROLE_USER, parts=[pb.Part()])),
        (
            "message.messageId",
            pb.Message(message_id="bad id!", role=pb.ROLE_USER, parts=[pb.Part(text="x")]),
        ),
        (
            "message.messageId",
            pb.Message(message_id="x" * 129, role=pb.ROLE_USER, parts=[pb.Part(text="x")]),
        ),
        (
            "message.contextId",
            pb.Message(
                message_id="m", context_id="a/b", role=pb.ROLE_USER, parts=[pb.Part(text="x")]
            ),
        ),
        (
            "message.taskId",
            pb.Message(message_id="m", task_id="ü", role=pb.ROLE_USER, parts=[pb.Part(text="x")]),
        ),
    ],
)
async def test_invalid_params_name_the_field(stub, field, message):
    err = await expect_error(
        stub.SendMessage(pb.SendMessageRequest(message=message)),
        C.INVALID_ARGUMENT,
        "INVALID_PARAMS",
    )
    assert error_details(err)[1][0][0] == field
    assert field in err.details()


async def test_missing_message_is_invalid_params(stub):
    err = await expect_error(
        stub.SendMessage(pb.SendMessageRequest()), C.INVALID_ARGUMENT, "INVALID_PARAMS"
    )
    assert error_details(err)[1] == [("message", "is required")]


async def test_ids_at_the_limits_are_accepted(stub):
    msg = user_message("echo", message_id="a" * 128, context_id="A-z_0.9:x")
    resp = await stub.SendMessage(pb.SendMessageRequest(message=msg))
    assert resp.task.context_id == "A-z_0.9:x"


async def test_return_immediately_returns_accepted_task(stub):
    task = (await stub.SendMessage(send("slow 3", return_immediately=True))).task
    assert task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
    # The task was committed before the response: it can be read back at once.
    assert (await stub.GetTask(pb.GetTaskRequest(id=task.id))).id == task.id
    for _ in range(100):
        got = await stub.GetTask(pb.GetTaskRequest(id=task.id))
        if got.status.state == pb.TASK_STATE_COMPLETED:
            break
        await asyncio.sleep(0.02)
    assert got.status.state == pb.TASK_STATE_COMPLETED


async def test_history_length_everywhere(stub):
    first = (await stub.SendMessage(send("input q1"))).task
    await stub.SendMessage(pb.SendMessageRequest(message=user_message("a1", task_id=first.id)))
    full = await stub.GetTask(pb.GetTaskRequest(id=first.id))
    assert len(full.history) == 3  # user, agent question, user follow-up
    assert len((await stub.GetTask(pb.GetTaskRequest(id=first.id, history_length=0))).history) == 0
    last = await stub.GetTask(pb.GetTaskRequest(id=first.id, history_length=1))
    assert list(last.history) == [full.history[-1]]
    assert len((await stub.GetTask(pb.GetTaskRequest(id=first.id, history_length=99))).history) == 3
    listed = await stub.ListTasks(pb.ListTasksRequest(history_length=1))
    assert all(len(t.history) <= 1 for t in listed.tasks)
    sent = await stub.SendMessage(send("echo", history_length=0))
    assert len(sent.task.history) == 0
    await expect_error(
        stub.GetTask(pb.GetTaskRequest(id=first.id, history_length=-1)),
        C.INVALID_ARGUMENT,
        "INVALID_PARAMS",
    )
    await expect_error(
        stub.ListTasks(pb.ListTasksRequest(history_length=-1)), C.INVALID_ARGUMENT, "INVALID_PARAMS"
    )
    await expect_error(
        stub.SendMessage(send("echo", history_length=-2)), C.INVALID_ARGUMENT, "INVALID_PARAMS"
    )


async def test_list_tasks_filters_paging_and_order(stub):
    ids = []
    for i in range(7):
        ctx = "ctx-a" if i % 2 == 0 else "ctx-b"
        resp = await stub.SendMessage(
            pb.SendMessageRequest(
                message=user_message("echo" if i != 3 else "fail", context_id=ctx)
            )
        )
        ids.append(resp.task.id)
    everything = await stub.ListTasks(pb.ListTasksRequest())
    assert (
        everything.total_size == 7
        and everything.page_size == 50
        and everything.next_page_token == ""
    )
    stamps = [(t.status.timestamp.ToMicroseconds(), t.id) for t in everything.tasks]
    assert stamps == sorted(stamps, reverse=True)
    assert all(len(t.artifacts) == 0 for t in everything.tasks)
    with_art = await stub.ListTasks(pb.ListTasksRequest(include_artifacts=True))
    assert any(len(t.artifacts) for t in with_art.tasks)
    seen, token = [], ""
    while True:
        page = await stub.ListTasks(pb.ListTasksRequest(page_size=3, page_token=token))
        assert page.total_size == 7 and page.page_size == 3
        seen += [t.id for t in page.tasks]
        token = page.next_page_token
        if not token:
            break
    assert seen == [t.id for t in everything.tasks]
    ctx_a = await stub.ListTasks(pb.ListTasksRequest(context_id="ctx-a"))
    assert ctx_a.total_size == 4 and {t.context_id for t in ctx_a.tasks} == {"ctx-a"}
    failed = await stub.ListTasks(pb.ListTasksRequest(status=pb.TASK_STATE_FAILED))
    assert [t.id for t in failed.tasks] == [ids[3]]
    after = everything.tasks[2].status.timestamp
    newer = await stub.ListTasks(pb.ListTasksRequest(status_timestamp_after=after))
    assert [t.id for t in newer.tasks] == [t.id for t in everything.tasks[:2]]
    for bad in (0, 101, -5):
        await expect_error(
            stub.ListTasks(pb.ListTasksRequest(page_size=bad)), C.INVALID_ARGUMENT, "INVALID_PARAMS"
        )
    await expect_error(
        stub.ListTasks(pb.ListTasksRequest(page_token="garbage!")),
        C.INVALID_ARGUMENT,
        "INVALID_PARAMS",
    )


async def test_cancel_running_task(stub):
    task = (await stub.SendMessage(send("hang", return_immediately=True))).task
    for _ in range(100):  # wait until the agent is inside its turn
        if (
            await stub.GetTask(pb.GetTaskRequest(id=task.id))
        ).status.state == pb.TASK_STATE_WORKING:
            break
        await asyncio.sleep(0.01)
    canceled = await stub.CancelTask(pb.CancelTaskRequest(id=task.id))
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert (
        await stub.GetTask(pb.GetTaskRequest(id=task.id))
    ).status.state == pb.TASK_STATE_CANCELED
    await expect_error(
        stub.CancelTask(pb.CancelTaskRequest(id=task.id)),
        C.FAILED_PRECONDITION,
        "TASK_NOT_CANCELABLE",
    )


async def test_cancel_paused_and_interrupted_tasks(stub):
    asked = (await stub.SendMessage(send("ask hmm"))).task
    assert (
        await stub.CancelTask(pb.CancelTaskRequest(id=asked.id))
    ).status.state == pb.TASK_STATE_CANCELED
    waiting = (await stub.SendMessage(send("input"))).task
    assert (
        await stub.CancelTask(pb.CancelTaskRequest(id=waiting.id))
    ).status.state == pb.TASK_STATE_CANCELED


async def test_cancel_unknown_and_terminal(stub):
    await expect_error(
        stub.CancelTask(pb.CancelTaskRequest(id="nope")), C.NOT_FOUND, "TASK_NOT_FOUND"
    )
    done = (await stub.SendMessage(send("echo"))).task
    await expect_error(
        stub.CancelTask(pb.CancelTaskRequest(id=done.id)),
        C.FAILED_PRECONDITION,
        "TASK_NOT_CANCELABLE",
    )


async def test_stream_new_task_order(stub):
    events = await drain(stub.SendStreamingMessage(send("chunks 3")))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    assert (
        kinds[-1] == "status_update"
        and events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    )
    chunks = [e.artifact_update for e in events if e.WhichOneof("payload") == "artifact_update"]
    assert [c.artifact.parts[0].text for c in chunks] == ["c0", "c1", "c2"]
    assert [c.append for c in chunks] == [False, True, True]
    assert [c.last_chunk for c in chunks] == [False, False, True]
    task = await stub.GetTask(pb.GetTaskRequest(id=events[0].task.id))
    assert [p.text for p in task.artifacts[0].parts] == ["c0", "c1", "c2"]


async def test_stream_direct_reply_is_single_message(stub):
    events = await drain(stub.SendStreamingMessage(send("reply yo")))
    assert [e.WhichOneof("payload") for e in events] == ["message"]


async def test_stream_closes_at_interrupted_state(stub):
    events = await drain(stub.SendStreamingMessage(send("input more?")))
    assert events[-1].status_update.status.state == pb.TASK_STATE_INPUT_REQUIRED
    follow = pb.SendMessageRequest(message=user_message("yes", task_id=events[0].task.id))
    events2 = await drain(stub.SendStreamingMessage(follow))
    assert events2[0].WhichOneof("payload") == "task"
    assert events2[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_subscribers_get_same_events_and_one_leaving_affects_none(stub):
    task = (await stub.SendMessage(send("slow 6", return_immediately=True))).task
    s1 = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task.id))
    s2 = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task.id))
    s3 = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task.id))
    first3 = await s3.read()
    assert first3.WhichOneof("payload") == "task"
    s3.cancel()  # one subscriber leaves early
    e1, e2 = await asyncio.gather(drain(s1), drain(s2))
    assert e1[0].WhichOneof("payload") == "task" and e2[0].WhichOneof("payload") == "task"
    tail1 = [e for e in e1[1:]]
    tail2 = [e for e in e2[1:]]
    # Both end at COMPLETED; the later joiner may have a later snapshot but the common suffix matches.
    assert tail1[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    n = min(len(tail1), len(tail2))
    assert tail1[-n:] == tail2[-n:]
    final = await stub.GetTask(pb.GetTaskRequest(id=task.id))
    assert final.status.state == pb.TASK_STATE_COMPLETED


async def test_subscribe_to_terminal_task_is_unsupported(stub):
    done = (await stub.SendMessage(send("echo"))).task
    await expect_error(
        drain(stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=done.id))),
        C.FAILED_PRECONDITION,
        "UNSUPPORTED_OPERATION",
    )
    await expect_error(
        drain(stub.SubscribeToTask(pb.SubscribeToTaskRequest(id="missing"))),
        C.NOT_FOUND,
        "TASK_NOT_FOUND",
    )


async def test_agent_exception_fails_task_with_sanitized_message(stub, caplog):
    task = (await stub.SendMessage(send("raise"))).task
    assert task.status.state == pb.TASK_STATE_FAILED
    text = task.status.message.parts[0].text
    assert "ref" in text and "/etc/passwd" not in text and "RuntimeError" not in text
    ref = text.split("ref ")[1].rstrip(").")
    assert any(ref in r.getMessage() for r in caplog.records)
    # The server keeps serving.
    assert (await stub.SendMessage(send("echo ok"))).task.status.state == pb.TASK_STATE_COMPLETED


async def test_agent_protocol_violation_does_not_change_settled_task(stub):
    task = (await stub.SendMessage(send("break"))).task
    assert task.status.state == pb.TASK_STATE_COMPLETED
    await asyncio.sleep(0.05)
    again = await stub.GetTask(pb.GetTaskRequest(id=task.id))
    assert again.status.state == pb.TASK_STATE_COMPLETED


async def test_fail_and_reject_states(stub):
    assert (await stub.SendMessage(send("fail"))).task.status.state == pb.TASK_STATE_FAILED
    assert (await stub.SendMessage(send("reject"))).task.status.state == pb.TASK_STATE_REJECTED


async def test_version_metadata(stub):
    ok = await stub.SendMessage(send("echo"), metadata=(("a2a-version", "1.0"),))
    assert ok.task.status.state == pb.TASK_STATE_COMPLETED
    err = await expect_error(
        stub.SendMessage(send("echo"), metadata=(("a2a-version", "0.3"),)),
        C.FAILED_PRECONDITION,
        "VERSION_NOT_SUPPORTED",
    )
    assert "1.0" in err.details() and "A2A-Version" in err.details()
    await expect_error(
        stub.GetTask(pb.GetTaskRequest(id="x"), metadata=(("a2a-version", "2.0"),)),
        C.FAILED_PRECONDITION,
        "VERSION_NOT_SUPPORTED",
    )


async def test_get_task_not_found_and_required_id(stub):
    await expect_error(stub.GetTask(pb.GetTaskRequest(id="nope")), C.NOT_FOUND, "TASK_NOT_FOUND")
    err = await expect_error(
        stub.GetTask(pb.GetTaskRequest()), C.INVALID_ARGUMENT, "INVALID_PARAMS"
    )
    assert error_details(err)[1] == [("id", "is required")]


async def test_push_config_crud(stub):
    task = (await stub.SendMessage(send("input"))).task
    cfg = pb.TaskPushNotificationConfig(
        task_id=task.id, id="hook-1", url="https://example.com/hook", token="t"
    )
    created = await stub.CreateTaskPushNotificationConfig(cfg)
    assert created.id == "hook-1" and created.url == cfg.url
    generated = await stub.CreateTaskPushNotificationConfig(
        pb.TaskPushNotificationConfig(task_id=task.id, url="https://example.com/2")
    )
    assert generated.id
    got = await stub.GetTaskPushNotificationConfig(
        pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
    )
    assert got.token == "t"
    listed = await stub.ListTaskPushNotificationConfigs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert {c.id for c in listed.configs} == {"hook-1", generated.id}
    page = await stub.ListTaskPushNotificationConfigs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task.id, page_size=1)
    )
    assert len(page.configs) == 1 and page.next_page_token
    await stub.DeleteTaskPushNotificationConfig(
        pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
    )
    await stub.DeleteTaskPushNotificationConfig(
        pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
    )
    await expect_error(
        stub.GetTaskPushNotificationConfig(
            pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
        ),
        C.NOT_FOUND,
        "TASK_NOT_FOUND",
    )
    await expect_error(
        stub.CreateTaskPushNotificationConfig(
            pb.TaskPushNotificationConfig(task_id="missing", url="https://e.com")
        ),
        C.NOT_FOUND,
        "TASK_NOT_FOUND",
    )
    err = await expect_error(
        stub.CreateTaskPushNotificationConfig(
            pb.TaskPushNotificationConfig(task_id=task.id, url="ftp://e.com")
        ),
        C.INVALID_ARGUMENT,
        "INVALID_PARAMS",
    )
    assert error_details(err)[1][0][0] == "url"


async def test_push_disabled_is_push_not_supported(start_service):
    service = await start_service(store="memory:", agent="echo", push_notifications=False)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        from gen import a2a_pb2_grpc

        s = a2a_pb2_grpc.A2AServiceStub(channel)
        await expect_error(
            s.ListTaskPushNotificationConfigs(
                pb.ListTaskPushNotificationConfigsRequest(task_id="t")
            ),
            C.FAILED_PRECONDITION,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        )
        req = send("echo")
        req.configuration.task_push_notification_config.url = "https://example.com"
        await expect_error(
            s.SendMessage(req), C.FAILED_PRECONDITION, "PUSH_NOTIFICATION_NOT_SUPPORTED"
        )


async def test_extended_card_not_offered_by_default(stub):
    await expect_error(
        stub.GetExtendedAgentCard(pb.GetExtendedAgentCardRequest()),
        C.FAILED_PRECONDITION,
        "UNSUPPORTED_OPERATION",
    )


async def test_extended_card_configured(start_service):
    service = await start_service(
        store="memory:",
        agent="echo",
        extended_card=True,
        extended_skills=[{"id": "admin", "name": "Admin", "description": "d", "tags": ["x"]}],
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        from gen import a2a_pb2_grpc

        card = await a2a_pb2_grpc.A2AServiceStub(channel).GetExtendedAgentCard(
            pb.GetExtendedAgentCardRequest()
        )
        assert "admin" in [s.id for s in card.skills] and "echo" in [s.id for s in card.skills]
        assert card.capabilities.extended_agent_card


async def test_extended_card_enabled_without_content(start_service):
    service = await start_service(store="memory:", agent="echo", extended_card=True)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        from gen import a2a_pb2_grpc

        await expect_error(
            a2a_pb2_grpc.A2AServiceStub(channel).GetExtendedAgentCard(
                pb.GetExtendedAgentCardRequest()
            ),
            C.FAILED_PRECONDITION,
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        )


async def test_required_extension(start_service):
    service = await start_service(
        store="memory:", agent="echo", required_extensions=["urn:x:ext:v1"]
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        from gen import a2a_pb2_grpc

        s = a2a_pb2_grpc.A2AServiceStub(channel)
        await expect_error(
            s.SendMessage(send("echo")), C.FAILED_PRECONDITION, "EXTENSION_SUPPORT_REQUIRED"
        )
        ok = await s.SendMessage(
            send("echo"), metadata=(("a2a-extensions", "urn:other, urn:x:ext:v1"),)
        )
        assert ok.task.status.state == pb.TASK_STATE_COMPLETED


async def test_requested_extensions_reach_the_agent(stub):
    resp = await stub.SendMessage(send("exts"), metadata=(("a2a-extensions", "urn:a:v1,urn:b:v2"),))
    assert resp.task.artifacts[0].parts[0].text == "urn:a:v1 urn:b:v2"


async def test_credentials_never_reach_the_agent(stub):
    metadata = (("authorization", "Bearer s3cret"), ("x-api-key", "k"), ("x-trace", "t1"))
    resp = await stub.SendMessage(send("meta"), metadata=metadata)
    keys = resp.task.artifacts[0].parts[0].text.split()
    assert "x-trace" in keys
    assert "authorization" not in keys and "x-api-key" not in keys
