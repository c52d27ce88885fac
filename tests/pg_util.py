"""The machine's PostgreSQL for tests: a fresh database per use, dropped afterwards.

URL from A2A_TEST_POSTGRES_URL (default: trust auth, user postgres, database test on
127.0.0.1:5432); that database is only used to create and drop the test's own ones.
Unreachable: `missing_part` (a loud skip, a failure under CI=true).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from tests.conftest import missing_part

ADMIN_URL = os.environ.get("A2A_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def url_for(database: str) -> str:
    """ADMIN_URL with another database name (query parameters kept)."""
    base, _, query = ADMIN_URL.partition("?")
    head = base.rsplit("/", 1)[0]
    return f"{head}/{database}" + (f"?{query}" if query else "")


async def admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(ADMIN_URL, timeout=5)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        missing_part(f"POSTGRESQL NOT REACHABLE at {ADMIN_URL} ({exc}): PostgreSQL tests NOT RUN")
        raise  # not reached


async def create_database() -> tuple[str, str]:
    """(url, name) of a new empty database; `drop_database(name)` when done."""
    name = f"a2a_test_{uuid.uuid4().hex[:12]}"
    conn = await admin()
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return url_for(name), name


async def drop_database(name: str) -> None:
    """Drop it, ending whatever is still connected."""
    conn = await admin()
    try:
        await conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@asynccontextmanager
async def fresh_database() -> AsyncIterator[tuple[str, str]]:
    """(url, name) of a new empty database, dropped at the end."""
    url, name = await create_database()
    try:
        yield url, name
    finally:
        await drop_database(name)


async def cut_access(name: str) -> int:
    """Refuse new connections to the database and end the ones it has (an outage as the
    service sees it); returns how many were ended."""
    conn = await admin()
    try:
        await conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        ended = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
        return int(ended)
    finally:
        await conn.close()


async def restore_access(name: str) -> None:
    conn = await admin()
    try:
        await conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    finally:
        await conn.close()
