"""The scenario set every JSON-RPC transport of ours runs (docs/transports.md), written once.

A transport's test gives a `Connect` (opens a new `FrameClient`: one connection, or for a
connectionless transport one client) to these scenarios, against a real server started
with `SCENARIO_SETTINGS` (plus the transport's own key). A `FrameClient` subclass only
writes one request frame and reads one answer frame; telling answers apart by request id
is done here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

from tests.security_util import API_KEYS, BASIC, TOKENS, basic_header

# What the server under test runs with (settings as keyword arguments; CLI flags and
# A2A_* variables spell them the same way).
SCENARIO_SETTINGS: dict[str, Any] = {
    "agent": "tests.agents:ScriptedAgent",
    "auth_bearer_tokens": [f"{n}={t}" for n, t in TOKENS.items()],
    "auth_api_keys": [f"{n}={k}" for n, k in API_KEYS.items()],
    "auth_basic_users": [f"{u}:{p}" for u, p in BASIC.items()],
    "max_request_bytes": 256 * 1024,
    "push_allow_hosts": ["hooks.example.com"],
    "extended_skills": [
        {"id": "members", "name": "Members", "description": "for callers", "tags": ["x"]}
    ],
}
MAX_FRAME = SCENARIO_SETTINGS["max_request_bytes"]

V1 = {"A2A-Version": "1.0"}
ALICE = {**V1, "Authorization": f"Bearer {TOKENS['alice']}"}
BOB = {**V1, "Authorization": f"Bearer {TOKENS['bob']}"}
SCHEMES = {
    "bearer": ALICE,
    "api key": {**V1, "X-API-Key": API_KEYS["ci"]},
    "basic": {**V1, "Authorization": basic_header("carol", BASIC["carol"])},
}
WAIT = 20.0  # seconds any one answer may take before a scenario fails


class FrameClient:
    """One connection of a transport: `write` sends one request frame, `read` returns the
    next answer frame (None once the connection is closed). Start with `start()`."""

    def __init__(self) -> None:
        self._queues: dict[Any, asyncio.Queue[dict[str, Any] | None]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._ids = 0
        self.closed = asyncio.Event()

    async def write(self, raw: bytes) -> None:
        raise NotImplementedError

    async def read(self) -> bytes | None:
        raise NotImplementedError

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader

    def start(self) -> FrameClient:
        self._reader = asyncio.create_task(self._read_all())
        return self

    def _queue(self, rid: Any) -> asyncio.Queue[dict[str, Any] | None]:
        return self._queues.setdefault(rid, asyncio.Queue())

    async def _read_all(self) -> None:
        try:
            while (raw := await self.read()) is not None:
                frame = json.loads(raw)
                assert isinstance(frame.get("final"), bool), frame
                self._queue(frame.get("id")).put_nowait(frame)
        finally:
            self.closed.set()
            for queue in self._queues.values():
                queue.put_nowait(None)

    def new_id(self) -> str:
        self._ids += 1
        return f"r{self._ids}-{os.urandom(3).hex()}"

    async def request(
        self, method: str, params: dict[str, Any], parameters: dict[str, str] | None = None
    ) -> str:
        """Send a request; its id."""
        rid = self.new_id()
        doc: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        if parameters is not None:
            doc["serviceParameters"] = parameters
        await self.write(json.dumps(doc).encode())
        return rid

    async def next(self, rid: Any) -> dict[str, Any]:
        """The next answer frame for `rid` (AssertionError if the connection ended)."""
        frame = await asyncio.wait_for(self._queue(rid).get(), WAIT)
        assert frame is not None, f"the connection ended before an answer to {rid!r}"
        return frame

    async def frames(self, rid: Any) -> list[dict[str, Any]]:
        """Every answer frame for `rid`, up to the final one."""
        out = [await self.next(rid)]
        while not out[-1]["final"]:
            out.append(await self.next(rid))
        return out

    async def call(
        self, method: str, params: dict[str, Any], parameters: dict[str, str] | None = ALICE
    ) -> dict[str, Any]:
        """A unary call's one frame."""
        [frame] = await self.frames(await self.request(method, params, parameters))
        return frame


Connect = Callable[[], Awaitable[FrameClient]]


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "message": {
            "messageId": os.urandom(8).hex(),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            **fields,
        }
    }


