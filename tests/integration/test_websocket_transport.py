"""JSON-RPC over WebSocket (`websocket_path`, docs/transports.md): the shared scenario set
with a `websockets` client against a real server, and what is the WebSocket's own: service
parameters from the handshake, 401 before the upgrade, an oversized message (-32600, then
1009), server pings (a peer that does not answer is closed), an idle socket outliving the
HTTP body deadline, the card entry, the drain."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from service.app.config import ConfigError, validate
from tests.conftest import make_settings
from tests.security_util import TOKENS
from tests.transport_scenarios import (
    ALICE,
    BOB,
    CONNECTION_SCENARIOS,
    MAX_FRAME,
    SCENARIO_SETTINGS,
    V1,
    FrameClient,
    drain_mid_stream,
    message,
    oversized_frame_refused,
    result,
)

PATH = "/a2a/ws"


class WsClient(FrameClient):
    def __init__(self, ws: ClientConnection) -> None:
        super().__init__()
        self.ws = ws

    @classmethod
    async def open(cls, url: str, headers: dict[str, str] | None = None) -> WsClient:
        ws = await connect(
            url, additional_headers=headers, max_size=None, proxy=None, compression=None
        )
        client = cls(ws)
        client.start()
        return client

    async def write(self, raw: bytes) -> None:
        await self.ws.send(raw.decode())

    async def read(self) -> bytes | None:
        try:
            got = await self.ws.recv()
        except ConnectionClosed:
            return None
        return got.encode() if isinstance(got, str) else got

    async def aclose(self) -> None:
        await self.ws.close()
        await super().aclose()


def ws_url(service: Any) -> str:
    return f"ws://127.0.0.1:{service.http_port}{PATH}"


@pytest.fixture
async def served(start_service):
    service = await start_service(
        store="memory:", websocket_path=PATH, http_port=0, **SCENARIO_SETTINGS
    )
    return service, ws_url(service)


# The shared oversized scenario expects the connection to go on serving; a WebSocket
# cannot skip the rest of a message it refused, so it closes (1009): tested below.
SCENARIOS = [s for s in CONNECTION_SCENARIOS if s is not oversized_frame_refused]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_scenario(served, scenario):
    _, url = served
    await scenario(lambda: WsClient.open(url))


async def test_an_oversized_message_is_refused_then_the_socket_closes_1009(served):
    _, url = served
    client = await WsClient.open(url)
    try:
        big = message("x" * (MAX_FRAME + 1024))
        doc = {"jsonrpc": "2.0", "id": "big", "method": "SendMessage", "params": big}
        await client.write(json.dumps({**doc, "serviceParameters": ALICE}).encode())
        refused = await client.next(None)  # refused from its header: no id to echo
        assert refused["error"]["code"] == -32600 and refused["final"] is True
        assert refused["id"] is None
        assert "max_request_bytes" in refused["error"]["message"]
        await asyncio.wait_for(client.closed.wait(), 20)
        assert client.ws.close_code == 1009
    finally:
        await client.aclose()
    again = await WsClient.open(url)  # the server goes on serving other sockets
    try:
        assert "result" in await again.call("ListTasks", {})
    finally:
        await again.aclose()


async def test_a_text_frame_that_is_not_utf8_closes_the_socket_1007(served, caplog):
    _, url = served
    client = await WsClient.open(url)
    try:
        with caplog.at_level("INFO"):
            await client.ws.send(b'{"jsonrpc": "2.0", "id": "\xff"}', text=True)
            await asyncio.wait_for(client.closed.wait(), 20)
        assert client.ws.close_code == 1007
        assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"
    finally:
        await client.aclose()
    again = await WsClient.open(url)
    try:
        assert "result" in await again.call("ListTasks", {})
    finally:
        await again.aclose()


async def test_a_handshake_while_draining_is_answered_503(served):
    service, url = served
    service.websocket.stop_accepting()  # what the drain does when the gate closes
    with pytest.raises(InvalidStatus) as info:
        await WsClient.open(url)
    assert info.value.response.status_code == 503
    assert info.value.response.headers["Retry-After"] == "1"


async def test_service_parameters_from_the_handshake_and_a_request_of_its_own_wins(served):
    _, url = served
    alice = await WsClient.open(url, {**V1, "Authorization": f"Bearer {TOKENS['alice']}"})
    try:
        task = result(await alice.call("SendMessage", message("input more"), None))["task"]
        assert result(await alice.call("GetTask", {"id": task["id"]}, None))["id"] == task["id"]
        as_bob = await alice.call("GetTask", {"id": task["id"]}, BOB)  # the request's own win
        assert as_bob["error"]["code"] == -32001
    finally:
        await alice.aclose()


async def test_a_version_from_the_handshake_applies_to_every_request(served):
    _, url = served
    client = await WsClient.open(url, {"A2A-Version": "9.9"})
    try:
        refused = await client.call("ListTasks", {}, {"Authorization": ALICE["Authorization"]})
        assert refused["error"]["code"] == -32009, refused
        assert "result" in await client.call("ListTasks", {}, ALICE)  # its own 1.0 wins
    finally:
        await client.aclose()


async def test_wrong_credentials_in_the_handshake_are_refused_401_before_the_upgrade(served):
    _, url = served
    with pytest.raises(InvalidStatus) as info:
        await WsClient.open(url, {"Authorization": "Bearer wrong-token-000000000000"})
    response = info.value.response
    assert response.status_code == 401
    assert response.headers.get_all("WWW-Authenticate")
    assert b"wrong-token" not in response.body


async def test_no_credentials_in_the_handshake_means_each_request_brings_its_own(served):
    _, url = served
    client = await WsClient.open(url)
    try:
        assert (await client.call("ListTasks", {}, V1))["error"]["code"] == -32000
        assert "result" in await client.call("ListTasks", {}, ALICE)
    finally:
        await client.aclose()


async def test_another_path_is_not_a_websocket(served):
    service, _ = served
    with pytest.raises(InvalidStatus) as info:
        await WsClient.open(f"ws://127.0.0.1:{service.http_port}/elsewhere")
    assert info.value.response.status_code in (403, 404)


async def test_an_idle_socket_outlives_the_http_body_deadline(start_service):
    """The HTTP listener's body deadline is for HTTP requests: an upgraded socket idle for
    longer than it still serves (pings keep it alive)."""
    service = await start_service(
        store="memory:",
        websocket_path=PATH,
        http_port=0,
        http_body_timeout_seconds=0.3,
        http_header_timeout_seconds=0.3,
        websocket_ping_seconds=0.2,
        **SCENARIO_SETTINGS,
    )
    client = await WsClient.open(ws_url(service))
    try:
        await asyncio.sleep(1.5)  # five body deadlines
        assert not client.closed.is_set()
        assert "result" in await client.call("ListTasks", {})
    finally:
        await client.aclose()


async def test_the_server_pings_and_closes_a_peer_that_does_not_answer(start_service):
    """A raw client (sans-I/O) that sees the server's pings and never answers them."""
    service = await start_service(
        store="memory:",
        websocket_path=PATH,
        http_port=0,
        websocket_ping_seconds=0.2,
        websocket_ping_timeout_seconds=0.5,
    )
    protocol = ClientProtocol(parse_uri(ws_url(service)))
    reader, writer = await asyncio.open_connection("127.0.0.1", service.http_port)
    try:
        protocol.send_request(protocol.connect())
        writer.write(b"".join(protocol.data_to_send()))
        pings = 0
        close_code = None
        while close_code is None:
            data = await asyncio.wait_for(reader.read(65536), 20)
            if not data:
                break
            protocol.receive_data(data)
            for event in protocol.events_received():
                if isinstance(event, Response):
                    assert event.status_code == 101
                elif isinstance(event, Frame) and event.opcode is Opcode.PING:
                    pings += 1
                elif isinstance(event, Frame) and event.opcode is Opcode.CLOSE:
                    close_code = protocol.close_rcvd.code if protocol.close_rcvd else None
            # what the protocol would send (pongs) is deliberately never written
        assert pings >= 1
        assert close_code == 1011
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def test_too_many_requests_in_flight_on_one_socket(start_service):
    service = await start_service(
        store="memory:",
        websocket_path=PATH,
        http_port=0,
        websocket_max_in_flight=2,
        **SCENARIO_SETTINGS,
    )
    client = await WsClient.open(ws_url(service))
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


