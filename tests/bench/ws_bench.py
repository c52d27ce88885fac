"""`make bench`, the WebSocket transport's client (docs/transports.md): SendMessage as one
text frame, its answer frame back, with the `websockets` asyncio client (no compression).

`WsCaller` keeps one request in flight on its socket (the answer is the next frame);
`SharedSocket` carries many at once on one socket, answers matched by id. Both reuse the
unix socket client's pre-built request bytes (a fresh messageId and id per request).
"""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import ClientConnection, connect

from tests.bench.unix_bench import LineTemplate, check_answer


async def _open(url: str) -> ClientConnection:
    return await connect(url, max_size=None, proxy=None, compression=None)


def _text(template: LineTemplate) -> tuple[str, str]:
    rid, data = template.build()
    return rid, data[:-1].decode()  # without the line's newline: a frame is the unit


class WsCaller:
    """One socket, one request in flight."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.template = LineTemplate()

    @classmethod
    async def open(cls, url: str) -> WsCaller:
        return cls(await _open(url))

    async def send_message(self) -> str | None:
        _, text = _text(self.template)
        await self.ws.send(text)
        answer = await self.ws.recv()
        return check_answer(answer.encode() if isinstance(answer, str) else answer)

    def close(self) -> None:
        self.ws.transport.abort()


class SharedSocket:
    """One socket, many requests in flight; answers matched by their id."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.template = LineTemplate()
        self.waiting: dict[str, asyncio.Future[bytes]] = {}
        self.task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str) -> SharedSocket:
        return cls(await _open(url))

    async def _read(self) -> None:
        try:
            async for answer in self.ws:
                frame = answer.encode() if isinstance(answer, str) else answer
                at = frame.index(b'"id":"') + 6  # the answer's id: right after "jsonrpc"
                future = self.waiting.pop(frame[at : at + 12].decode(), None)
                if future is not None and not future.done():
                    future.set_result(frame)
        finally:
            for future in self.waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError("the socket closed"))

    async def send_message(self) -> str | None:
        rid, text = _text(self.template)
        future = asyncio.get_running_loop().create_future()
        self.waiting[rid] = future
        await self.ws.send(text)
        return check_answer(await future)

    def close(self) -> None:
        self.task.cancel()
        self.ws.transport.abort()