def result(frame: dict[str, Any]) -> dict[str, Any]:
    assert "result" in frame, frame
    return frame["result"]


def event_ids(frames: list[dict[str, Any]]) -> list[int]:
    return [int(f["eventId"]) for f in frames if "eventId" in f]


# ---- the scenarios -------------------------------------------------------------------


async def all_operations(connect: Connect) -> None:
    """Each of the 11 operations answers as on JSON-RPC over HTTP."""
    client = await connect()
    try:
        made = result(await client.call("SendMessage", message("input more")))["task"]
        task_id = made["id"]
        assert made["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        streamed = await client.frames(
            await client.request("SendStreamingMessage", message("slow 2"), ALICE)
        )
        assert streamed[-1] == {"jsonrpc": "2.0", "id": streamed[0]["id"], "final": True}
        assert result(await client.call("GetTask", {"id": task_id}))["id"] == task_id
        listed = result(await client.call("ListTasks", {}))
        assert task_id in {t["id"] for t in listed["tasks"]}
        config = {"taskId": task_id, "id": "c1", "url": "https://hooks.example.com/a2a"}
        created = result(await client.call("CreateTaskPushNotificationConfig", config))
        assert created["id"] == "c1"
        got = result(
            await client.call("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"})
        )
        assert got["url"] == config["url"]
        configs = result(await client.call("ListTaskPushNotificationConfigs", {"taskId": task_id}))
        assert [c["id"] for c in configs["configs"]] == ["c1"]
        assert (
            result(
                await client.call(
                    "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"}
                )
            )
            == {}
        )
        card = await client.call("GetExtendedAgentCard", {})
        assert [s["id"] for s in result(card)["skills"]][-1] == "members"
        later = {**message("hang"), "configuration": {"returnImmediately": True}}
        hanging_id = result(await client.call("SendMessage", later))["task"]["id"]
        subscribed = await client.request("SubscribeToTask", {"id": hanging_id}, ALICE)
        first = await client.next(subscribed)
        assert result(first)["task"]["id"] == hanging_id and first["final"] is False
        canceled = result(await client.call("CancelTask", {"id": hanging_id}))
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        rest = await client.frames(subscribed)
        assert rest[-1]["final"] is True
        unknown = await client.call("NoSuchMethod", {})
        assert unknown["error"]["code"] == -32601
    finally:
        await client.aclose()