async def test_the_card_lists_the_websocket(served):
    service, url = served
    card = service.cards.public_card()
    entry = next(
        i for i in card.supported_interfaces if i.protocol_binding.endswith("binding:websocket")
    )
    assert entry.protocol_binding == "urn:a2a-service:binding:websocket"
    assert entry.url == url and entry.protocol_version == "1.0"


async def test_drain_mid_stream_then_the_sockets_are_closed_going_away(served):
    service, url = served
    idle = await WsClient.open(url)
    stopping: list[asyncio.Task[None]] = []

    async def begin_drain() -> None:
        stopping.append(asyncio.create_task(service.stop()))

    try:
        await drain_mid_stream(lambda: WsClient.open(url), begin_drain)
        await stopping[0]
        await asyncio.wait_for(idle.closed.wait(), 20)
        assert idle.ws.close_code == 1001
    finally:
        await idle.aclose()
    with pytest.raises(OSError):
        await WsClient.open(url)


def test_the_settings_name_what_is_wrong(tmp_path):
    with pytest.raises(ConfigError, match="websocket_path: the WebSocket transport runs on"):
        validate(make_settings(tmp_path, websocket_path=PATH, http_port=-1))
    with pytest.raises(ConfigError, match="websocket_path"):
        validate(make_settings(tmp_path, websocket_path="a2a/ws", http_port=0))
    with pytest.raises(ConfigError, match="websocket_max_in_flight"):
        validate(
            make_settings(tmp_path, websocket_path=PATH, http_port=0, websocket_max_in_flight=0)
        )
    validate(make_settings(tmp_path, websocket_path=PATH, http_port=0))
