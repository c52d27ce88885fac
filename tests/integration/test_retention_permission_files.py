"""Retention of a task that went through the permission side-band and stored files, on
a real server: once purged, the task (its audit with it) is gone on every read, its stored
file's bytes are released and the download route answers 404."""

from __future__ import annotations

import httpx

from gen import a2a_pb2 as pb
from tests.permission_util import Client, Refused, answer, audit, text_message
from tests.push_util import eventually

PROGRAM = "sh -c 'printf made > \"$A2A_OUTPUT_DIR/out.txt\"; cat'"


async def test_a_purged_task_takes_its_audit_and_files_with_it(start_service):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="command",
        command=PROGRAM,
        command_approval=True,
        task_retention="1s",
    )
    client = Client.of(service, "HTTP+JSON")
    try:
        paused = await client.send(text_message("hello"))
        done = await client.send(answer(paused, "allow_once"))
        assert done.status.state == pb.TASK_STATE_COMPLETED
        assert [r["decision"] for r in audit(done)] == ["allow_once"]
        [url] = [
            a.parts[0].url for a in done.artifacts if a.parts[0].WhichOneof("content") == "url"
        ]
        async with httpx.AsyncClient() as http:
            assert (await http.get(url)).content == b"made"
        assert service.files.blobs.count() == 1

        async def purged() -> bool:
            try:
                await client.get(done.id)
            except Refused as refused:
                assert refused.reason == "TASK_NOT_FOUND"
                return True
            return False

        await eventually(purged, 20, "the finished task purged")
        await eventually(lambda: service.files.blobs.count() == 0, 10, "its file released")
        async with httpx.AsyncClient() as http:
            assert (await http.get(url)).status_code == 404
    finally:
        await client.close()
