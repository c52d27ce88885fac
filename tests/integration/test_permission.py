"""The permission side-band over all three bindings (grpcio stub, httpx JSON-RPC, httpx
REST) against the real server: the pause and its envelope, allow and deny, every wrong
answer refused with the task unchanged, the policy modes, and failing closed when the
decision cannot be recorded."""

from __future__ import annotations

import sqlite3

import pytest

from gen import a2a_pb2 as pb
from service.agent import NOT_RECORDED_MESSAGE
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

AGENT = "tests.permission_agents:PermissionAgent"
ENVELOPE_KEYS = {
    "schemaVersion",
    "kind",
    "requestTaskId",
    "contextId",
    "inputId",
    "toolUseId",
    "toolName",
    "title",
    "purpose",
    "effect",
    "target",
    "readOnly",
    "summary",
    "prompt",
    "options",
}


@pytest.fixture(params=BINDINGS)
async def client_for(request, start_service):
    """Factory: `client = await client_for(**settings)`: a server and a client of this binding."""
    clients: list[Client] = []

    async def make(**settings) -> Client:
        service = await start_service(
            http_port=0, store=settings.pop("store", "memory:"), agent=AGENT, **settings
        )
        clients.append(Client.of(service, request.param))
        clients[-1].service = service
        return clients[-1]

    yield make
    for client in clients:
        await client.close()


def status_updates(events: list[pb.StreamResponse]) -> list[pb.TaskStatusUpdateEvent]:
    return [e.status_update for e in events if e.WhichOneof("payload") == "status_update"]


def artifact_texts(task: pb.Task) -> list[str]:
    return [p.text for a in task.artifacts for p in a.parts]


async def test_the_pause_carries_the_envelope_and_allow_runs_the_tool(client_for):
    client = await client_for()
    events = await client.stream(text_message("tool shell /srv/data"))
    paused = status_updates(events)[-1]
    assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
    meta = ours(paused.metadata)
    env = meta["input"]
    assert set(env) == ENVELOPE_KEYS
    assert env["schemaVersion"] == 1 and env["kind"] == "permission"
    assert env["requestTaskId"] == paused.task_id and env["contextId"] == paused.context_id
    assert env["toolName"] == "shell" and env["target"] == "/srv/data" and env["readOnly"] is True
    assert env["title"] == "Use shell" and env["summary"] == "uses shell on /srv/data"
    assert [o["id"] for o in env["options"]] == ["allow_once", "deny"]
    assert meta["permission"] == {
        "autoApproved": False,
        "pending": True,
        "toolName": "shell",
        "toolUseId": env["toolUseId"],
    }
    assert paused.status.message.parts[0].text == env["prompt"]
    # The pending request is kept in the task itself: any reader of the task sees it.
    task = await client.get(paused.task_id)
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED and envelope_of(task) == env

    events = await client.stream(answer(task, "allow_once"))
    updates = status_updates(events)
    [ack] = [u for u in updates if "inputReceived" in ours(u.metadata)]
    assert ack.status.state == pb.TASK_STATE_WORKING
    [part] = ack.status.message.parts
    assert part.media_type == "application/json"
    assert dict(part.data.struct_value) == {
        "schemaVersion": 1,
        "kind": "permission_ack",
        "inputId": env["inputId"],
        "toolUseId": env["toolUseId"],
        "decision": "allow_once",
        "accepted": True,
    }
    received = ours(ack.metadata)["inputReceived"]
    assert received["inputId"] == env["inputId"] and received["decision"] == "allow_once"
    assert updates[-1].status.state == pb.TASK_STATE_COMPLETED
    done = await client.get(task.id)
    assert artifact_texts(done) == ["ran shell on /srv/data"]
    meta = ours(done.metadata)
    assert "input" not in meta and meta["permission"]["pending"] is False
    [record] = audit(done)
    assert record["decision"] == "allow_once" and record["auto"] is False
    assert record["policy"] == "ask" and record["caller"] == "" and record["tenant"] == ""
    assert record["taskId"] == task.id and record["inputId"] == env["inputId"]
    assert record["toolName"] == "shell" and record["decidedAt"].endswith("Z")


