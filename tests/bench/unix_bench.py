"""`make bench`, the unix socket's client (docs/transports.md): SendMessage as one JSON line,
its answer frame as one line back.

`LineCaller` keeps one request in flight on its connection (the answer is the next line);
`SharedLine` carries many at once on one connection, answers matched by id (what the
transport allows and HTTP/1.1 does not). Both splice a fresh messageId into pre-built bytes,
so the client costs little beside the server.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid

ECHO_TEXT = "hello bench"
_ID = "0" * 32  # placeholder of the per-request messageId (same length as uuid4().hex)
_RID = "1" * 12  # placeholder of the request id
READ_LIMIT = 1 << 20


class LineTemplate:
    """The bytes of one SendMessage line, a fresh messageId and request id per request."""

    def __init__(self) -> None:
        doc = {
            "jsonrpc": "2.0",
            "id": _RID,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": _ID, "role": "ROLE_USER", "parts": [{"text": ECHO_TEXT}]}
            },
            "serviceParameters": {"A2A-Version": "1.0"},
        }
        whole = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
        rid, mid = whole.index(_RID.encode()), whole.index(_ID.encode())
        self.head, self.middle, self.tail = (
            whole[:rid],
            whole[rid + len(_RID) : mid],
            whole[mid + len(_ID) :],
        )
        self.ids = itertools.count(1)

    def build(self) -> tuple[str, bytes]:
        rid = f"{next(self.ids):012d}"
        return rid, self.head + rid.encode() + self.middle + uuid.uuid4().hex.encode() + self.tail


def check_answer(line: bytes) -> str | None:
    """None for a completed task echoing the text, else what was wrong."""
    if b"TASK_STATE_COMPLETED" not in line or ECHO_TEXT.encode() not in line:
        return f"unexpected answer: {line[:200]!r}"
    return None


class LineCaller:
    """One connection, one request in flight."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.template = LineTemplate()

    @classmethod
    async def open(cls, path: str) -> LineCaller:
        return cls(*await asyncio.open_unix_connection(path, limit=READ_LIMIT))

    async def send_message(self) -> str | None:
        _, data = self.template.build()
        self.writer.write(data)
        return check_answer(await self.reader.readline())

    def close(self) -> None:
        self.writer.close()


class SharedLine:
    """One connection, many requests in flight; answers matched by their id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.template = LineTemplate()
        self.waiting: dict[str, asyncio.Future[bytes]] = {}
        self.task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, path: str) -> SharedLine:
        return cls(*await asyncio.open_unix_connection(path, limit=READ_LIMIT))

    async def _read(self) -> None:
        while line := await self.reader.readline():
            at = line.index(b'"id":"') + 6  # the answer's id: right after "jsonrpc"
            future = self.waiting.pop(line[at : at + 12].decode(), None)
            if future is not None and not future.done():
                future.set_result(line)
        for future in self.waiting.values():
            future.set_exception(ConnectionError("the connection closed"))

    async def send_message(self) -> str | None:
        rid, data = self.template.build()
        future = asyncio.get_running_loop().create_future()
        self.waiting[rid] = future
        self.writer.write(data)
        return check_answer(await future)

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()
