"""Oversized parts and bodies refused as they arrive: a huge chunked body whose part is
too large for any media type (or whose size passes max_request_bytes) is answered with
the binding's error while the client is still sending it; v0.3 sends are refused from
their bytes on JSON-RPC, REST and gRPC alike."""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import pytest

from gen import a2a_v0_3_pb2 as v03
from gen import a2a_v0_3_pb2_grpc
from tests.grpc_util import error_details

KIB = 1024
TOTAL = 50 * 1024 * KIB  # what the client would send if nobody stopped it
CHUNK = 64 * KIB
LIMITS = {
    "input_max_text_bytes": 64 * KIB,
    "input_max_binary_bytes": 256 * KIB,
    "input_modes": ["text/plain", "application/json", "application/octet-stream"],
}


@pytest.fixture
async def svc(start_service):
    return await start_service(http_port=0, store="memory:", **LIMITS)


def huge(head: bytes, tail: bytes):
    """`head`, then 'x' up to TOTAL bytes, then `tail`: a generator of chunks."""
    yield head
    for _ in range(TOTAL // CHUNK):
        yield b"x" * CHUNK
    yield tail


async def chunked_post(port: int, path: str, chunks, headers: dict[str, str]):
    """POST `chunks` with chunked transfer encoding, stopping as soon as the answer has
    come: (status, JSON body, bytes sent, whether the generator was used up)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"POST {path} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    writer.write(head.encode())
    answer = asyncio.ensure_future(read_response(reader))
    sent, used_up = 0, True
    try:
        for chunk in chunks:
            if answer.done():
                used_up = False
                break
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
            try:
                await writer.drain()
            except ConnectionError:
                used_up = False
                break
            await asyncio.sleep(0)  # the answer is read between chunks
        else:
            writer.write(b"0\r\n\r\n")
        status, body = await answer
    finally:
        writer.close()
    return status, body, sent, used_up


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    length = int({k.lower(): v for k, v in headers.items()}["content-length"])
    return status, json.loads(await reader.readexactly(length))


JSON = {"A2A-Version": "1.0", "Content-Type": "application/json"}
V03 = {"Content-Type": "application/json"}  # no version: v0.3


async def test_a_huge_rest_send_is_refused_before_it_is_all_sent(svc):
    head = b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}, '
    status, body, sent, used_up = await chunked_post(
        svc.http_port,
        "/message:send",
        huge(head + b'{"data": {"blob": "', b'"}}]}}'),
        JSON,
    )
    assert status == 400, body
    assert not used_up and sent < TOTAL
    details = body["error"]["details"]
    violations = [v for d in details for v in d.get("fieldViolations", [])]
    assert violations[0]["field"] == "message.parts[1].data", body
    assert "may be at most 256.0 KiB" in violations[0]["description"]


async def test_a_huge_jsonrpc_send_is_refused_under_its_id_before_it_is_all_sent(svc):
    head = (
        b'{"jsonrpc": "2.0", "id": "big-1", "method": "SendMessage", "params": '
        b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "'
    )
    status, body, sent, used_up = await chunked_post(
        svc.http_port, "/", huge(head, b'"}]}}}'), JSON
    )
    assert status == 200 and body["id"] == "big-1", body
    assert body["error"]["code"] == -32602, body  # invalid params, as the policy says it
    assert "message.parts[0].text" in json.dumps(body["error"])
    assert not used_up and sent < TOTAL


async def test_a_huge_v03_jsonrpc_send_is_refused_as_v03_answers(svc):
    head = (
        b'{"jsonrpc": "2.0", "id": 9, "method": "message/send", "params": {"message": '
        b'{"kind": "message", "messageId": "m", "role": "user", "parts": '
        b'[{"kind": "file", "file": {"mimeType": "application/octet-stream", "bytes": "'
    )
    status, body, sent, used_up = await chunked_post(
        svc.http_port, "/", huge(head, b'"}}]}}}'), V03
    )
    assert status == 200 and body["id"] == 9, body
    assert body["error"]["code"] == -32602, body
    assert "message.parts[0].raw" in json.dumps(body["error"])
    assert not used_up and sent < TOTAL


async def test_a_huge_body_past_max_request_bytes_is_refused_as_it_passes(start_service):
    service = await start_service(http_port=0, store="memory:", max_request_bytes=1024 * KIB)
    head = b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "'
    status, body, sent, used_up = await chunked_post(
        service.http_port, "/", huge(head, b'"}}'), JSON
    )
    assert status == 413 and body["error"]["code"] == -32600, body
    assert not used_up and sent < TOTAL


async def test_a_huge_v03_rest_send_is_refused_before_it_is_all_sent(svc):
    head = (
        b'{"message": {"messageId": "m", "role": "ROLE_USER", "content": [{"text": "hi"}, '
        b'{"data": {"data": {"blob": "'
    )
    status, body, sent, used_up = await chunked_post(
        svc.http_port, "/v1/message:send", huge(head, b'"}}}]}}'), V03
    )
    assert status == 400, body
    assert "message.parts[1].data" in json.dumps(body), body
    assert not used_up and sent < TOTAL


async def test_a_v03_grpc_send_is_refused_from_its_wire_bytes(svc):
    request = v03.SendMessageRequest(
        request=v03.Message(
            message_id="m",
            role=v03.ROLE_USER,
            content=[
                v03.Part(text="hi"),
                v03.Part(
                    file=v03.FilePart(
                        file_with_bytes=b"\0" * (300 * KIB), mime_type="application/octet-stream"
                    )
                ),
            ],
        )
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
        stub = a2a_v0_3_pb2_grpc.A2AServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.SendMessage(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, violations = error_details(info.value)
    assert violations[0][0] == "message.parts[1].raw", violations
    # said as the wire walk says it (the policy would name the media type)
    assert "is 300.0 KiB; inline raw parts may be at most 256.0 KiB" in info.value.details()


async def test_a_large_send_within_the_limits_is_read_whole_and_served(svc):
    """Scanned as it arrives, and nothing found: the body read is the whole body."""
    data = {"rows": [{"name": "item", "value": n} for n in range(1500)]}  # ~50 KiB each
    parts = [{"data": data}, {"text": "and"}, {"data": data}]
    doc = {"message": {"messageId": "ok-1", "role": "ROLE_USER", "parts": parts}}
    raw = json.dumps(doc).encode()
    assert 64 * KIB < len(raw) < 256 * KIB  # past the text limit: scanned
    pieces = [raw[i : i + 5000] for i in range(0, len(raw), 5000)]
    status, body, sent, used_up = await chunked_post(svc.http_port, "/message:send", pieces, JSON)
    assert status == 200 and used_up and sent == len(raw), body
    assert body["task"]["status"]["state"] == "TASK_STATE_COMPLETED", body
    rpc = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": doc}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=30) as h:
        r = await h.post("/", content=json.dumps(rpc).encode(), headers=JSON)
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text[:300]
