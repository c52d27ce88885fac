"""Access lines where issue 13's routes meet issue 14's log, on a real server: a stored
file's download (found or not) and a permission answer (matched or refused) each write
one line naming the method, the task, the principal and the outcome; the command agent's
permission request masks secrets so that no log line at DEBUG carries them."""

from __future__ import annotations

import logging

import grpc
import httpx

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.permission_util import Client, Refused, answer, text_message
from tests.security_util import TOKENS, bearer_settings

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
CONTENT = "bytes-of-the-file"


def lines(caplog) -> list[dict]:
    return [r.fields for r in caplog.records if r.name.startswith("service.access")]


async def test_a_download_writes_one_line_with_its_task_and_outcome(start_service, caplog):
    caplog.set_level(logging.INFO, logger="service.access")
    service = await start_service(
        http_port=0, store="memory:", agent="tests.agents:ScriptedAgent", **bearer_settings()
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        request = pb.SendMessageRequest(message=user_message(f"file report.txt {CONTENT}"))
        metadata = (("authorization", ALICE["Authorization"]),)
        task = (await stub.SendMessage(request, metadata=metadata)).task
    url = task.artifacts[0].parts[0].url
    missing = url.rsplit("/", 1)[0] + "/" + "0" * 64
    caplog.clear()
    async with httpx.AsyncClient(timeout=20) as http:
        got = await http.get(url, headers=ALICE)
        not_found = await http.get(missing, headers=ALICE)
    assert got.status_code == 200 and got.text == CONTENT and not_found.status_code == 404
    downloads = [line for line in lines(caplog) if line["method"] == "DownloadFile"]
    assert [(d["outcome"], d["task_id"], d["principal"]) for d in downloads] == [
        ("OK", task.id, "bearer:alice"),
        ("TASK_NOT_FOUND", task.id, "bearer:alice"),
    ]
    assert all(d["binding"] == "rest" for d in downloads)


async def test_permission_answers_write_lines_and_no_secret_is_logged(start_service, caplog):
    caplog.set_level(logging.DEBUG)
    command = "sh -c cat --api-token s3cr3t DB_PASSWORD=hunter2"
    service = await start_service(
        http_port=0, store="memory:", agent="command", command=command, command_approval=True
    )
    client = Client.of(service, "JSONRPC")
    try:
        paused = await client.send(text_message("deploy with password=swordfish now"))
        assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
        try:
            await client.send(answer(paused, "allow_once", extra="field"))
        except Refused as refused:
            assert refused.reason == "INVALID_PARAMS"
        else:
            raise AssertionError("an answer with an extra field was accepted")
        done = await client.send(answer(paused, "deny"))
        assert done.status.state == pb.TASK_STATE_REJECTED
    finally:
        await client.close()
    sends = [line for line in lines(caplog) if line["method"] == "SendMessage"]
    assert [(s["outcome"], s["task_id"]) for s in sends] == [
        ("OK", paused.id),  # from the answer: the first message creates the task
        ("INVALID_PARAMS", paused.id),
        ("OK", paused.id),
    ]
    logged = "\n".join(r.getMessage() + repr(getattr(r, "fields", "")) for r in caplog.records)
    for secret in ("s3cr3t", "hunter2", "swordfish"):
        assert secret not in logged
