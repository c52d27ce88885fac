"""JSON-RPC over a unix socket (`unix_socket`, docs/transports.md): the shared scenario set
with asyncio.open_unix_connection against a real server, the socket file's rules, peer
credentials as a principal, and a startup refused from the command line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import socket
import stat
import tempfile

import grpc
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.app.parts import StartupError
from tests.process import run_serve
from tests.security_util import TOKENS
from tests.transport_scenarios import (
    ALICE,
    CONNECTION_SCENARIOS,
    SCENARIO_SETTINGS,
    V1,
    FrameClient,
    drain_mid_stream,
    message,
    result,
)

READ_LIMIT = 16 * 1024 * 1024  # answers may be long lines; the client reads them whole


def exists(path: str) -> bool:
    return pathlib.Path(path).exists()


def write_file(path: str, text: str) -> None:
    pathlib.Path(path).write_text(text)


def read_file(path: str) -> str:
    return pathlib.Path(path).read_text()


class UnixClient(FrameClient):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__()
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, path: str) -> UnixClient:
        reader, writer = await asyncio.open_unix_connection(path, limit=READ_LIMIT)
        client = cls(reader, writer)
        client.start()
        return client

    async def write(self, raw: bytes) -> None:
        self.writer.write(raw + b"\n")
        await self.writer.drain()

    async def read(self) -> bytes | None:
        line = await self.reader.readline()
        return line or None

    async def aclose(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        await super().aclose()


@pytest.fixture
def socket_dir():
    """A short directory (a unix socket path may hold at most 107 bytes)."""
    path = tempfile.mkdtemp(prefix="a2a-unix-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def served(start_service, socket_dir):
    path = os.path.join(socket_dir, "a2a.sock")
    service = await start_service(store="memory:", unix_socket=path, **SCENARIO_SETTINGS)
    return service, path


@pytest.mark.parametrize("scenario", CONNECTION_SCENARIOS, ids=lambda s: s.__name__)
async def test_scenario(served, scenario):
    _, path = served
    await scenario(lambda: UnixClient.open(path))


async def test_drain_mid_stream_then_the_socket_is_gone(served):
    service, path = served
    stopping: list[asyncio.Task[None]] = []

    async def begin_drain() -> None:
        stopping.append(asyncio.create_task(service.stop()))

    await drain_mid_stream(lambda: UnixClient.open(path), begin_drain)
    await stopping[0]
    assert not exists(path)  # removed on exit
    with pytest.raises(OSError):
        await asyncio.open_unix_connection(path)


async def test_the_socket_file_mode_and_the_card(start_service, socket_dir):
    default = os.path.join(socket_dir, "default.sock")
    alone = await start_service(store="memory:", unix_socket=default, grpc_port=-1)
    assert stat.S_IMODE(os.stat(default).st_mode) == 0o600
    assert alone.grpc_server is None  # grpc_port -1: no gRPC, and none in the card
    bindings = [i.protocol_binding for i in alone.cards.public_card().supported_interfaces]
    assert bindings == ["urn:a2a-service:binding:unix"]
    group = os.path.join(socket_dir, "group.sock")
    service = await start_service(
        store="memory:",
        unix_socket=group,
        unix_socket_mode="0660",
        data_dir=os.path.join(socket_dir, "second"),
    )
    assert stat.S_IMODE(os.stat(group).st_mode) == 0o660
    card = service.cards.public_card()
    entry = next(
        i for i in card.supported_interfaces if i.protocol_binding.endswith("binding:unix")
    )
    assert entry.protocol_binding == "urn:a2a-service:binding:unix"
    assert entry.url == "unix:" + group and entry.protocol_version == "1.0"


async def test_a_stale_socket_is_replaced(start_service, socket_dir):
    path = os.path.join(socket_dir, "stale.sock")
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(path)  # a server that died without removing its socket
    left.close()
    await start_service(store="memory:", unix_socket=path)
    client = await UnixClient.open(path)
    try:
        answer = await client.call("SendMessage", message("hello"), V1)
        assert result(answer)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        await client.aclose()


async def test_a_file_that_is_not_a_socket_stops_startup(start_service, socket_dir):
    path = os.path.join(socket_dir, "notes.txt")
    write_file(path, "keep me")
    with pytest.raises(StartupError) as info:
        await start_service(store="memory:", unix_socket=path)
    assert str(info.value).startswith("unix_socket: ") and "not a socket" in str(info.value)
    assert read_file(path) == "keep me"  # untouched


async def test_a_socket_another_server_listens_on_stops_startup(start_service, socket_dir):
    path = os.path.join(socket_dir, "live.sock")
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(path)
    other.listen()
    try:
        with pytest.raises(StartupError) as info:
            await start_service(store="memory:", unix_socket=path)
        assert "another server is listening" in str(info.value)
        assert exists(path)  # still theirs
    finally:
        other.close()


def test_the_command_line_names_the_setting(socket_dir):
    path = os.path.join(socket_dir, "plain")
    with open(path, "w") as f:
        f.write("x")
    done = run_serve(
        "--grpc-port", "-1", "--http-port", "-1", "--store", "memory:",
        env={"A2A_UNIX_SOCKET": path, "A2A_DATA_DIR": socket_dir},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "cannot start: unix_socket: " in done.stderr and "not a socket" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


async def test_peer_credentials_vouch_for_a_mapped_user(start_service, socket_dir):
    """`UID=bearer:alice`: this process's user, sending no credential, is alice (her token over
    gRPC sees the task); a credential sent still wins (bob)."""
    path = os.path.join(socket_dir, "peer.sock")
    service = await start_service(
        store="memory:",
        unix_socket=path,
        unix_socket_peer_principals=[f"{os.getuid()}=bearer:alice"],
        **SCENARIO_SETTINGS,
    )
    client = await UnixClient.open(path)
    try:
        task = result(await client.call("SendMessage", message("input more"), V1))["task"]
        bobs = await client.call(
            "GetTask", {"id": task["id"]}, {**V1, "Authorization": f"Bearer {TOKENS['bob']}"}
        )
        assert bobs["error"]["code"] == -32001
    finally:
        await client.aclose()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        got = await a2a_pb2_grpc.A2AServiceStub(channel).GetTask(
            pb.GetTaskRequest(id=task["id"]),
            metadata=(("authorization", f"Bearer {TOKENS['alice']}"), ("a2a-version", "1.0")),
        )
    assert got.id == task["id"]


async def test_any_peer_is_its_uid_and_unmapped_peers_need_credentials(
    start_service, socket_dir, caplog
):
    anyone = os.path.join(socket_dir, "any.sock")
    await start_service(
        store="memory:", unix_socket=anyone, unix_socket_peer_principals=["*"], **SCENARIO_SETTINGS
    )
    client = await UnixClient.open(anyone)
    try:
        with caplog.at_level("INFO", logger="service.access"):
            assert "result" in await client.call("ListTasks", {}, V1)
    finally:
        await client.aclose()
    lines = [r for r in caplog.records if r.name == "service.access"]
    fields = [getattr(r, "fields", {}) for r in lines]
    assert any(
        f.get("principal") == f"uid:{os.getuid()}"
        and f.get("binding") == "unix"
        and f.get("client_address") == f"unix:uid={os.getuid()},pid={os.getpid()}"
        for f in fields
    ), fields
    # a mapping that names another user only: this one must send credentials
    other = os.path.join(socket_dir, "other.sock")
    await start_service(
        store="memory:",
        unix_socket=other,
        unix_socket_peer_principals=[f"{os.getuid() + 1}=someone"],
        data_dir=os.path.join(socket_dir, "second"),
        **SCENARIO_SETTINGS,
    )
    client = await UnixClient.open(other)
    try:
        refused = await client.call("ListTasks", {}, V1)
        assert refused["error"]["code"] == -32000
        assert "result" in await client.call("ListTasks", {}, ALICE)
    finally:
        await client.aclose()


async def test_too_many_requests_in_flight_on_one_connection(start_service, socket_dir):
    path = os.path.join(socket_dir, "busy.sock")
    await start_service(
        store="memory:", unix_socket=path, unix_socket_max_in_flight=2, **SCENARIO_SETTINGS
    )
    client = await UnixClient.open(path)
    try:
        hanging = [
            await client.request("SendStreamingMessage", message("hang"), ALICE) for _ in range(2)
        ]
        for rid in hanging:
            await client.next(rid)
        refused = await client.call("ListTasks", {}, ALICE)
        assert refused["error"]["code"] == -32603 and refused["final"] is True
        assert any(d["@type"].endswith("RetryInfo") for d in refused["error"]["data"])
    finally:
        await client.aclose()


def test_frames_are_one_line_each():
    """What the client above relies on: the server's JSON never holds a raw newline."""
    from service.protocol.json_text import dumps

    assert b"\n" not in dumps({"text": "two\nlines\u2028"})
    assert json.loads(dumps({"text": "two\nlines"}))["text"] == "two\nlines"
