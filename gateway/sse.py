"""A Server-Sent Events response that costs one small task per open stream.

sse-starlette's `EventSourceResponse` runs each response in an anyio task group of four
tasks (the stream, keep-alive pings, the server's exit signal, the client's disconnect):
with their cancel scopes, task states and events ~23 KiB of Python objects per open stream,
most of the HTTP binding's cost of a stream that waits for its next event. This one needs
two: the request's own task sends the frames; a watcher waits for the client to go away
and, when the stream has said nothing for `keepalive_seconds`, sends a keep-alive comment.

- The stream ends when the frames end: the closing empty body is sent after the watcher is
  stopped (it can no longer write: a cancelled task never resumes into its send).
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
        watcher = loop.create_task(self._watch(receive, send, task))
        try:
            try:
                async for frame in frames:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                    self._sent_at = loop.time()
            finally:
                watcher.cancel()  # before the end is sent: it never writes again
                await _close(frames)  # at once if they ended; else their cleanup runs now
            await send(END)
        except asyncio.CancelledError:
            if self._gone and task.uncancel() == 0:
                return  # the client went away: the end it asked for
            raise

    async def _watch(self, receive: Receive, send: Send, task: asyncio.Task[None]) -> None:
        """Until cancelled: a keep-alive after each quiet interval; the client's disconnect
        cancels `task`."""
        loop = asyncio.get_running_loop()
        interval = self._keepalive_seconds
        keepalive = {"type": "http.response.body", "body": self._keepalive, "more_body": True}
        try:
            while True:
                quiet = self._sent_at + interval - loop.time() if interval > 0 else None
                if quiet is not None and quiet <= 0:
                    await send(keepalive)
                    self._sent_at = loop.time()
                    continue
                try:
                    async with asyncio.timeout(quiet):
                        message = await receive()
                except TimeoutError:
                    continue
                if message["type"] == "http.disconnect":
                    break
        except Exception:  # noqa: BLE001 - a keep-alive that cannot be sent: the client is gone
            pass
        self._gone = True
        task.cancel()


async def _close(frames: AsyncIterator[bytes]) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        await aclose()
