"""gateway/sse.py: the SSE response on plain ASGI callables: frames, the end, keep-alives
on a quiet stream, a client's disconnect (the frames closed, a normal return), HEAD, and
what an open stream holds (two tasks, a bounded count of Python objects)."""

from __future__ import annotations

import asyncio
import gc

from sse_starlette.event import ServerSentEvent

from gateway.limits.connections import ClientGone
from gateway.sse import SseResponse

KEEPALIVE = b": keep-alive\r\n\r\n"
SCOPE = {"type": "http", "method": "POST"}


class Client:
    """receive/send of one connection: what was sent, and a disconnect on demand (`left`:
    what receive raises instead, as quiet_aborted_uploads does mid-body)."""

    def __init__(self, left: BaseException | None = None) -> None:
        self.sent: list[dict] = []
        self.gone = asyncio.Event()
        self.receives = 0
        self.left = left

    async def receive(self) -> dict:
        self.receives += 1
        await self.gone.wait()
        if self.left is not None:
            raise self.left
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


class Frames:
    """An async generator of frames released one by one; `closed` once its cleanup ran."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    async def frames(self):
        try:
            while (frame := await self.queue.get()) is not None:
                yield frame
        finally:
            self.closed = True


def response(frames: Frames, keepalive_seconds: float = 30.0) -> SseResponse:
    return SseResponse(frames.frames(), keepalive_seconds=keepalive_seconds, keepalive=KEEPALIVE)


async def until(condition, seconds: float = 5.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 - what the response sent, no event
            await asyncio.sleep(0.005)


async def test_frames_then_the_end():
    frames, client = Frames(), Client()
    running = asyncio.create_task(response(frames)(SCOPE, client.receive, client.send))
    frames.queue.put_nowait(ServerSentEvent("one", id="1").encode())
    frames.queue.put_nowait(ServerSentEvent("two", event="error").encode())
    frames.queue.put_nowait(None)
    await asyncio.wait_for(running, 5)
    start = client.sent[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"cache-control"] == b"no-store" and headers[b"x-accel-buffering"] == b"no"
    assert client.bodies() == [
        b"id: 1\r\ndata: one\r\n\r\n",
        b"event: error\r\ndata: two\r\n\r\n",
        b"",
    ]
    assert client.sent[-1]["more_body"] is False and frames.closed


async def test_a_quiet_stream_gets_keepalives_and_no_more_once_it_ended():
    frames, client = Frames(), Client()
    running = asyncio.create_task(response(frames, 0.05)(SCOPE, client.receive, client.send))
    await until(lambda: client.bodies().count(KEEPALIVE) >= 2)
    frames.queue.put_nowait(None)
    await asyncio.wait_for(running, 5)
    ended = len(client.sent)
    await asyncio.sleep(0.15)
    assert client.bodies()[-1] == b"" and len(client.sent) == ended


async def test_one_receive_waits_across_keepalives():
    """Each receive() would have uvicorn read the socket again (and llhttp parse whatever was
    pipelined behind the stream): one stays pending however many keep-alives go out."""
    frames, client = Frames(), Client()
    running = asyncio.create_task(response(frames, 0.02)(SCOPE, client.receive, client.send))
    await until(lambda: client.bodies().count(KEEPALIVE) >= 4)
    assert client.receives == 1
    client.gone.set()
    await asyncio.wait_for(running, 5)
    assert frames.closed


async def test_a_client_gone_mid_body_ends_the_stream_too():
    frames, client = Frames(), Client(left=ClientGone())
    running = asyncio.create_task(response(frames)(SCOPE, client.receive, client.send))
    await until(lambda: len(client.sent) == 1)
    client.gone.set()
    await asyncio.wait_for(running, 5)
    assert frames.closed and not running.cancelled()


async def test_a_disconnect_closes_the_frames_and_returns():
    frames, client = Frames(), Client()
    running = asyncio.create_task(response(frames)(SCOPE, client.receive, client.send))
    frames.queue.put_nowait(ServerSentEvent("one").encode())
    await until(lambda: len(client.bodies()) == 1)
    client.gone.set()
    await asyncio.wait_for(running, 5)  # returns normally: no CancelledError escapes
    assert frames.closed and not running.cancelled()
    assert client.bodies() == [b"data: one\r\n\r\n"]  # no end is written to a gone client


async def test_a_cancel_from_elsewhere_is_not_swallowed():
    frames, client = Frames(), Client()
    running = asyncio.create_task(response(frames)(SCOPE, client.receive, client.send))
    await until(lambda: len(client.sent) == 1)
    running.cancel()
    try:
        await running
    except asyncio.CancelledError:
        pass
    assert running.cancelled() and frames.closed


async def test_head_sends_the_headers_and_never_reads_the_frames():
    frames, client = Frames(), Client()
    await asyncio.wait_for(
        response(frames)({"type": "http", "method": "HEAD"}, client.receive, client.send), 5
    )
    assert [m["type"] for m in client.sent] == ["http.response.start", "http.response.body"]
    assert client.bodies() == [b""]


async def test_an_open_stream_holds_two_tasks_and_few_objects():
    """What a stream waiting for its next event holds here: its own task and the watcher,
    and a few dozen Python objects (sse-starlette's task group held ~300 and five tasks)."""
    streams = 200
    tasks_before = len(asyncio.all_tasks())
    gc.collect()
    before = len(gc.get_objects())
    opened = []
    for _ in range(streams):
        frames, client = Frames(), Client()
        run = asyncio.create_task(response(frames)(SCOPE, client.receive, client.send))
        opened.append((frames, client, run))
    await until(lambda: all(len(c.sent) == 1 for _, c, _ in opened))
    await asyncio.sleep(0.01)
    gc.collect()
    per_stream = (len(gc.get_objects()) - before) / streams
    tasks = (len(asyncio.all_tasks()) - tasks_before) / streams
    for _, client, _ in opened:
        client.gone.set()
    await asyncio.wait_for(asyncio.gather(*(run for _, _, run in opened)), 5)
    assert tasks == 2
    # this test's own Frames, Client, queue and messages are ~20 of them
    assert per_stream < 60, f"{per_stream:.0f} Python objects per open stream"


async def test_frames_sent_leave_nothing_behind():
    """An open stream keeps no Python object per frame it sent."""
    streams, frames_each = 50, 40
    opened = []
    for _ in range(streams):
        frames, client = Frames(), Client()
        client.send = _counting(client)  # type: ignore[method-assign]  # keeps no message
        run = asyncio.create_task(response(frames)(SCOPE, client.receive, client.send))
        opened.append((frames, client, run))

    async def each_sends(n: int) -> None:
        for frames, _, _ in opened:
            for k in range(n):
                frames.queue.put_nowait(ServerSentEvent(f"chunk {k}", id=str(k)).encode())
        await until(lambda: all(f.queue.empty() for f, _, _ in opened))
        await asyncio.sleep(0.01)

    await each_sends(5)
    gc.collect()
    before = len(gc.get_objects())
    await each_sends(frames_each)
    gc.collect()
    grown = len(gc.get_objects()) - before
    for _, client, _ in opened:
        client.gone.set()
    await asyncio.wait_for(asyncio.gather(*(run for _, _, run in opened)), 5)
    assert grown < streams, f"{grown} more Python objects after {frames_each} frames a stream"


def _counting(client: Client):
    async def send(message: dict) -> None:
        client.sent[:] = [message]  # the last message only: the test's own memory stays flat

    return send