async def test_deny_rejects_without_running_the_tool(client_for):
    client = await client_for()
    task = await client.send(text_message("tool rm /"))
    done = await client.send(answer(task, "deny"))
    assert done.status.state == pb.TASK_STATE_REJECTED
    assert done.status.message.parts[0].text == "denied rm"
    assert artifact_texts(done) == []
    [record] = audit(done)
    assert record["decision"] == "deny" and record["toolName"] == "rm"


WRONG_ANSWERS = [
    ("wrong inputId", dict(inputId="not-the-one"), "message.parts[0].data.inputId"),
    ("wrong toolUseId", dict(toolUseId="other"), "message.parts[0].data.toolUseId"),
    ("wrong requestTaskId", dict(requestTaskId="other"), "message.parts[0].data.requestTaskId"),
    ("extra field", dict(note="please"), "message.parts[0].data.note"),
    ("missing inputId", dict(drop="inputId"), "message.parts[0].data.inputId"),
    ("missing decision", dict(drop="decision"), "message.parts[0].data.decision"),
    ("unknown decision", dict(decision="allow_always"), "message.parts[0].data.decision"),
    ("schemaVersion 2", dict(schemaVersion=2), "message.parts[0].data.schemaVersion"),
]


async def test_every_wrong_answer_is_refused_naming_the_field_and_changes_nothing(client_for):
    client = await client_for()
    task = await client.send(text_message("tool shell /srv"))
    before = await client.get(task.id)
    for name, change, field in WRONG_ANSWERS:
        change = dict(change)
        drop = change.pop("drop", "")
        decision = change.pop("decision", "allow_once")
        with pytest.raises(Refused) as refused:
            await client.send(answer(task, decision, drop=drop, **change))
        assert refused.value.reason == "INVALID_PARAMS", name
        assert refused.value.fields == [field], (name, refused.value)
        assert await client.get(task.id) == before, name  # still paused, unchanged
    # Text, or a second part, is not a decision: the agent asked for one, not for a chat.
    for message, field in (
        (text_message("yes, go ahead", task_id=task.id), "message.parts[0]"),
        (_with_text(answer(task)), "message.parts"),
    ):
        with pytest.raises(Refused) as refused:
            await client.send(message)
        assert refused.value.reason == "INVALID_PARAMS" and refused.value.fields == [field]
        assert "decision" in refused.value.text
    assert await client.get(task.id) == before
    done = await client.send(answer(task))  # the right answer still works afterwards
    assert done.status.state == pb.TASK_STATE_COMPLETED


def _with_text(message: pb.Message) -> pb.Message:
    message.parts.add(text="and also this")
    return message


async def test_a_reused_answer_is_refused_as_already_decided(client_for):
    client = await client_for()
    first = await client.send(text_message("twice shell"))
    second = await client.send(answer(first))
    assert second.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert envelope_of(second)["inputId"] != envelope_of(first)["inputId"]
    before = await client.get(second.id)
    with pytest.raises(Refused) as refused:
        await client.send(answer(first))  # the first request's answer, again
    assert refused.value.fields == ["message.parts[0].data.inputId"]
    assert "already decided" in refused.value.text
    assert await client.get(second.id) == before
    done = await client.send(answer(second))
    assert done.status.state == pb.TASK_STATE_COMPLETED
    assert artifact_texts(done) == ["ran shell on one", "ran shell on two"]
    assert [r["target"] for r in audit(done)] == ["one", "two"]
    with pytest.raises(Refused) as refused:  # a finished task takes no more messages at all
        await client.send(answer(second))
    assert refused.value.reason == "UNSUPPORTED_OPERATION"


