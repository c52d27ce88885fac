"""The PostgreSQL store's connections: a plain LIFO queue of them (asyncpg's own Pool
added ~150 µs per acquire here), re-made with back-off after an outage.

When PostgreSQL cannot be reached, calls fail at once with `UnavailableError`
(UNAVAILABLE / 503, "the task store (PostgreSQL) is unreachable"); broken
connections are dropped and re-made on later calls, at most one attempt per
back-off step (0.1 s doubling to 5 s), so an outage neither hangs callers nor
floods the server with connects. Details (host names, SQL) go to the log only at
the operator's level. A login the server refuses (unknown role, wrong password,
missing database) is named as that, with the user and host, not as an outage
(`connect_failure`).
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from service.protocol.errors import UnavailableError

log = logging.getLogger("service.store.postgres")

_CONNECT_TIMEOUT_S = 5.0
_COMMAND_TIMEOUT_S = 30.0  # no statement hangs a caller forever
_BACKOFF_S = (0.1, 5.0)  # first and longest pause between reconnect attempts
_CLOSE_TIMEOUT_S = 2.0

UNREACHABLE = "The task store (PostgreSQL) is unreachable; try again later."

# Errors that mean "the database is not there right now", not "this call is wrong".
CONNECTION_ERRORS = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    # A connection whose server ended it while idle can be caught between states before
    # it notices ("another operation is in progress"): as good as lost.
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.InvalidCatalogNameError,
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,
    asyncpg.exceptions.InsufficientPrivilegeError,
)


def unreachable() -> UnavailableError:
    return UnavailableError(UNREACHABLE, retry_after=1.0)


def describe(exc: BaseException) -> str:
    """An exception for a log line or a startup error: its kind and message, no traceback."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def who(url: str) -> str:
    """`user U at HOST:PORT, database D` of a store URL (asyncpg's defaults where it names
    none), for messages: the user and host an operator must check, never the password."""
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    user = (
        urllib.parse.unquote(parts.username or "")
        or query.get("user")
        or os.environ.get("PGUSER")
        or getpass.getuser()
    )
    host = parts.netloc.rpartition("@")[2] or query.get("host") or os.environ.get("PGHOST")
    database = urllib.parse.unquote(parts.path.lstrip("/")) or query.get("database") or user
    return f"user {user} at {host or 'localhost'}, database {database}"


def connect_failure(url: str, exc: BaseException) -> str:
    """Why the first connection to PostgreSQL failed, named (a refused login is not an
    outage) with what to check; user and host shown, never the password."""
    text, where = _first_line(exc), who(url)
    if isinstance(exc, asyncpg.InvalidPasswordError):
        return (
            f"PostgreSQL authentication failed ({where}): {text}; "
            "check the password in the store URL (or PGPASSWORD, ~/.pgpass)"
        )
    if isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        if "does not exist" in text:
            return (
                f"PostgreSQL has no such role ({where}): {text}; "
                "create it (CREATE ROLE ... LOGIN) or fix the user in the store URL"
            )
        if "not permitted to log in" in text:
            return f"PostgreSQL refused the login ({where}): {text}; ALTER ROLE ... LOGIN"
        return f"PostgreSQL refused the login ({where}): {text}"  # e.g. no pg_hba.conf entry
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return (
            f"PostgreSQL database missing ({where}): {text}; "
            "create it (createdb) or fix the database in the store URL"
        )
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return f"PostgreSQL refused the user ({where}): {text}; GRANT CONNECT ON DATABASE ..."
    if isinstance(exc, asyncpg.TooManyConnectionsError):
        return f"PostgreSQL has no free connection ({where}): {text}"
    if isinstance(exc, (ValueError, asyncpg.ClientConfigurationError)):
        return f"PostgreSQL store URL not usable ({where}): {describe(exc)}"
    if isinstance(exc, asyncpg.PostgresError):  # the server answered: not an outage
        return f"PostgreSQL refused the connection ({where}): {describe(exc)}"
    return f"PostgreSQL unreachable ({where}): {describe(exc)}"


async def connect(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(
        url, timeout=_CONNECT_TIMEOUT_S, command_timeout=_COMMAND_TIMEOUT_S
    )


class Connections:
    """Up to `size` connections to one database; the first one is made by the opener."""

    def __init__(self, url: str, size: int, first: asyncpg.Connection) -> None:
        self._url = url
        self._size = size
        self._closed = False
        self._next_connect = 0.0  # loop time before which no reconnect is tried
        self._backoff = _BACKOFF_S[0]
        # Last in, first out: the connection used last (its statements prepared, its
        # caches warm) serves the next call; more connect only as concurrency needs.
        self._idle: asyncio.LifoQueue[asyncpg.Connection | None] = asyncio.LifoQueue()
        for _ in range(size - 1):
            self._idle.put_nowait(None)  # connected on first use
        self._idle.put_nowait(first)

    @asynccontextmanager
    async def conn(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection for one operation; connection failures become UnavailableError and
        the broken connection is dropped (re-made later, with back-off)."""
        if self.closed():
            raise RuntimeError("task store is not open")
        conn = await self._idle.get()
        try:
            if conn is None or conn.is_closed():
                conn = await self._reconnect()
            yield conn
        except CONNECTION_ERRORS as exc:
            log.warning("task store: PostgreSQL connection lost (%s)", describe(exc))
            if conn is not None:
                conn.terminate()
            conn = None
            raise unreachable() from None
        except asyncio.CancelledError:
            # Cancelled mid-statement (a caller's timeout): the connection may still be busy
            # with it, so it is not handed to the next caller; a new one is made on demand.
            if conn is not None:
                conn.terminate()
            conn = None
            raise
        finally:
            if conn is not None and self.closed():
                conn.terminate()  # handed back after a cancelled close: nobody takes it
                conn = None
            self._idle.put_nowait(conn if conn is not None and not conn.is_closed() else None)

    def closed(self) -> bool:
        """`close` was called: connections are no longer handed out or kept."""
        return self._closed

    async def _reconnect(self) -> asyncpg.Connection:
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_connect:
            raise unreachable()
        try:
            conn = await connect(self._url)
        except Exception as exc:
            self._next_connect = loop.time() + self._backoff
            self._backoff = min(self._backoff * 2, _BACKOFF_S[1])
            log.warning("task store: %s", connect_failure(self._url, exc))
            raise unreachable() from None
        if self._backoff > _BACKOFF_S[0]:
            log.info("task store: PostgreSQL reachable again")
        self._backoff = _BACKOFF_S[0]
        self._next_connect = 0.0
        return conn

    async def close(self) -> None:
        """Wait for every connection to come back, then close them. Cancelled, it ends
        those it holds or that are idle at once; the others end when they come back."""
        self._closed = True
        taken: list[asyncpg.Connection] = []
        try:
            for _ in range(self._size):
                conn = await self._idle.get()
                if conn is not None:
                    taken.append(conn)
        except asyncio.CancelledError:
            while not self._idle.empty():
                conn = self._idle.get_nowait()
                if conn is not None:
                    taken.append(conn)
            for conn in taken:
                conn.terminate()
            raise
        await asyncio.gather(
            *(conn.close(timeout=_CLOSE_TIMEOUT_S) for conn in taken), return_exceptions=True
        )
