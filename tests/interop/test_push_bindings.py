"""Push configs through the official a2a-sdk 1.3.0 client on all three bindings (gRPC,
JSON-RPC, HTTP+JSON): hostile callbacks are InvalidParams everywhere, and a config
created on any binding gets the task's later events delivered."""

from __future__ import annotations

import pytest
from a2a.types import a2a_pb2 as sdk
from a2a.utils import errors as sdk_errors

from tests.interop.test_gateway_bindings import BINDINGS, _clients, collect, send
from tests.push_util import Receiver, eventually


@pytest.mark.parametrize("binding", BINDINGS)
async def test_push_configs_and_delivery_on_every_binding(start_service, binding):
    receiver = await Receiver().start()
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        push_allow_networks=["127.0.0.0/8"],
    )
    clients = await _clients(service, binding)
    try:
        task = (await send(clients.unary, "input tell me")).task
        for url in (
            "http://169.254.169.254/latest/meta-data/",
            "http://localhost:9/",
            "http://[::1]/",
        ):
            with pytest.raises(sdk_errors.InvalidParamsError):
                await clients.unary.create_task_push_notification_config(
                    sdk.TaskPushNotificationConfig(task_id=task.id, url=url)
                )
        created = await clients.unary.create_task_push_notification_config(
            sdk.TaskPushNotificationConfig(
                task_id=task.id,
                id="hook",
                url=receiver.url,
                token="tok-" + binding,
                authentication=sdk.AuthenticationInfo(scheme="Bearer", credentials="cred"),
            )
        )
        assert created.token == "tok-" + binding
        got = await clients.unary.get_task_push_notification_config(
            sdk.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook")
        )
        assert got.url == receiver.url and got.authentication.credentials == "cred"
        follow = sdk.SendMessageRequest(
            message=sdk.Message(
                message_id="m2", role=sdk.ROLE_USER, task_id=task.id, parts=[sdk.Part(text="42")]
            )
        )
        [done] = await collect(clients.unary.send_message(follow))
        assert done.task.status.state == sdk.TASK_STATE_COMPLETED
        await eventually(
            lambda: (
                receiver.requests
                and receiver.requests[-1]
                .body.get("statusUpdate", {})
                .get("status", {})
                .get("state")
                == "TASK_STATE_COMPLETED"
            ),
            what="completion",
        )
        assert {r.headers["x-a2a-notification-token"] for r in receiver.requests} == {
            "tok-" + binding
        }
        assert {r.headers["authorization"] for r in receiver.requests} == {"Bearer cred"}
        await clients.unary.delete_task_push_notification_config(
            sdk.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook")
        )
        listed = await clients.unary.list_task_push_notification_configs(
            sdk.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert list(listed.configs) == []
    finally:
        await clients.close()
        await receiver.stop()
