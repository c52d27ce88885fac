"""Stored file artifacts end to end: a real server, its gRPC port and HTTP gateway, httpx and
the a2a-sdk client. The artifact carries a url part with its size and hash (never the bytes,
in the task, a stream or a push); the download route serves the bytes to the task's owner
in its tenant only, with ETag / 304, ranges and Content-Disposition; the bytes survive a
restart; the same bytes are stored once."""

from __future__ import annotations

import base64
import hashlib
import pathlib

import grpc
import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import a2a_pb2 as sdk
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.grpc_util import drain
from tests.push_util import Receiver, eventually
from tests.security_util import TOKENS, bearer_settings

CONTENT = "hello stored world"
SHA = hashlib.sha256(CONTENT.encode()).hexdigest()


def send_request(text: str, tenant: str = "") -> pb.SendMessageRequest:
    return pb.SendMessageRequest(message=user_message(text), tenant=tenant)


def bearer(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name]}"),)


def the_part(task: pb.Task) -> pb.Part:
    [artifact] = task.artifacts
    [part] = artifact.parts
    return part


def ours(part: pb.Part) -> dict:
    return json_format.MessageToDict(part.metadata)["a2a_service"]


async def file_service(start_service, **extra):
    service = await start_service(
        **{"http_port": 0, "agent": "tests.agents:ScriptedAgent", **extra}
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    return service, channel, a2a_pb2_grpc.A2AServiceStub(channel)


def blob_count(service) -> int:
    return service.files.blobs.count()


async def test_the_artifact_is_a_url_part_with_size_and_hash(start_service):
    service, channel, stub = await file_service(start_service, store="memory:")
    async with channel:
        task = (await stub.SendMessage(send_request(f"file report.txt {CONTENT}"))).task
        got = await stub.GetTask(pb.GetTaskRequest(id=task.id))
        events = await drain(stub.SendStreamingMessage(send_request(f"file report.txt {CONTENT}")))
    assert task.status.state == pb.TASK_STATE_COMPLETED
    for seen in (task, got):
        part = the_part(seen)
        assert part.WhichOneof("content") == "url"
        assert part.url == f"http://127.0.0.1:{service.http_port}/tasks/{task.id}/files/{SHA}"
        assert part.filename == "report.txt" and part.media_type == "text/plain"
        assert ours(part) == {"byteSize": len(CONTENT), "sha256": SHA}
        assert seen.artifacts[0].name == "report.txt"
    updates = [e.artifact_update for e in events if e.HasField("artifact_update")]
    [update] = updates
    assert update.artifact.parts[0].WhichOneof("content") == "url"
    assert ours(update.artifact.parts[0])["sha256"] == SHA
    assert blob_count(service) == 1  # two tasks, the same bytes: stored once
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        big = (await stub.SendMessage(send_request("bytes 4096"))).task
        big_events = await drain(stub.SendStreamingMessage(send_request("bytes 4096")))
        got_big = await stub.GetTask(pb.GetTaskRequest(id=big.id))
    assert blob_count(service) == 2
    pattern = bytes(range(256))
    for message in (big, got_big, *big_events):  # neither the task nor a stream has the bytes
        assert pattern not in message.SerializeToString()
        assert base64.b64encode(pattern[:48]) not in json_format.MessageToJson(message).encode()
    assert ours(the_part(got_big))["byteSize"] == 4096


async def test_download_headers_etag_and_head(start_service):
    service, channel, stub = await file_service(start_service, store="memory:")
    async with channel, httpx.AsyncClient(timeout=10) as http:
        task = (await stub.SendMessage(send_request(f"file report.txt {CONTENT}"))).task
        url = the_part(task).url
        got = await http.get(url)
        assert got.status_code == 200 and got.content == CONTENT.encode()
        assert got.headers["content-type"].startswith("text/plain")
        assert got.headers["content-length"] == str(len(CONTENT))
        assert got.headers["etag"] == f'"{SHA}"'
        assert got.headers["content-disposition"] == 'attachment; filename="report.txt"'
        assert got.headers["accept-ranges"] == "bytes"
        assert got.headers["x-content-type-options"] == "nosniff"
        assert hashlib.sha256(got.content).hexdigest() == SHA
        head = await http.head(url)
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == str(len(CONTENT))
        for tag in (f'"{SHA}"', f'W/"{SHA}"', f'"other", "{SHA}"', "*"):
            cached = await http.get(url, headers={"If-None-Match": tag})
            assert cached.status_code == 304 and cached.content == b"", tag
            assert cached.headers["etag"] == f'"{SHA}"'
        fresh = await http.get(url, headers={"If-None-Match": '"something-else"'})
        assert fresh.status_code == 200 and fresh.content == CONTENT.encode()


async def test_range_requests(start_service):
    service, channel, stub = await file_service(start_service, store="memory:")
    async with channel, httpx.AsyncClient(timeout=10) as http:
        task = (await stub.SendMessage(send_request("bytes 1000"))).task
        url = the_part(task).url
        data = bytes(range(256)) * 3 + bytes(range(232))
        first = await http.get(url, headers={"Range": "bytes=0-9"})
        assert first.status_code == 206 and first.content == data[:10]
        assert first.headers["content-range"] == "bytes 0-9/1000"
        assert first.headers["content-length"] == "10"
        suffix = await http.get(url, headers={"Range": "bytes=-100"})
        assert suffix.status_code == 206 and suffix.content == data[-100:]
        assert suffix.headers["content-range"] == "bytes 900-999/1000"
        open_ended = await http.get(url, headers={"Range": "bytes=990-"})
        assert open_ended.status_code == 206 and open_ended.content == data[990:]
        outside = await http.get(url, headers={"Range": "bytes=1000-2000"})
        assert outside.status_code == 416
        assert outside.headers["content-range"] == "bytes */1000"
        if_range = await http.get(url, headers={"Range": "bytes=0-9", "If-Range": '"stale"'})
        assert if_range.status_code == 200 and if_range.content == data  # changed: whole file
        same = await http.get(
            url, headers={"Range": "bytes=0-9", "If-Range": first.headers["etag"]}
        )
        assert same.status_code == 206 and same.content == data[:10]
        assert the_part(task).media_type == "application/octet-stream"


async def test_only_the_owner_in_its_tenant_downloads(start_service):
    service, channel, stub = await file_service(start_service, store="memory:", **bearer_settings())
    async with channel, httpx.AsyncClient(timeout=10) as http:
        task = (
            await stub.SendMessage(
                send_request(f"file a.txt {CONTENT}", tenant="acme"), metadata=bearer("alice")
            )
        ).task
        url = the_part(task).url
        assert url.endswith(f"/acme/tasks/{task.id}/files/{SHA}")
        alice = {"Authorization": f"Bearer {TOKENS['alice']}"}
        owner = await http.get(url, headers=alice)
        assert owner.status_code == 200 and owner.content == CONTENT.encode()

        anonymous = await http.get(url)
        assert anonymous.status_code == 401

        # Another principal, and the owner under another tenant or none: the 404 of GetTask.
        other = await http.get(url, headers={"Authorization": f"Bearer {TOKENS['bob']}"})
        base = f"http://127.0.0.1:{service.http_port}"
        no_tenant = await http.get(f"{base}/tasks/{task.id}/files/{SHA}", headers=alice)
        other_tenant = await http.get(f"{base}/beta/tasks/{task.id}/files/{SHA}", headers=alice)
        rest_get = await http.get(
            f"{base}/beta/tasks/{task.id}", headers={**alice, "A2A-Version": "1.0"}
        )
        assert rest_get.status_code == 404
        for refused in (other, no_tenant, other_tenant):
            assert refused.status_code == 404
            assert refused.json() == rest_get.json()  # exactly as for a task it cannot see
            assert CONTENT.encode() not in refused.content

        # The owner asking for a hash the task has no file of: 404 too.
        unknown = await http.get(url.replace(SHA, "0" * 64), headers=alice)
        malformed = await http.get(url.replace(SHA, "not-a-hash"), headers=alice)
        assert unknown.status_code == 404 and malformed.status_code == 404
        posted = await http.post(url, headers=alice)
        assert posted.status_code in (404, 405)


async def test_a_hash_stored_by_another_task_is_not_served_through_mine(start_service):
    service, channel, stub = await file_service(start_service, store="memory:")
    async with channel, httpx.AsyncClient(timeout=10) as http:
        theirs = (await stub.SendMessage(send_request(f"file a.txt {CONTENT}"))).task
        mine = (await stub.SendMessage(send_request("file b.txt other bytes"))).task
        url = the_part(mine).url.replace(ours(the_part(mine))["sha256"], SHA)
        assert (await http.get(url)).status_code == 404
        assert (await http.get(the_part(theirs).url)).status_code == 200


async def test_unicode_and_hostile_file_names(start_service):
    service, channel, stub = await file_service(start_service, store="memory:")
    async with channel, httpx.AsyncClient(timeout=10) as http:
        task = (await stub.SendMessage(send_request("file ../../Bericht-Übersicht.csv x"))).task
        part = the_part(task)
        assert part.filename == "Bericht-Übersicht.csv" and part.media_type == "text/csv"
        got = await http.get(part.url)
        assert got.headers["content-disposition"] == (
            "attachment; filename*=utf-8''Bericht-%C3%9Cbersicht.csv"
        )
        quoted = (await stub.SendMessage(send_request('file a"b;c.txt x'))).task
        got = await http.get(the_part(quoted).url)
        assert got.headers["content-disposition"] == "attachment; filename*=utf-8''a%22b%3Bc.txt"


async def test_survives_a_restart(start_service, tmp_path):
    store = f"sqlite:{tmp_path / 'tasks.db'}"
    first, channel, stub = await file_service(start_service, store=store)
    async with channel:
        task = (await stub.SendMessage(send_request(f"file keep.txt {CONTENT}"))).task
    await first.stop()
    second = await start_service(http_port=0, agent="tests.agents:ScriptedAgent", store=store)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{second.grpc_port}") as channel:
        got = await a2a_pb2_grpc.A2AServiceStub(channel).GetTask(pb.GetTaskRequest(id=task.id))
    url = the_part(got).url.replace(str(first.http_port), str(second.http_port), 1)
    async with httpx.AsyncClient(timeout=10) as http:
        downloaded = await http.get(url)
    assert downloaded.status_code == 200 and downloaded.content == CONTENT.encode()
    files = pathlib.Path(second.settings.data_dir) / "files" / "objects" / SHA[:2] / SHA
    assert files.read_bytes() == CONTENT.encode()


async def test_public_url_and_file_urls(start_service, tmp_path):
    service, channel, stub = await file_service(
        start_service,
        store="memory:",
        public_url="https://a2a.example.test/base/",
        file_artifact_local_urls=True,
        file_artifact_dir=str(tmp_path / "shared-files"),
    )
    async with channel:
        task = (await stub.SendMessage(send_request(f"file a.txt {CONTENT}"))).task
    part = the_part(task)
    assert part.url == f"https://a2a.example.test/base/tasks/{task.id}/files/{SHA}"
    local = ours(part)["fileUrl"]
    path = tmp_path / "shared-files" / "objects" / SHA[:2] / SHA
    assert local == path.as_uri() and path.read_bytes() == CONTENT.encode()


async def test_push_notifications_carry_the_url_not_the_bytes(start_service):
    receiver = await Receiver().start()
    try:
        service, channel, stub = await file_service(
            start_service, store="memory:", push_allow_networks=["127.0.0.0/8"]
        )
        request = send_request("bytes 4096")
        request.configuration.task_push_notification_config.url = receiver.url
        async with channel:
            task = (await stub.SendMessage(request)).task

        def artifact_pushed() -> bool:
            return any("artifactUpdate" in r.body for r in receiver.accepted())

        await eventually(artifact_pushed, what="the artifact update pushed")
        [pushed] = [r.body for r in receiver.accepted() if "artifactUpdate" in r.body]
        [part] = pushed["artifactUpdate"]["artifact"]["parts"]
        assert part["url"] == the_part(task).url and "raw" not in part
        assert part["metadata"]["a2a_service"] == ours(the_part(task))
        encoded = base64.b64encode(bytes(range(256))[:48]).decode()
        for r in receiver.requests:
            assert encoded not in str(r.body)
    finally:
        await receiver.stop()


async def test_the_sdk_client_sees_the_url_part_and_downloads(start_service):
    service, channel, _ = await file_service(start_service, store="memory:")
    await channel.close()
    base = f"http://127.0.0.1:{service.http_port}"
    async with httpx.AsyncClient(timeout=10) as http:
        config = ClientConfig(
            streaming=False, supported_protocol_bindings=["JSONRPC"], httpx_client=http
        )
        client = await create_client(base, config)
        request = sdk.SendMessageRequest(message=user_message(f"file sdk.txt {CONTENT}"))
        [event] = [e async for e in client.send_message(request)]
        [part] = event.task.artifacts[0].parts
        assert part.WhichOneof("content") == "url" and part.filename == "sdk.txt"
        assert part.metadata["a2a_service"]["sha256"] == SHA
        assert part.metadata["a2a_service"]["byteSize"] == len(CONTENT)
        got = await http.get(part.url)
        assert hashlib.sha256(got.content).hexdigest() == part.metadata["a2a_service"]["sha256"]


async def test_a_server_without_a_gateway_still_stores_files(start_service):
    service, channel, stub = await file_service(start_service, store="memory:", http_port=-1)
    async with channel:
        task = (await stub.SendMessage(send_request(f"file a.txt {CONTENT}"))).task
    assert the_part(task).url == f"/tasks/{task.id}/files/{SHA}"  # no address known: the path
    assert blob_count(service) == 1


async def test_a_draining_server_refuses_downloads_with_503(start_service):
    service, channel, stub = await file_service(start_service, store="memory:")
    async with channel, httpx.AsyncClient(timeout=10) as http:
        task = (await stub.SendMessage(send_request(f"file a.txt {CONTENT}"))).task
        service.gate.close()  # what the drain does after its grace period
        refused = await http.get(the_part(task).url)
    assert refused.status_code == 503 and refused.headers["retry-after"]
    assert CONTENT.encode() not in refused.content


async def test_no_message_can_point_a_file_url_at_the_stored_files(start_service, tmp_path):
    shared = tmp_path / "shared-files"
    service, channel, stub = await file_service(
        start_service,
        store="memory:",
        workspace_roots=[str(tmp_path)],  # the blob directory lies inside a workspace root
        file_artifact_dir=str(shared),
    )
    async with channel:
        await stub.SendMessage(send_request(f"file a.txt {CONTENT}"))
        blob = shared / "objects" / SHA[:2] / SHA
        allowed = tmp_path / "notes.txt"
        allowed.write_text("mine")
        for path, ok in ((allowed, True), (blob, False)):
            message = user_message("echo")
            message.parts.add(url=path.as_uri(), media_type="text/plain")
            call = stub.SendMessage(pb.SendMessageRequest(message=message))
            if ok:
                assert (await call).task.status.state == pb.TASK_STATE_COMPLETED
            else:
                try:
                    await call
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert str(shared) not in (exc.details() or "")
                else:
                    raise AssertionError("a file:// part reached the stored files")


async def test_retention_deletes_a_purged_tasks_files_but_not_shared_ones(start_service):
    """A finished task removed by retention takes its stored files with it; bytes another
    (kept) task stored too stay, and so does that task's download."""
    service, channel, stub = await file_service(start_service, task_retention="1s")
    async with channel, httpx.AsyncClient() as http:
        gone = (await stub.SendMessage(send_request("file gone.txt only-in-the-purged-task"))).task
        shared = (await stub.SendMessage(send_request(f"file a.txt {CONTENT}"))).task
        kept = (await stub.SendMessage(send_request(f"keepfile b.txt {CONTENT}"))).task
        assert kept.status.state == pb.TASK_STATE_INPUT_REQUIRED  # unfinished: never purged
        gone_url, shared_url = the_part(gone).url, the_part(shared).url
        assert (await http.get(gone_url)).status_code == 200
        assert blob_count(service) == 2

        async def purged() -> bool:
            try:
                await stub.GetTask(pb.GetTaskRequest(id=shared.id))
            except grpc.aio.AioRpcError as err:
                return err.code() == grpc.StatusCode.NOT_FOUND
            return False

        await eventually(purged, 20, "the finished tasks purged")
        await eventually(lambda: blob_count(service) == 1, 10, "the purged task's blob deleted")
        assert (await http.get(gone_url)).status_code == 404
        assert (await http.get(shared_url)).status_code == 404  # its task is gone
        still = await http.get(the_part(kept).url)
        assert still.status_code == 200 and still.text == CONTENT
