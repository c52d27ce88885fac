"""JSON-RPC over the process's stdin and stdout (`serve --transport stdio`): the process is
the connection. One request per line in (gateway/transports/lines.py), one answer frame
per line out; requests are served concurrently (session.Conversation).

stdout carries frames and nothing else. `Pipes.claim` takes both descriptors for the
transport (private duplicates, not inherited by child processes) and points descriptors
0 and 1 elsewhere: stdin at /dev/null, stdout at stderr. So whatever else writes to
stdout — the ready line, a library, a print in an agent, a child process — lands on
stderr, and no child reads the requests. Nothing is made non-blocking (that flag would be
shared with whoever else holds the same terminal or pipe): a thread reads stdin, and
batches of frames are written from a thread.

End of stdin calls `on_end` once every request read has its answer (a stream its first
event; at most `drain_seconds`): the service drains as on SIGTERM (what is in flight is
answered; an open stream ends with the resumable error) and exits 0. stdout closed by its
reader calls `on_end` at once (nobody takes answers any more).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable

from gateway.transports.lines import CHUNK_BYTES, lines
from gateway.transports.session import Conversation, Frame, FramedJsonRpc, Link

log = logging.getLogger("service")

TRANSPORT = "stdio"  # the access log's binding
HIGH_WATER_BYTES = 1024 * 1024  # frames queued for stdout before writers wait
READ_AHEAD_CHUNKS = 4  # chunks of stdin read before the server takes them


class Pipes:
    """The transport's own copies of stdin and stdout; descriptors 0 and 1 point elsewhere
    until `release`."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self.stdin = os.dup(0)
        self.stdout = os.dup(1)
        nothing = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(nothing, 0)
        finally:
            os.close(nothing)
        os.dup2(2, 1)
        self.reading = True  # a thread may be blocked reading `stdin`

    @classmethod
    def claim(cls) -> Pipes:
        return cls()

    def release(self) -> None:
        """Descriptors 0 and 1 back as they were; the copies closed (stdin's only once no
        thread reads it: a close would not wake that read, and the number could be reused)."""
        sys.stdout.flush()
        with contextlib.suppress(OSError):
            os.dup2(self.stdout, 1)
        with contextlib.suppress(OSError):
            os.dup2(self.stdin, 0)
        with contextlib.suppress(OSError):
            os.close(self.stdout)
        if not self.reading:
            with contextlib.suppress(OSError):
                os.close(self.stdin)


class _Reader:
    """stdin read by a daemon thread into a small queue (its blocking read never holds up
    the event loop, and the queue bounds how far it reads ahead)."""

    def __init__(self, pipes: Pipes) -> None:
        self.pipes = pipes
        self.loop = asyncio.get_running_loop()
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue(READ_AHEAD_CHUNKS)
        self.stopped = threading.Event()
        threading.Thread(target=self._run, name="stdio-reader", daemon=True).start()

    def _run(self) -> None:
        try:
            while not self.stopped.is_set():
                try:
                    chunk = os.read(self.pipes.stdin, CHUNK_BYTES)
                except OSError:
                    chunk = b""
                if self.stopped.is_set():
                    return
                put = asyncio.run_coroutine_threadsafe(self.chunks.put(chunk), self.loop)
                put.result()
                if not chunk:
                    return
        except BaseException:  # noqa: BLE001 - the loop is gone (shutdown): nothing to hand to
            return
        finally:
            self.pipes.reading = False

    async def read(self) -> bytes:
        return await self.chunks.get()


class _Writer:
    """Frames appended to a batch that a thread writes to stdout, one batch at a time, in
    order; a writer waits while more than HIGH_WATER_BYTES are queued."""

    def __init__(self, fd: int, on_broken: Callable[[], None]) -> None:
        self.fd = fd
        self.on_broken = on_broken
        self.pending: list[bytes] = []
        self.queued = 0
        self.room = asyncio.Event()
        self.flushing: asyncio.Task[None] | None = None
        self.broken = False

    async def write(self, frame: Frame) -> None:
        if self.broken:
            raise ConnectionResetError("stdout is closed")
        self.pending.append(frame.payload + b"\n")
        self.queued += len(frame.payload) + 1
        if self.flushing is None:
            self.flushing = asyncio.create_task(self._flush())
        while self.queued > HIGH_WATER_BYTES and not self.broken:
            self.room.clear()
            await self.room.wait()

    async def _flush(self) -> None:
        try:
            while self.pending and not self.broken:
                batch = b"".join(self.pending)
                self.pending.clear()
                try:
                    await asyncio.to_thread(_write_all, self.fd, batch)
                except OSError:  # the reader closed stdout: nobody takes answers any more
                    self.broken = True
                    self.on_broken()
                self.queued -= len(batch)
                self.room.set()
        finally:
            self.flushing = None

    async def flushed(self) -> None:
        if self.flushing is not None:
            await asyncio.shield(self.flushing)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class StdioTransport:
    """The stdio conversation: started by `start`, its end announced by `on_end`."""

    def __init__(
        self,
        rpc: FramedJsonRpc,
        pipes: Pipes,
        *,
        max_in_flight: int,
        on_end: Callable[[], None],
        end_seconds: float,
    ) -> None:
        self.rpc = rpc
        self.end_seconds = end_seconds
        self.pipes = pipes
        self.on_end = on_end
        self.writer = _Writer(pipes.stdout, self._stdout_closed)
        self.conversation = Conversation(
            rpc, Link(TRANSPORT, client=TRANSPORT), self.writer.write, max_in_flight=max_in_flight
        )
        self.serving: asyncio.Task[None] | None = None
        self.reader: _Reader | None = None

    def start(self) -> None:
        self.reader = _Reader(self.pipes)
        self.serving = asyncio.create_task(self._serve())

    async def _serve(self) -> None:
        assert self.reader is not None
        async for line in lines(self.reader.read, self.rpc.max_frame_bytes):
            if line is None:
                with contextlib.suppress(ConnectionError):
                    await self.writer.write(self.rpc.too_large())
            else:
                self.conversation.received(line)
        # Every request read is taken before the gate closes: each gets its answer (a
        # stream its first event) first, for at most `end_seconds`; then the drain.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.conversation.started(), self.end_seconds)
        log.info("stdio: end of input; draining")
        self.on_end()

    def _stdout_closed(self) -> None:
        log.info("stdio: stdout was closed by its reader; draining")
        self.on_end()

    def in_flight(self) -> int:
        return len(self.conversation.calls)

    def stop_accepting(self) -> None:
        """Requests still read after this are refused by the closed gate (UNAVAILABLE)."""

    async def finish(self, seconds: float) -> None:
        """Wait (at most `seconds`) for every request read so far to be answered and written."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.conversation.finish(), seconds)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.writer.flushed(), seconds)

    async def close(self) -> None:
        """Stop reading, stop what is unanswered, write what is queued (the pipes are
        given back by their owner, `Pipes.release`)."""
        if self.reader is not None:
            self.reader.stopped.set()
        if self.serving is not None:
            self.serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.serving
        await self.conversation.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.writer.flushed(), 2.0)
