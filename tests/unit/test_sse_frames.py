"""The gateway writes each SSE frame as bytes itself (gateway.dispatch.sse_frame, _frames):
byte for byte what sse-starlette's ServerSentEvent wrote for the same event before."""

from __future__ import annotations

import pytest
from sse_starlette.event import ServerSentEvent

from gateway.dispatch import _frames, sse_frame
from gateway.replies import ErrorReply
from gateway.transcode import dumps_str
from service.protocol.errors import TaskNotFoundError

DATA = [
    "",
    "{}",
    '{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"t"}}}',
    'ünïcødé ✓ \u2028 \u0085 "quoted"',
    "two\nlines",
    "crlf\r\nand\rcr\n\nblank",
    "trailing\n",
]


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("id", [None, "1", "42", "9007199254740993", "bad\nid"])
@pytest.mark.parametrize("event", [None, "error", "two\r\nlines"])
def test_a_frame_is_the_bytes_server_sent_event_wrote(data, id, event):
    assert sse_frame(data, id=id, event=event) == ServerSentEvent(data, id=id, event=event).encode()


class _Stream:
    """A DocumentStream's shape: documents (or a final ErrorReply), `seq` of the last."""

    def __init__(self, items):
        self._items = iter(items)
        self.seq = None
        self.closed = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            seq, item = next(self._items)
        except StopIteration:
            raise StopAsyncIteration from None
        self.seq = seq
        return item

    async def aclose(self):
        self.closed = True


async def test_a_stream_is_the_frames_server_sent_event_wrote():
    documents = [
        (7, {"result": {"task": {"id": "t", "history": [{"text": "a\nb ✓"}]}}}),
        (None, {"result": {"message": {"messageId": "m"}}}),  # a direct reply: no id
        (8, {"result": {"statusUpdate": {"taskId": "t"}}}),
    ]
    err = TaskNotFoundError("Task t not found.")
    error = ErrorReply({"error": {"message": "Task t not found.\nline two"}}, err)
    stream = _Stream([*documents, (8, error)])
    got = [frame async for frame in _frames(stream)]
    want = [
        ServerSentEvent(dumps_str(doc), id=str(seq) if seq else None).encode()
        for seq, doc in documents
    ]
    want.append(ServerSentEvent(dumps_str(error.document), event="error").encode())
    assert got == want
    assert stream.closed