async def test_a_permission_answer_to_a_plain_question_is_refused(client_for):
    client = await client_for()
    task = await client.send(text_message("ask"))
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    message = pb.Message(message_id="m-perm", role=pb.ROLE_USER, task_id=task.id)
    message.parts.add(media_type="application/json").data.struct_value.update(
        {"kind": "permission", "inputId": "x"}
    )
    with pytest.raises(Refused) as refused:
        await client.send(message)
    assert refused.value.fields == ["message.parts[0].data.inputId"]
    done = await client.send(text_message("blue", task_id=task.id))
    assert artifact_texts(done) == ["you said: blue"]


async def test_auto_approve_decides_without_asking_and_is_audited(client_for):
    client = await client_for(permission_mode="auto_approve")
    events = await client.stream(text_message("tool shell /srv"))
    updates = status_updates(events)
    assert updates[-1].status.state == pb.TASK_STATE_COMPLETED
    [decided] = [u for u in updates if "permission" in ours(u.metadata)]
    assert ours(decided.metadata)["permission"] == {
        "autoApproved": True,
        "pending": False,
        "toolName": "shell",
        "toolUseId": ours(decided.metadata)["permission"]["toolUseId"],
        "decision": "allow_once",
    }
    done = await client.get(updates[-1].task_id)
    assert artifact_texts(done) == ["ran shell on /srv (auto)"]
    [record] = audit(done)
    assert record["auto"] is True and record["policy"] == "auto_approve"


async def test_rules_allow_deny_or_ask_by_tool_name(client_for):
    client = await client_for(
        permission_mode="rules", permission_rules=["allow:read_*", "deny:rm*", "ask:shell"]
    )
    read = await client.send(text_message("tool read_file /etc/hosts"))
    assert read.status.state == pb.TASK_STATE_COMPLETED
    assert artifact_texts(read) == ["ran read_file on /etc/hosts (auto)"]
    assert audit(read)[0]["rule"] == "allow:read_*" and audit(read)[0]["auto"] is True
    removed = await client.send(text_message("tool rmdir /srv"))
    assert removed.status.state == pb.TASK_STATE_REJECTED
    assert audit(removed)[0]["decision"] == "deny" and audit(removed)[0]["rule"] == "deny:rm*"
    asked = await client.send(text_message("tool shell /srv"))
    assert asked.status.state == pb.TASK_STATE_INPUT_REQUIRED
    unmatched = await client.send(text_message("tool curl example.com"))
    assert unmatched.status.state == pb.TASK_STATE_REJECTED  # no rule: denied, nobody waits
    assert audit(unmatched)[0]["policy"] == "rules" and "rule" not in audit(unmatched)[0]


async def test_an_allow_that_cannot_be_recorded_is_not_acted_on(client_for, tmp_path):
    db = tmp_path / "tasks.db"
    client = await client_for(store=f"sqlite:{db}")
    task = await client.send(text_message("tool shell /srv"))
    # Break the real store for exactly the acknowledgement's commit: SQLite refuses any
    # event row that carries a permission_ack.
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TRIGGER refuse_ack BEFORE INSERT ON events "
            "WHEN instr(NEW.payload, CAST('permission_ack' AS BLOB)) > 0 "
            "BEGIN SELECT RAISE(ABORT, 'audit refused by the test'); END"
        )
    failed = await client.send(answer(task, "allow_once"))
    assert failed.status.state == pb.TASK_STATE_FAILED
    assert failed.status.message.parts[0].text == NOT_RECORDED_MESSAGE
    assert artifact_texts(failed) == []  # the tool never ran
    stored = await client.get(task.id)
    assert stored.status.state == pb.TASK_STATE_FAILED and audit(stored) == []
    assert "input" not in ours(stored.metadata)
    assert not any(
        p.data.struct_value.fields["kind"].string_value == "permission_ack"
        for m in stored.history
        for p in m.parts
        if p.WhichOneof("content") == "data"
    )
