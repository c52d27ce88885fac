"""A Server-Sent Events response that costs one small task per open stream.

sse-starlette's `EventSourceResponse` runs each response in an anyio task group of four
tasks (the stream, keep-alive pings, the server's exit signal, the client's disconnect):
with their cancel scopes, task states and events ~23 KiB of Python objects per open stream,
most of the HTTP binding's cost of a stream that waits for its next event. This one needs
two: the request's own task sends the frames; a watcher waits, in one `receive()`, for the
client to go away (or for `ClientGone` when it left mid-body). When the stream has said
nothing for `keepalive_seconds` a timer sends a keep-alive comment (a task only while it is
being sent).

- The stream ends when the frames end: the closing empty body is sent after the watcher and
  the keep-alives are stopped (neither writes again: a cancelled task never resumes into
  its send).
- The client disconnects: the watcher cancels the request's task, which closes the frames
  (their `finally` closes the subscription, only this one) and returns normally, as a
  response whose client went away does.
- The server's drain ends a stream through the frames themselves (the resumable
  UNAVAILABLE error, then the end), so no exit-signal task is needed here.
- HEAD: the headers and an empty body; the frames are closed unread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.limits.connections import ClientGone

END = {"type": "http.response.body", "body": b"", "more_body": False}


class SseResponse(Response):
    """`frames` (each an encoded SSE frame) as `text/event-stream`; `keepalive` sent after
    `keepalive_seconds` of quiet."""

    media_type = "text/event-stream"

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        keepalive_seconds: float,
        keepalive: bytes,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status_code = 200
        self.background = None
        self._frames = frames
        self._keepalive_seconds = keepalive_seconds
        self._keepalive = keepalive
        self._sent_at = 0.0  # loop time of the last frame sent
        self._gone = False  # the client disconnected (or a keep-alive could not be sent)
        self.init_headers(
            {
                "Cache-Control": "no-store",
                **(headers or {}),
                "Connection": "keep-alive",
                "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
            }
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        frames = self._frames
        if scope.get("method") == "HEAD":
            await _close(frames)
            await send(END)
            return
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        self._sent_at = loop.time()
        watcher = loop.create_task(self._watch(receive, task))
        pings = _KeepAlive(self, loop, send, task) if self._keepalive_seconds > 0 else None
        try:
            try:
                async for frame in frames:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                    self._sent_at = loop.time()
            finally:
                watcher.cancel()  # before the end is sent: neither writes again
                if pings is not None:
                    pings.stop()
                await _close(frames)  # at once if they ended; else their cleanup runs now
            await send(END)
        except asyncio.CancelledError:
            if self._gone and task.uncancel() == 0:
                return  # the client went away: the end it asked for
            raise

    async def _watch(self, receive: Receive, task: asyncio.Task[None]) -> None:
        """Until cancelled: the client's disconnect cancels `task`. One `receive()` waits the
        whole stream: each call has uvicorn read the socket again, and llhttp would parse
        whatever a client pipelined behind the stream into queued requests."""
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except (Exception, ClientGone):  # noqa: BLE001 - gone mid-body (quiet_aborted_uploads)
            pass
        self.client_gone(task)

    def client_gone(self, task: asyncio.Task[None]) -> None:
        self._gone = True
        task.cancel()


class _KeepAlive:
    """A keep-alive comment after each `keepalive_seconds` without a frame: a timer, and a
    task only while a comment is being sent (none per stream in between)."""

    def __init__(
        self,
        response: SseResponse,
        loop: asyncio.AbstractEventLoop,
        send: Send,
        task: asyncio.Task[None],
    ) -> None:
        self.response, self.loop, self.send, self.task = response, loop, send, task
        self.sending: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = loop.call_later(
            response._keepalive_seconds, self._due
        )

    def _due(self) -> None:
        self.timer = None
        response = self.response
        quiet = response._sent_at + response._keepalive_seconds - self.loop.time()
        if quiet > 0:
            self.timer = self.loop.call_later(quiet, self._due)
        else:
            self.sending = self.loop.create_task(self._ping())

    async def _ping(self) -> None:
        response = self.response
        message = {"type": "http.response.body", "body": response._keepalive, "more_body": True}
        try:
            await self.send(message)
        except Exception:  # noqa: BLE001 - a keep-alive that cannot be sent: the client is gone
            self.sending = None
            response.client_gone(self.task)
            return
        self.sending = None
        response._sent_at = self.loop.time()
        self.timer = self.loop.call_later(response._keepalive_seconds, self._due)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.sending is not None:  # a cancelled task never resumes into its send
            self.sending.cancel()
            self.sending = None


async def _close(frames: AsyncIterator[bytes]) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        await aclose()
