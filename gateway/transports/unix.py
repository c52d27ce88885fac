"""JSON-RPC over a unix socket (`unix_socket = "PATH"`): one request per line in, one answer
frame per line out, each connection serving its requests concurrently (session.Conversation;
answers carry their request's id).

The socket file: what is at PATH is looked at first (`SocketPathError` says why it cannot
be used): nothing, or a socket nobody listens on any more (stale: replaced), is fine; any
other file, or a socket another server listens on, stops startup. The socket gets its
mode (`unix_socket_mode`) before it listens, so there is no moment anyone else may
connect; it is removed on exit when it is still ours.

Peer credentials (SO_PEERCRED): with `unix_socket_peer_principals` a connection's user
id is mapped to a principal the server vouches for when a request sends no credential.

The drain: the listener stops accepting when the gate closes; open streams end with the
resumable error (the engine does that); every connection is closed after its last
answer is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.transports.lines import CHUNK_BYTES, lines
from gateway.transports.session import Conversation, Frame, FramedJsonRpc, Link, error_frame
from service.protocol.errors import OverloadedError

log = logging.getLogger("service")

TRANSPORT = "unix"  # the access log's binding
PEER_CREDENTIALS = getattr(socket, "SO_PEERCRED", None)  # Linux
CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
PROBE_SECONDS = 1.0


class SocketPathError(Exception):
    """PATH cannot become the socket; the message says why (without the setting's name)."""


@dataclass(frozen=True)
class PeerPrincipals:
    """uid -> principal, and whether any other uid is vouched for as `uid:<uid>`."""

    named: Mapping[int, str]
    any_peer: bool

    def of(self, uid: int) -> str | None:
        if uid in self.named:
            return self.named[uid]
        return f"uid:{uid}" if self.any_peer else None


def bind(path: str, mode: int) -> socket.socket:
    """A unix socket bound at `path` with `mode`, not yet listening (SocketPathError)."""
    _clear(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, mode)  # before listen(): until then no one can connect
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SocketPathError(f"{path}: another process created it just now") from None
        raise SocketPathError(f"{path}: {exc.strerror or exc}") from None
    return sock


def _clear(path: str) -> None:
    """Make room at `path`: remove a stale socket; refuse anything else that is there."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SocketPathError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(found.st_mode):
        raise SocketPathError(
            f"{path} exists and is not a socket; remove it or choose another path"
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_SECONDS)
        try:
            probe.connect(path)
        except ConnectionRefusedError:  # nobody listens: left behind by a process that died
            log.info("unix_socket: replacing the stale socket at %s", path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:  # a full backlog, no permission: someone is there
            raise SocketPathError(
                f"{path}: a socket that cannot be checked ({exc.strerror or exc}); "
                "another server may be using it"
            ) from None
    raise SocketPathError(f"{path}: another server is listening on it")


def peer_of(sock: socket.socket) -> tuple[int, int] | None:
    """(pid, uid) of the connected peer, None where the platform cannot tell."""
    if PEER_CREDENTIALS is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, PEER_CREDENTIALS, CREDENTIALS.size)
    except OSError:
        return None
    pid, uid, _gid = CREDENTIALS.unpack(raw)
    return pid, uid


class _Connection:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.conversation: Conversation | None = None

    async def write(self, frame: Frame) -> None:
        self.writer.write(frame.payload + b"\n")
        await self.writer.drain()


class UnixSocketTransport:
    """The listener and its connections."""

    def __init__(
        self,
        rpc: FramedJsonRpc,
        path: str,
        *,
        mode: int,
        peers: PeerPrincipals | None,
        max_in_flight: int,
        max_connections: int,
    ) -> None:
        self.rpc = rpc
        self.path = os.path.abspath(path)
        self.mode = mode
        self.peers = peers
        self.max_in_flight = max_in_flight
        self.max_connections = max_connections
        self.server: asyncio.AbstractServer | None = None
        self.connections: set[_Connection] = set()
        self.handlers: set[asyncio.Task[None]] = set()
        self.identity: tuple[int, int] | None = None  # (st_dev, st_ino) of our socket file

    async def start(self) -> None:
        if self.peers is not None and PEER_CREDENTIALS is None:
            raise SocketPathError("peer credentials (SO_PEERCRED) are not available here")
        sock = bind(self.path, self.mode)
        made = os.stat(self.path)
        self.identity = (made.st_dev, made.st_ino)
        try:
            self.server = await asyncio.start_unix_server(self._serve, sock=sock)
        except BaseException:
            sock.close()
            self._remove()
            raise

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        connection = _Connection(writer)
        try:
            if len(self.connections) >= self.max_connections:
                await self._refuse(connection)
                return
            self.connections.add(connection)
            await self._converse(reader, connection)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.connections.discard(connection)
            self.handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _converse(self, reader: asyncio.StreamReader, connection: _Connection) -> None:
        link = self._link(connection.writer)
        conversation = Conversation(
            self.rpc, link, connection.write, max_in_flight=self.max_in_flight
        )
        connection.conversation = conversation
        try:
            async for line in lines(lambda: reader.read(CHUNK_BYTES), self.rpc.max_frame_bytes):
                if line is None:
                    await connection.write(self.rpc.too_large())
                else:
                    conversation.received(line)
            await conversation.finish()  # the peer is done sending: answer what it sent
        finally:
            await conversation.close()

    def _link(self, writer: asyncio.StreamWriter) -> Link:
        peer = peer_of(writer.get_extra_info("socket"))
        if peer is None:
            return Link(TRANSPORT, client=TRANSPORT)
        pid, uid = peer
        principal = self.peers.of(uid) if self.peers is not None else None
        return Link(TRANSPORT, client=f"unix:uid={uid},pid={pid}", principal=principal)

    async def _refuse(self, connection: _Connection) -> None:
        err = OverloadedError(
            f"At most {self.max_connections} connections may be open on the unix socket; "
            "retry when one is closed.",
            retry_after=1.0,
        )
        with contextlib.suppress(ConnectionError):
            await connection.write(error_frame(err))

    def in_flight(self) -> int:
        return sum(
            len(c.conversation.calls) for c in self.connections if c.conversation is not None
        )

    def stop_accepting(self) -> None:
        if self.server is not None:
            self.server.close()

    async def finish(self, seconds: float) -> None:
        """Wait (at most `seconds`) for every request received so far to be answered."""
        waiting = [c.conversation.finish() for c in self.connections if c.conversation]
        if waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), seconds)

    async def close(self) -> None:
        """Close every connection (what is unanswered is stopped) and remove the socket."""
        self.stop_accepting()
        for task in list(self.handlers):
            task.cancel()
        if self.handlers:
            await asyncio.gather(*self.handlers, return_exceptions=True)
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.wait_closed()
        self._remove()

    def _remove(self) -> None:
        """Remove the socket file if it is still the one we made."""
        try:
            now = os.lstat(self.path)
        except OSError:
            return
        if self.identity == (now.st_dev, now.st_ino):
            with contextlib.suppress(OSError):
                os.unlink(self.path)
