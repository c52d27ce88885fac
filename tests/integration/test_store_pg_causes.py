"""Why the PostgreSQL store cannot open, named against the machine's PostgreSQL (trust auth):
an unknown role, a role that may not log in, a missing database; a wrong password from a
stand-in server speaking the protocol (trust auth never asks for one). Never "unreachable"
for a login the server refused; the user and host shown, never the password. Also the CLI's
one line. (The wording for each cause: tests/unit/test_error_hints.py.)"""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import pytest

from service.store.postgres import PostgresTaskStore
from tests.conftest import ROOT
from tests.pg_util import ADMIN_URL, admin, url_for

PASSWORD = "pw-" + uuid.uuid4().hex[:8]  # must appear in no message


def with_user(url: str, user: str, password: str = PASSWORD) -> str:
    """ADMIN_URL's host and database as another user, with a password."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{user}:{password}@{rest.rpartition('@')[2]}"


async def open_failure(url: str) -> str:
    store = PostgresTaskStore(url)
    with pytest.raises(RuntimeError) as info:
        await store.open()
    message = str(info.value)
    assert PASSWORD not in message and "unreachable" not in message
    return message


@pytest.fixture
async def nologin_role() -> AsyncIterator[str]:
    name = f"a2a_test_nologin_{uuid.uuid4().hex[:8]}"
    conn = await admin()
    try:
        await conn.execute(f"CREATE ROLE \"{name}\" NOLOGIN PASSWORD '{PASSWORD}'")
        yield name
    finally:
        await conn.execute(f'DROP ROLE IF EXISTS "{name}"')
        await conn.close()


async def test_an_unknown_role_is_named_with_user_and_host():
    await (await admin()).close()  # PostgreSQL is there (else a loud skip)
    user = f"a2a_test_nobody_{uuid.uuid4().hex[:8]}"
    message = await open_failure(with_user(ADMIN_URL, user))
    assert message.startswith("PostgreSQL has no such role")
    assert f"user {user} at " in message and f'role "{user}" does not exist' in message


async def test_a_role_that_may_not_log_in_is_named(nologin_role):
    message = await open_failure(with_user(ADMIN_URL, nologin_role))
    assert message.startswith("PostgreSQL refused the login")
    assert "not permitted to log in" in message and f"user {nologin_role} at " in message


async def test_a_missing_database_is_named():
    await (await admin()).close()
    name = f"a2a_test_missing_{uuid.uuid4().hex[:8]}"
    message = await open_failure(url_for(name))
    assert message.startswith("PostgreSQL database missing")
    assert f"database {name}" in message and "createdb" in message


async def refuse_password(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A PostgreSQL server as far as login: no TLS, asks for a password, refuses it."""
    try:
        length, code = struct.unpack("!ii", await reader.readexactly(8))
        if code == 80877103:  # SSLRequest: no TLS here, then the real startup message
            writer.write(b"N")
            length, code = struct.unpack("!ii", await reader.readexactly(8))
        await reader.readexactly(length - 8)
        writer.write(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
        await writer.drain()
        kind, size = struct.unpack("!ci", await reader.readexactly(5))
        await reader.readexactly(size - 4)  # the password: read, never echoed
        fields = b"".join(
            tag + text.encode() + b"\0"
            for tag, text in (
                (b"S", "FATAL"),
                (b"V", "FATAL"),
                (b"C", "28P01"),
                (b"M", 'password authentication failed for user "alice"'),
            )
        )
        body = fields + b"\0"
        writer.write(b"E" + struct.pack("!i", len(body) + 4) + body)
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def test_a_wrong_password_is_named_not_called_an_outage():
    server = await asyncio.start_server(refuse_password, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        message = await open_failure(f"postgresql://alice:{PASSWORD}@127.0.0.1:{port}/a2a")
    finally:
        server.close()
        await server.wait_closed()
    assert message.startswith("PostgreSQL authentication failed")
    assert f"user alice at 127.0.0.1:{port}, database a2a" in message
    assert "check the password" in message


async def test_the_cli_says_the_cause_in_one_line(tmp_path):
    await (await admin()).close()
    user = f"a2a_test_nobody_{uuid.uuid4().hex[:8]}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("A2A_")}
    out = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "service",
            "serve",
            "--store",
            with_user(ADMIN_URL, user),
            "--data-dir",
            str(tmp_path / "data"),
            "--grpc-port",
            "0",
            "--http-port",
            "-1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.startswith("cannot start:")]
    assert len(lines) == 1, out.stderr
    assert "cannot start: store: cannot open postgresql://***@" in lines[0]
    assert "PostgreSQL has no such role" in lines[0] and f"user {user} at " in lines[0]
    assert PASSWORD not in out.stderr and "unreachable" not in out.stderr
    assert "Traceback" not in out.stderr
