"""Back-pressure after a refusal on a real HTTP listener (gateway.limits.backoff): the 429 with
Retry-After comes at once, the connection that got it is not read again until its pause
is over, and meanwhile other connections and principals are served at once. Orderings
only: which answer came first, never how long anything took."""

from __future__ import annotations

import asyncio

import pytest

from tests.security_util import TOKENS, bearer_settings

BOUND = 20.0  # seconds any one wait may take before the test fails (a pause is at most 2 s here)


class Conn:
    """One keep-alive HTTP/1.1 connection on a raw socket: requests and whole answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, path: str, principal: str | None = None) -> None:
        auth = f"Authorization: Bearer {TOKENS[principal]}\r\n" if principal else ""
        self.writer.write(
            f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}A2A-Version: 1.0\r\n\r\n".encode()
        )

    async def answer(self) -> tuple[int, dict[str, str]]:
        """The next answer's status and headers (its body is read and dropped)."""
        async with asyncio.timeout(BOUND):
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (x.partition(":") for x in lines[1:] if x)
            }
            await self.reader.readexactly(int(headers.get("content-length", "0")))
        return int(lines[0].split()[1]), headers

    async def get(self, path: str, principal: str | None = None) -> tuple[int, dict[str, str]]:
        self.send(path, principal)
        return await self.answer()

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def limited(start_service):
    # 0.01 tokens per second and a burst of 1: alice's second request is refused, and
    # nothing refills during the test (the hint says 100 s; a pause is at most 2 s).
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        rate_limit_per_principal=0.01,
        rate_limit_burst=1,
        **bearer_settings(),
    )
    opened: list[Conn] = []

    async def connect() -> Conn:
        conn = await Conn.open(service.http_port)
        opened.append(conn)
        return conn

    yield service, connect
    for conn in opened:
        conn.close()


async def test_a_refused_connection_is_read_again_only_after_its_pause(limited):
    service, connect = limited
    guard = service.http.guard
    alice, bob, alice2 = await connect(), await connect(), await connect()
    assert (await alice.get("/tasks", "alice"))[0] == 200
    assert guard.backed_off == 0  # an answer that is no refusal pauses nothing

    status, headers = await alice.get("/tasks", "alice")
    assert status == 429 and int(headers["retry-after"]) >= 1  # the refusal itself comes at once
    assert guard.backed_off == 1

    # The same connection asks for something anyone may have; then, later, another
    # connection (another principal, and alice herself) asks too.
    alice.send("/health")
    await asyncio.sleep(0)
    assert (await bob.get("/tasks", "bob"))[0] == 200
    assert (await alice2.get("/.well-known/agent-card.json"))[0] == 200
    held = asyncio.ensure_future(alice.answer())
    await asyncio.sleep(0)
    assert not held.done()  # still paused although later requests were answered
    # ... and answered once the pause is over: back-pressure, not a hang.
    assert (await held)[0] == 200
    # Read again: the next refusal on this connection pauses it again.
    assert (await alice.get("/tasks", "alice"))[0] == 429
    assert guard.backed_off == 2


async def test_requests_of_a_refused_connection_sent_together_wait_for_the_pause(limited):
    """Pipelined requests behind a refusal are not parsed past it during the pause."""
    service, connect = limited
    alice, other = await connect(), await connect()
    assert (await alice.get("/tasks", "alice"))[0] == 200
    alice.send("/tasks", "alice")  # refused
    alice.send("/health")  # sent with it, before the refusal came back
    status, headers = await alice.answer()
    assert status == 429 and "retry-after" in headers
    assert (await other.get("/health"))[0] == 200
    held = asyncio.ensure_future(alice.answer())
    await asyncio.sleep(0)
    assert not held.done()
    assert (await held)[0] == 200
    assert service.http.guard.backed_off == 1


async def test_a_refusal_that_closes_its_connection_leaves_nothing_behind(limited):
    service, connect = limited
    alice = await connect()
    assert (await alice.get("/tasks", "alice"))[0] == 200
    alice.writer.write(
        f"GET /tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKENS['alice']}\r\n"
        "A2A-Version: 1.0\r\nConnection: close\r\n\r\n".encode()
    )
    status, headers = await alice.answer()
    assert status == 429 and "retry-after" in headers
    async with asyncio.timeout(BOUND):
        assert await alice.reader.read() == b""  # closed at once, not paused
    assert service.http.guard.backed_off == 0
