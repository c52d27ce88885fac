"""The permission side-band across a kill -9, for the built-in command agent, and the audit's
scoping: a task paused for a decision survives the crash with its envelope and the answer
starts a new turn that knows it is acting on a decided request; command_approval asks before
the program runs; only the task's owner reads the audit (the a2a-sdk client, bearer tokens,
three bindings)."""

from __future__ import annotations

import pytest
from a2a.types import a2a_pb2 as sdk
from a2a.utils import errors as sdk_errors
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service.agents.command import DENIED_MESSAGE
from tests.permission_util import (
    BINDINGS,
    Client,
    Refused,
    answer,
    audit,
    envelope_of,
    ours,
    text_message,
)
from tests.process import ServerProcess, free_port
from tests.security_util import TOKENS, bearer_settings, sdk_clients

AGENT = "tests.permission_agents:PermissionAgent"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_task_paused_for_permission_survives_kill9_and_the_answer_resumes_it(
    tmp_path, binding
):
    http_port = free_port()
    args = ("--data-dir", str(tmp_path / "data"), "--agent", AGENT, "--http-port", str(http_port))
    first = ServerProcess(*args).start()
    client = Client(binding, first.address, f"http://127.0.0.1:{http_port}")
    try:
        paused = await client.send(text_message("tool shell /srv/data"))
        assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
    finally:
        await client.close()
        first.kill9()

    second = ServerProcess(*args).start()
    client = Client(binding, second.address, f"http://127.0.0.1:{http_port}")
    try:
        stored = await client.get(paused.id)
        assert stored.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert envelope_of(stored) == envelope_of(paused)  # the envelope, verbatim
        with pytest.raises(Refused) as refused:  # still checked against the stored request
            await client.send(answer(paused, inputId="guessed"))
        assert refused.value.fields == ["message.parts[0].data.inputId"]
        assert await client.get(paused.id) == stored
        done = await client.send(answer(paused, "allow_once"))
        assert done.status.state == pb.TASK_STATE_COMPLETED
        # A new turn: the agent learned it is resuming a decided request and did not ask again.
        assert [p.text for a in done.artifacts for p in a.parts] == [
            "ran shell on /srv/data (resumed)"
        ]
        [record] = audit(done)
        assert (
            record["decision"] == "allow_once"
            and record["inputId"] == envelope_of(paused)["inputId"]
        )
    finally:
        await client.close()
        assert second.stop() == 0


async def _command_client(start_service, binding: str, command: str) -> Client:
    service = await start_service(
        http_port=0, store="memory:", agent="command", command=command, command_approval=True
    )
    return Client.of(service, binding)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_command_approval_allow_runs_the_program(start_service, tmp_path, binding):
    client = await _command_client(start_service, binding, "sh -c 'touch ran; tr a-z A-Z'")
    try:
        paused = await client.send(text_message("hello world", context_id="c1"))
        env = envelope_of(paused)
        assert env["toolName"] == "command"
        assert env["target"] == "sh -c 'touch ran; tr a-z A-Z'"
        assert env["summary"] == "stdin: 'hello world' (11 bytes)"
        workdir = tmp_path / "data" / "workspaces" / "ctx-c1"
        assert not (workdir / "ran").exists()  # nothing runs before the decision
        done = await client.send(answer(paused, "allow_once"))
        assert done.status.state == pb.TASK_STATE_COMPLETED
        assert "".join(p.text for p in done.artifacts[0].parts) == "HELLO WORLD"
        assert (workdir / "ran").exists()
    finally:
        await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_command_approval_deny_ends_the_task_without_running_it(
    start_service, tmp_path, binding
):
    client = await _command_client(
        start_service, binding, "sh -c 'touch ran; cat' --api-token s3cr3t DB_PASSWORD=hunter2"
    )
    try:
        paused = await client.send(
            text_message("deploy with password=swordfish now", context_id="c2")
        )
        env = envelope_of(paused)
        shown = json_format.MessageToJson(paused.status) + json_format.MessageToJson(
            paused.metadata
        )
        for secret in ("s3cr3t", "hunter2", "swordfish"):  # masked in the request it is shown
            assert secret not in shown
        assert "--api-token ***" in env["target"] and "DB_PASSWORD=***" in env["target"]
        assert "password=***" in env["summary"]
        done = await client.send(answer(paused, "deny"))
        assert done.status.state == pb.TASK_STATE_REJECTED
        assert done.status.message.parts[0].text == DENIED_MESSAGE
        assert not (tmp_path / "data" / "workspaces" / "ctx-c2" / "ran").exists()
        assert len(done.artifacts) == 0 and audit(done)[0]["decision"] == "deny"
    finally:
        await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_audit_is_read_by_the_tasks_owner_only(start_service, binding):
    service = await start_service(http_port=0, store="memory:", agent=AGENT, **bearer_settings())
    alice = await sdk_clients(
        service, binding, headers={"Authorization": f"Bearer {TOKENS['alice']}"}
    )
    bob = await sdk_clients(service, binding, headers={"Authorization": f"Bearer {TOKENS['bob']}"})
    try:
        [event] = [
            e
            async for e in alice.unary.send_message(
                sdk.SendMessageRequest(message=_sdk(text_message("tool shell /srv")))
            )
        ]
        paused = _ours(event.task)
        reply = _sdk(answer(_task(event.task), "allow_once"))
        with pytest.raises(sdk_errors.TaskNotFoundError):  # bob cannot answer it either
            [_ async for _ in bob.unary.send_message(sdk.SendMessageRequest(message=reply))]
        assert _ours(await alice.unary.get_task(sdk.GetTaskRequest(id=event.task.id))) == paused
        [_ async for _ in alice.unary.send_message(sdk.SendMessageRequest(message=reply))]
        done = await alice.unary.get_task(sdk.GetTaskRequest(id=event.task.id))
        [record] = audit(_task(done))
        assert record["caller"] == "bearer:alice" and record["decision"] == "allow_once"
        with pytest.raises(sdk_errors.TaskNotFoundError):
            await bob.unary.get_task(sdk.GetTaskRequest(id=event.task.id))
        listed = await bob.unary.list_tasks(sdk.ListTasksRequest())
        assert len(listed.tasks) == 0
    finally:
        await alice.close()
        await bob.close()


def _sdk(message: pb.Message) -> sdk.Message:
    return sdk.Message.FromString(message.SerializeToString())


def _task(task: sdk.Task) -> pb.Task:
    return pb.Task.FromString(task.SerializeToString())


def _ours(task: sdk.Task) -> dict:
    return ours(_task(task).metadata)
