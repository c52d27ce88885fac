"""Isolation: tasks belong to the principal that created them, under the tenant they were
created in. The matrix: two callers x two tenants x every operation that names a task, over
all three bindings (the a2a-sdk client, authenticated from the card with bearer tokens).

A task seen from any other (caller, tenant) is TaskNotFoundError -- exactly the error, and
the same message, as for a task id that never existed -- and nothing the other caller tries
changes it. ListTasks shows each caller only its own tasks of that tenant."""

from __future__ import annotations

import uuid

import pytest
from a2a.types import a2a_pb2 as sdk
from a2a.utils import errors as sdk_errors

from tests.conftest import user_message
from tests.security_util import BINDINGS, TOKENS, bearer_settings, sdk_clients

TENANTS = ["acme", "globex"]
CALLERS = ["alice", "bob"]
OWNER = "alice"


async def _collect(iterator):
    return [event async for event in iterator]


# Each operation: (name, async fn(client, tenant, task_id)). ListTasks is checked separately.
async def _get(c, tenant, task_id):
    return await c.unary.get_task(sdk.GetTaskRequest(tenant=tenant, id=task_id))


async def _cancel(c, tenant, task_id):
    return await c.unary.cancel_task(sdk.CancelTaskRequest(tenant=tenant, id=task_id))


async def _subscribe(c, tenant, task_id):
    """The first event only: a paused task's subscription stays open until the task ends."""
    stream = c.streaming.subscribe(sdk.SubscribeToTaskRequest(tenant=tenant, id=task_id))
    try:
        return await stream.__anext__()
    finally:
        await stream.aclose()


async def _send_to_task(c, tenant, task_id):
    message = user_message("the answer", task_id=task_id)
    return await _collect(
        c.unary.send_message(sdk.SendMessageRequest(tenant=tenant, message=message))
    )


async def _stream_to_task(c, tenant, task_id):
    message = user_message("the answer", task_id=task_id)
    return await _collect(
        c.streaming.send_message(sdk.SendMessageRequest(tenant=tenant, message=message))
    )


async def _create_push(c, tenant, task_id):
    return await c.unary.create_task_push_notification_config(
        sdk.TaskPushNotificationConfig(
            tenant=tenant, task_id=task_id, id="intruder", url="https://example.com/cb"
        )
    )


async def _get_push(c, tenant, task_id):
    return await c.unary.get_task_push_notification_config(
        sdk.GetTaskPushNotificationConfigRequest(tenant=tenant, task_id=task_id, id="c1")
    )


async def _list_push(c, tenant, task_id):
    return await c.unary.list_task_push_notification_configs(
        sdk.ListTaskPushNotificationConfigsRequest(tenant=tenant, task_id=task_id)
    )


async def _delete_push(c, tenant, task_id):
    return await c.unary.delete_task_push_notification_config(
        sdk.DeleteTaskPushNotificationConfigRequest(tenant=tenant, task_id=task_id, id="c1")
    )


OPERATIONS = [
    ("GetTask", _get),
    ("SubscribeToTask", _subscribe),
    ("CreateTaskPushNotificationConfig", _create_push),
    ("GetTaskPushNotificationConfig", _get_push),
    ("ListTaskPushNotificationConfigs", _list_push),
    ("DeleteTaskPushNotificationConfig", _delete_push),
    ("SendMessage", _send_to_task),
    ("SendStreamingMessage", _stream_to_task),
    ("CancelTask", _cancel),
]


def _normalized(exc: BaseException, task_id: str) -> str:
    return str(exc).replace(task_id, "<id>")