async def stream_to_the_end(connect: Connect) -> None:
    """Every event frame says final: false and carries a rising eventId; one closing frame."""
    client = await connect()
    try:
        frames = await client.frames(
            await client.request("SendStreamingMessage", message("chunks 5"), ALICE)
        )
        events, closing = frames[:-1], frames[-1]
        assert closing["final"] is True and "result" not in closing and "error" not in closing
        assert all(f["final"] is False for f in events)
        ids = event_ids(events)
        assert len(ids) == len(events) and ids == sorted(set(ids))
        assert result(events[-1])["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        await client.aclose()


async def cancel_during_a_stream(connect: Connect) -> None:
    """A CancelTask on the same connection while its stream runs ends the stream CANCELED."""
    client = await connect()
    try:
        rid = await client.request("SendStreamingMessage", message("hang"), ALICE)
        first = result(await client.next(rid))
        task_id = first["task"]["id"] if "task" in first else first["statusUpdate"]["taskId"]
        canceled = result(await client.call("CancelTask", {"id": task_id}))
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        rest = await client.frames(rid)
        states = [
            result(f)["statusUpdate"]["status"]["state"]
            for f in rest
            if "result" in f and "statusUpdate" in f["result"]
        ]
        assert states[-1] == "TASK_STATE_CANCELED" and rest[-1]["final"] is True
    finally:
        await client.aclose()


async def resume_after_a_dropped_connection(connect: Connect) -> None:
    """Drop the connection mid-stream; a new one resumes with Last-Event-ID: the current
    Task first, then the events after the id, with no gap and no duplicate."""
    client = await connect()
    rid = await client.request("SendStreamingMessage", message("slow 6"), ALICE)
    seen = [await client.next(rid), await client.next(rid)]
    await client.aclose()  # dropped
    first = result(seen[0])
    task_id = first["task"]["id"] if "task" in first else first["statusUpdate"]["taskId"]
    last = event_ids(seen)[-1]
    again = await connect()
    try:
        frames = await again.frames(
            await again.request(
                "SubscribeToTask", {"id": task_id}, {**ALICE, "Last-Event-ID": str(last)}
            )
        )
        assert frames[-1]["final"] is True
        assert "task" in result(frames[0])  # the current Task first; its eventId is the last
        ids = event_ids(frames[1:])  # event it includes, so the replay after it may repeat it
        later = [i for i in ids if i > last]
        assert later == sorted(set(later)), ids  # no duplicate
        assert later and later[0] == last + 1 or not later, ids  # no gap
        states = [
            result(f)["statusUpdate"]["status"]["state"]
            for f in frames
            if "result" in f and "statusUpdate" in f["result"]
        ]
        got = await again.call("GetTask", {"id": task_id})
        assert result(got)["status"]["state"] == "TASK_STATE_COMPLETED"
        assert not states or states[-1] == "TASK_STATE_COMPLETED"
    finally:
        await again.aclose()


async def auth_refused_and_accepted(connect: Connect) -> None:
    """No credential or a wrong one: -32000; each scheme the card declares: accepted."""
    client = await connect()
    try:
        for parameters in (V1, {**V1, "Authorization": "Bearer wrong-token-000000000000"}):
            refused = await client.call("ListTasks", {}, parameters)
            assert refused["error"]["code"] == -32000 and refused["final"] is True
        for name, parameters in SCHEMES.items():
            answer = await client.call("ListTasks", {}, parameters)
            assert "result" in answer, (name, answer)
    finally:
        await client.aclose()


async def tenants_are_apart(connect: Connect) -> None:
    """Two callers, two principals: neither sees the other's task by id or in a list."""
    alice, bob = await connect(), await connect()
    try:
        task = result(await alice.call("SendMessage", message("input more"), ALICE))["task"]
        theirs = await bob.call("GetTask", {"id": task["id"]}, BOB)
        assert theirs["error"]["code"] == -32001
        listed = result(await bob.call("ListTasks", {}, BOB))
        assert task["id"] not in {t["id"] for t in listed.get("tasks", [])}
        subscribe = await bob.call("SubscribeToTask", {"id": task["id"]}, BOB)
        assert subscribe["error"]["code"] == -32001
    finally:
        await alice.aclose()
        await bob.aclose()


async def malformed_frame_then_serving(connect: Connect) -> None:
    """A frame that is not JSON gets -32700 (id null); the connection goes on serving."""
    client = await connect()
    try:
        await client.write(b"{this is not json")
        parse = await client.next(None)
        assert parse["error"]["code"] == -32700 and parse["final"] is True
        assert "result" in await client.call("ListTasks", {})
    finally:
        await client.aclose()


async def oversized_frame_refused(connect: Connect) -> None:
    """A frame over max_request_bytes is refused (-32600 naming the limit)."""
    client = await connect()
    try:
        big = message("x" * (MAX_FRAME + 1024))
        doc = {"jsonrpc": "2.0", "id": "big", "method": "SendMessage", "params": big}
        await client.write(json.dumps({**doc, "serviceParameters": ALICE}).encode())
        refused = await client.next(None)  # refused before it is read: no id to echo
        assert refused["error"]["code"] == -32600 and refused["final"] is True
        assert "max_request_bytes" in refused["error"]["message"]
        assert "result" in await client.call("ListTasks", {})
    finally:
        await client.aclose()


async def drain_mid_stream(connect: Connect, begin_drain: Callable[[], Awaitable[None]]) -> None:
    """The server drains while a stream is open: the stream ends with the resumable
    UNAVAILABLE error (-32603 with RetryInfo) as its final frame."""
    client = await connect()
    try:
        rid = await client.request("SendStreamingMessage", message("hang"), ALICE)
        await client.next(rid)
        await begin_drain()
        rest = await client.frames(rid)
        end = rest[-1]
        assert end["final"] is True and end["error"]["code"] == -32603, end
        assert any(d.get("@type", "").endswith("RetryInfo") for d in end["error"]["data"]), end
    finally:
        await client.aclose()


CONNECTION_SCENARIOS = [
    all_operations,
    stream_to_the_end,
    cancel_during_a_stream,
    resume_after_a_dropped_connection,
    auth_refused_and_accepted,
    tenants_are_apart,
    malformed_frame_then_serving,
    oversized_frame_refused,
]
