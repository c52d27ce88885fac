"""Newline-delimited frames, as stdio and the unix socket carry them: one request per line.

`lines` splits what a byte source yields into lines with a bound: a line longer than
`limit` bytes is never held whole. Once more than `limit` bytes have come without a
newline, the part held is dropped, `None` is yielded at once (the transport answers
with the too-large frame) and the rest of that line is skipped as it arrives; the next
line is read as usual, so the framing recovers and the connection keeps serving. A
trailing CR is dropped (CRLF works), empty lines are ignored, and a last line without
its newline still counts at the end of input.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

CHUNK_BYTES = 64 * 1024  # what a transport reads at once


async def lines(read: Callable[[], Awaitable[bytes]], limit: int) -> AsyncIterator[bytes | None]:
    """Each line from `read` (which returns b"" at the end) without its line end; None for
    a line over `limit` bytes, as soon as it is seen to be one."""
    held = bytearray()
    skipping = False  # inside a line already refused: drop bytes up to its newline
    while chunk := await read():
        if skipping:
            end = chunk.find(b"\n")
            if end < 0:
                continue
            skipping = False
            chunk = chunk[end + 1 :]
        start = len(held)
        held += chunk
        begin = 0
        while (end := held.find(b"\n", start)) >= 0:
            line = bytes(held[begin:end])
            begin = start = end + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > limit:
                yield None
            elif line.strip():
                yield line
        del held[:begin]
        if len(held) > limit + 1:  # a line end may be a CR away: allow one byte for it
            held.clear()
            skipping = True
            yield None
    if held.strip() and not skipping:
        last = bytes(held).removesuffix(b"\r")
        if len(last) > limit:
            yield None
        else:
            yield last