@pytest.mark.parametrize("binding", BINDINGS)
async def test_isolation_matrix(start_service, binding):
    service = await start_service(
        http_port=0, agent="tests.agents:ScriptedAgent", **bearer_settings()
    )
    clients = {
        who: await sdk_clients(service, binding, credentials={"bearer": TOKENS[who]})
        for who in CALLERS
    }
    try:
        # The owner's tasks, one per tenant, paused for input (so every operation applies), each
        # with a push config.
        tasks: dict[str, str] = {}
        for tenant in TENANTS:
            [event] = await _collect(
                clients[OWNER].unary.send_message(
                    sdk.SendMessageRequest(tenant=tenant, message=user_message("input more please"))
                )
            )
            assert event.task.status.state == sdk.TASK_STATE_INPUT_REQUIRED
            tasks[tenant] = event.task.id
            await clients[OWNER].unary.create_task_push_notification_config(
                sdk.TaskPushNotificationConfig(
                    tenant=tenant, task_id=event.task.id, id="c1", url="https://example.com/owner"
                )
            )
        [bobs] = await _collect(
            clients["bob"].unary.send_message(
                sdk.SendMessageRequest(tenant="acme", message=user_message("echo mine"))
            )
        )

        # ListTasks: each (caller, tenant) sees exactly its own.
        expected_lists = {
            ("alice", "acme"): {tasks["acme"]},
            ("alice", "globex"): {tasks["globex"]},
            ("bob", "acme"): {bobs.task.id},
            ("bob", "globex"): set(),
            ("alice", ""): set(),
            ("bob", ""): set(),
        }
        for (who, tenant), expected in expected_lists.items():
            listed = await clients[who].unary.list_tasks(sdk.ListTasksRequest(tenant=tenant))
            assert {t.id for t in listed.tasks} == expected and listed.total_size == len(
                expected
            ), (who, tenant)

        # Every foreign view of every task: TaskNotFoundError, indistinguishable from a missing task.
        failures = []
        for task_tenant, task_id in tasks.items():
            for who in CALLERS:
                for tenant in [*TENANTS, ""]:
                    if (who, tenant) == (OWNER, task_tenant):
                        continue
                    for name, operation in OPERATIONS:
                        try:
                            await operation(clients[who], tenant, task_id)
                        except sdk_errors.TaskNotFoundError as exc:
                            missing_id = str(uuid.uuid4())
                            try:
                                await operation(clients[who], tenant, missing_id)
                            except sdk_errors.TaskNotFoundError as missing:
                                if _normalized(exc, task_id) != _normalized(missing, missing_id):
                                    failures.append(
                                        f"{name} as {who}@{tenant!r}: message differs from a "
                                        f"missing task's: {exc} / {missing}"
                                    )
                        except Exception as exc:  # noqa: BLE001 - collected for the report
                            failures.append(
                                f"{name} as {who}@{tenant!r} on {task_tenant} task: "
                                f"{type(exc).__name__}: {exc}"
                            )
                        else:
                            failures.append(
                                f"{name} as {who}@{tenant!r} on {task_tenant} task: succeeded"
                            )
        assert not failures, "\n".join(failures)

        # Nothing the others tried changed the owner's tasks or configs.
        for tenant, task_id in tasks.items():
            task = await _get(clients[OWNER], tenant, task_id)
            assert task.status.state == sdk.TASK_STATE_INPUT_REQUIRED
            configs = await _list_push(clients[OWNER], tenant, task_id)
            assert [c.id for c in configs.configs] == ["c1"]

        # The owner, in the task's own tenant, reaches every operation (a control for the matrix):
        # each succeeds or fails for a reason other than not finding the task.
        for tenant, task_id in tasks.items():
            for name, operation in OPERATIONS:
                try:
                    await operation(clients[OWNER], tenant, task_id)
                except sdk_errors.TaskNotFoundError as exc:
                    pytest.fail(f"the owner cannot see its task with {name}: {exc}")
                except (sdk_errors.UnsupportedOperationError, sdk_errors.TaskNotCancelableError):
                    pass  # e.g. a follow-up after the task completed
            final = await _get(clients[OWNER], tenant, task_id)
            assert final.status.state == sdk.TASK_STATE_COMPLETED  # SendMessage continued it
    finally:
        for client in clients.values():
            await client.close()


async def test_anonymous_callers_share_nothing_with_authenticated_ones(start_service):
    """With authentication off every caller is the anonymous principal; tasks created then are
    not visible to a named principal later (and the reverse)."""
    from service.api import CallContext
    from service.protocol.errors import TaskNotFoundError

    service = await start_service(store="memory:", agent="tests.agents:ScriptedAgent")
    api = service.api
    anonymous, named = CallContext(), CallContext(principal="bearer:alice")
    from gen import a2a_pb2 as pb

    created = await api.SendMessage(
        pb.SendMessageRequest(message=user_message("echo hi")), anonymous
    )
    with pytest.raises(TaskNotFoundError):
        await api.GetTask(pb.GetTaskRequest(id=created.task.id), named)
    assert (await api.ListTasks(pb.ListTasksRequest(), named)).total_size == 0
    assert (await api.ListTasks(pb.ListTasksRequest(), anonymous)).total_size == 1
