"""Connection limits: idle and slow connections are closed after their deadlines, the
number of open connections per listener is capped (past it a waiting connection is
evicted, else a fixed 503), gRPC closes silent and idle connections and caps its own,
an aborted upload is no internal error, repeated errors are summarised in the log,
and, in a child process with only 256 descriptors, hundreds of idle and slow sockets
do not stop health checks, SendMessage or push delivery (docs/operations.md, "Connection limits").

Every wait is bounded; nothing asserts a duration."""

from __future__ import annotations

import asyncio
import errno
import io
import logging
import os
import resource
import selectors
import signal
import socket
import ssl
import subprocess
import sys
import time

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.limits.connections import BUSY_RESPONSE
from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.app import config
from service.net import limits as netlimits
from service.ops.logflood import FloodFilter
from tests.conftest import user_message
from tests.process import ROOT, free_port, shows_traceback
from tests.push_util import Receiver, eventually

V1 = {"A2A-Version": "1.0"}
BOUND = 15.0  # seconds any single wait may take before the test fails


async def read_until_closed(reader: asyncio.StreamReader, seconds: float = BOUND) -> bytes:
    """What the server sent before closing (a reset counts as closed); fails if it stays open."""
    data = b""
    try:
        async with asyncio.timeout(seconds):
            while chunk := await reader.read(65536):
                data += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open (got {data[:200]!r})") from None
    return data


async def http_service(start_service, **overrides):
    settings = dict(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        http_header_timeout_seconds=0.5,
        http_body_timeout_seconds=1.0,
        http_keepalive_timeout_seconds=0.5,
    )
    settings.update(overrides)
    return await start_service(**settings)


def send_request(text: str = "hello") -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"'
        + os.urandom(6).hex().encode()
        + b'","role":"ROLE_USER","parts":[{"text":"'
        + text.encode()
        + b'"}]}}}'
    )


# ------------------------------------------------------------------- HTTP deadlines


async def test_silent_and_slow_http_connections_are_closed(start_service):
    service = await http_service(start_service)
    port = service.http_port
    # Sends nothing at all.
    silent_r, silent_w = await asyncio.open_connection("127.0.0.1", port)
    # Never finishes its headers.
    partial_r, partial_w = await asyncio.open_connection("127.0.0.1", port)
    partial_w.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
    # Trickles a body, one byte at a time.
    trickle_r, trickle_w = await asyncio.open_connection("127.0.0.1", port)
    trickle_w.write(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"A2A-Version: 1.0\r\nContent-Length: 1000\r\n\r\n{"
    )

    async def trickle() -> None:
        for _ in range(int(BOUND / 0.1)):
            await asyncio.sleep(0.1)
            if trickle_w.is_closing():
                return
            trickle_w.write(b" ")

    trickler = asyncio.create_task(trickle())
    # A keep-alive connection: one request answered, then half of the next one's headers.
    kept_r, kept_w = await asyncio.open_connection("127.0.0.1", port)
    kept_w.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(kept_r.readuntil(b"\r\n\r\n"), BOUND)
    assert head.startswith(b"HTTP/1.1 200")
    await asyncio.wait_for(
        kept_r.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])), BOUND
    )
    kept_w.write(b"GET /health HTTP/1.1\r\nHo")
    # A keep-alive connection left idle after its response.
    idle_r, idle_w = await asyncio.open_connection("127.0.0.1", port)
    idle_w.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")

    assert await read_until_closed(silent_r) == b""
    assert await read_until_closed(partial_r) == b""
    assert await read_until_closed(kept_r) == b""
    assert (await read_until_closed(idle_r)).startswith(b"HTTP/1.1 200")  # then closed when idle
    answer = await read_until_closed(trickle_r)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    trickler.cancel()
    for w in (silent_w, partial_w, trickle_w, kept_w, idle_w):
        w.close()
    assert service.http.guard.timed_out >= 4
    # Meanwhile and after, ordinary requests work.
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
        r = await client.post(
            "/", content=send_request(), headers={**V1, "Content-Type": "application/json"}
        )
        assert (
            r.status_code == 200
            and r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        )


async def test_a_request_that_arrives_whole_starts_no_timer(start_service):
    """The hot path: keep-alive requests sent whole leave no timer of ours behind."""
    service = await http_service(
        start_service,
        http_header_timeout_seconds=30,
        http_body_timeout_seconds=30,
        http_keepalive_timeout_seconds=30,
    )
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=BOUND
    ) as client:
        for _ in range(5):
            r = await client.post(
                "/", content=send_request(), headers={**V1, "Content-Type": "application/json"}
            )
            assert r.status_code == 200
        (protocol,) = list(service.http._server.server_state.connections)
        assert protocol._timer is None and protocol._counted._timer is None
        assert protocol in service.http.guard.waiting  # idle between requests: evictable


async def test_headers_past_16_kib_are_refused_and_pipelined_requests_answered_in_order(
    start_service,
):
    """llhttp buffers what it is fed: the guard bounds a request's line and headers (as h11
    did), and requests sent back to back on one connection are answered one after another."""
    service = await http_service(start_service, http_header_timeout_seconds=30)

    async def answer_to(*pieces: bytes) -> bytes:
        """What the server answers, then closes, to `pieces` sent one by one."""
        reader, writer = await asyncio.open_connection("127.0.0.1", service.http_port)
        try:
            try:
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.01)  # a separate read for each piece, not one buffer
            except (ConnectionResetError, BrokenPipeError):
                pass  # refused while still sending: read what it answered
            return await read_until_closed(reader)
        finally:
            writer.close()

    filler = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"v" * 1000) for i in range(20))
    head = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: a\r\n"
    answer = await answer_to(head + filler)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    # one header line that never ends, sent in pieces: closed (long before the header
    # deadline); the 400 may be lost to the reset of a connection closed while it sends
    answer = await answer_to(head + b"X-Endless: ", *[b"v" * 1024] * 20)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400 "), answer[:200]

    bodies = [send_request(f"pipelined {i}") for i in range(3)]
    answer = await answer_to(
        b"".join(
            b"POST / HTTP/1.1\r\nHost: a\r\nA2A-Version: 1.0\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            for body in bodies
        )
        + head
        + b"Connection: close\r\nX-Near-Limit: "
        + b"v" * 15000
        + b"\r\n\r\n"
    )
    assert answer.count(b"HTTP/1.1 200 OK") == 4, answer[:500]
    where = [answer.find(b"pipelined %d" % i) for i in range(3)]
    assert -1 not in where and where == sorted(where), answer[:500]


async def test_requests_pipelined_behind_a_stream_are_bounded_and_never_cut_into_it(
    start_service,
):
    """llhttp parses what a client pipelines behind a stream into queued requests: past
    MAX_PIPELINED the connection is closed, and neither that nor a malformed request puts a
    400 into the stream being answered."""
    service = await http_service(start_service, http_header_timeout_seconds=30)
    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":'
        b'{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"slow 400"}]}}}'
    )
    head = (
        b"POST / HTTP/1.1\r\nHost: a\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    for behind in (
        b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n" * 2000,
        b"BAD\x01 / HTTP/1.1\r\n\r\n",
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", service.http_port)
        try:
            writer.write(head + body)
            await writer.drain()
            first = await asyncio.wait_for(reader.readuntil(b"data: "), BOUND)
            assert first.startswith(b"HTTP/1.1 200 "), first[:200]
            try:
                writer.write(behind)
                await writer.drain()
            except (ConnectionResetError, BrokenPipeError):
                pass
            rest = await read_until_closed(reader)
            assert b"HTTP/1.1 400" not in rest, rest[-300:]
        finally:
            writer.close()


# ------------------------------------------------------------------- the cap


async def test_past_the_cap_a_waiting_connection_is_evicted_else_503(start_service):
    service = await http_service(
        start_service,
        max_connections=8,
        http_header_timeout_seconds=30,
        http_body_timeout_seconds=30,
        http_keepalive_timeout_seconds=30,
    )
    port = service.http_port
    assert service.http.guard.cap == 8
    # Eight idle connections fill the cap; a new client evicts the oldest one.
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(8)]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
        assert (await client.get("/health")).status_code == 200
    assert await read_until_closed(idle[0][0]) == b""
    assert service.http.guard.evicted >= 1
    for _, w in idle:
        w.close()
    # Eight uploads in progress cannot be evicted: a ninth connection gets the fixed 503.
    uploads = []
    for _ in range(8):
        for _attempt in range(int(BOUND / 0.05)):  # the evicted and closed ones go asynchronously
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            await w.drain()
            try:
                early = await asyncio.wait_for(r.read(100), 0.05)
            except TimeoutError:
                break  # held open: admitted
            w.close()
            assert early.startswith(b"HTTP/1.1 503"), early
        uploads.append((r, w))
    r, w = await asyncio.open_connection("127.0.0.1", port)
    busy = await read_until_closed(r)
    assert busy == BUSY_RESPONSE and b"Retry-After: 1" in busy
    w.close()
    assert service.http.guard.refused >= 1
    # When an upload ends, there is room again.
    uploads[0][1].close()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
        for _attempt in range(int(BOUND / 0.05)):
            try:
                r = await client.get("/health")
            except httpx.TransportError:
                r = None
            if r is not None and r.status_code == 200:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no room after an upload ended")
    for _, w in uploads:
        w.close()


async def test_tls_handshakes_count_and_have_the_header_deadline(start_service, tmp_path):
    """Over TLS a connection is counted from accept, a handshake that never comes is cut at
    the header deadline, and past the cap a connection is closed without a (plaintext) 503."""
    from tests.security_util import make_pki

    pki = make_pki(tmp_path / "pki")
    service = await http_service(
        start_service,
        max_connections=2,
        http_header_timeout_seconds=0.5,
        tls_cert_file=pki.server_pem,
        tls_key_file=pki.server_key,
    )
    guard = service.http.guard
    silent = [await asyncio.open_connection("127.0.0.1", service.http_port) for _ in range(3)]
    answers = [await read_until_closed(reader) for reader, _ in silent]
    assert answers == [b"", b"", b""]  # two cut at the deadline, one refused at once
    assert guard.refused == 1 and guard.timed_out >= 2
    for _, writer in silent:
        writer.close()
    context = ssl.create_default_context(cafile=pki.ca_pem)
    async with httpx.AsyncClient(
        base_url=f"https://localhost:{service.http_port}", verify=context, timeout=BOUND
    ) as client:
        assert (await client.get("/health")).status_code == 200


def test_the_cap_fits_the_descriptor_limit(monkeypatch):
    s = config.Settings(max_connections=1000)
    monkeypatch.setattr(netlimits, "raise_nofile_limit", lambda: (256, 256))
    assert netlimits.connection_cap(s) == (256 - 128) // 2  # two listeners share what is left
    assert (
        netlimits.connection_cap(config.Settings(max_connections=1000, http_port=-1)) == 256 - 128
    )
    assert netlimits.connection_cap(config.Settings(max_connections=10)) == 10
    monkeypatch.setattr(netlimits, "raise_nofile_limit", lambda: (1 << 20, 1 << 20))
    assert netlimits.connection_cap(s) == 1000
    options = dict(
        netlimits.grpc_server_options(config.Settings(grpc_max_connection_age_seconds=0))
    )
    assert options["grpc.max_allowed_incoming_connections"] == 1000
    assert options["grpc.server_handshake_timeout_ms"] == 10_000
    assert options["grpc.max_connection_idle_ms"] == 300_000
    assert "grpc.max_connection_age_ms" not in options  # 0 = no limit
    for bad in (
        {"max_connections": 0},
        {"fd_reserve": 1},
        {"http_header_timeout_seconds": 0},
        {"grpc_max_connection_idle_seconds": -1},
    ):
        with pytest.raises(config.ConfigError, match=next(iter(bad))):
            config.validate(config.Settings(**bad))


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one():
    code = (
        "import resource; from service.net.limits import raise_nofile_limit; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 512)); print(*raise_nofile_limit())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    ).stdout
    assert out.split() == ["512", "512"]


# ------------------------------------------------------------------- gRPC


async def test_grpc_closes_silent_connections_caps_them_and_closes_idle_ones(start_service):
    service = await start_service(
        store="memory:",
        max_connections=4,
        grpc_handshake_timeout_seconds=0.5,
        grpc_max_connection_idle_seconds=0.5,
    )
    port = service.grpc_port
    silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(6)]
    # Past the cap of 4 the extra ones are closed at once, without a byte; the others get
    # grpc's HTTP/2 SETTINGS and, at the handshake deadline (or the idle limit), a GOAWAY.
    answers = [await read_until_closed(reader) for reader, _ in silent]
    assert sum(answer == b"" for answer in answers) == 2, answers
    assert all(b"handshake timeout" in a or b"idle" in a for a in answers if a), answers
    for _, writer in silent:
        writer.close()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(
            health_pb2.HealthCheckRequest(), timeout=BOUND, wait_for_ready=True
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # A connection without calls is closed (GOAWAY) after the idle limit: the channel goes idle.
        for _ in range(int(BOUND / 0.05)):
            if channel.get_state() == grpc.ChannelConnectivity.IDLE:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the idle gRPC connection was not closed")
        # ... and the next call simply reconnects.
        reply = await health.Check(
            health_pb2.HealthCheckRequest(), timeout=BOUND, wait_for_ready=True
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


# ------------------------------------------------------------------- logs


async def test_an_aborted_upload_is_not_an_internal_error(start_service, caplog):
    service = await http_service(start_service, http_body_timeout_seconds=30)
    caplog.set_level(logging.INFO)
    uploads = []
    for path in (b"/", b"/message:send"):
        reader, writer = await asyncio.open_connection("127.0.0.1", service.http_port)
        writer.write(
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"A2A-Version: 1.0\r\nContent-Length: 100000\r\n\r\n" + b'{"x":"' + b"y" * 1000
        )
        await writer.drain()
        uploads.append(writer)
    await eventually(
        lambda: service.http.in_flight() == 2, BOUND, "both endpoints reading their bodies"
    )
    for writer in uploads:
        writer.close()
    await eventually(lambda: service.http.in_flight() == 0, BOUND, "both requests ended")
    assert "internal error" not in caplog.text and "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_repeated_errors_are_summarised_without_tracebacks():
    now = [0.0]
    flood = FloodFilter(window=60, clock=lambda: now[0])
    logger = logging.getLogger("tests.flood")
    logger.propagate = False
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger.addHandler(handler)
    logger.addFilter(flood)
    try:
        emfile = OSError(errno.EMFILE, "Too many open files")
        for _ in range(10_000):
            logger.error(
                "socket.accept() out of system resource\nsocket: <fd=6>",
                exc_info=(OSError, emfile, None),
            )
        logger.warning("another kind")
        now[0] = 61.0
        logger.warning("another kind")  # a later record brings the summary of the ended window
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(flood)
    lines = out.getvalue()
    assert lines.count("out of system resource") == 2, lines  # the first one, and its summary
    assert "9999 more like this in the last 60 s: socket.accept() out of system resource" in lines
    assert "Too many open files" in lines and "Traceback" not in lines
    assert len(lines) < 1000


# ------------------------------------------------------------------- the proof


def _limited_nofile() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


async def test_hundreds_of_idle_sockets_do_not_starve_a_server_with_256_descriptors(tmp_path):
    """The security review's scenario, scaled down: RLIMIT_NOFILE 256, max_connections 64,
    short deadlines; hundreds of idle, half-sent and trickling sockets on both ports."""
    receiver = await Receiver().start()
    grpc_port, http_port = free_port(), free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "A2A_MAX_CONNECTIONS": "64",
        "A2A_HTTP_HEADER_TIMEOUT_SECONDS": "1.5",
        "A2A_HTTP_BODY_TIMEOUT_SECONDS": "2",
        "A2A_HTTP_KEEPALIVE_TIMEOUT_SECONDS": "1",
        "A2A_GRPC_HANDSHAKE_TIMEOUT_SECONDS": "1.5",
        "A2A_PUSH_ALLOW_NETWORKS": "127.0.0.0/8",
        "A2A_PUSH_NOTIFICATIONS": "true",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service",
        "serve",
        "--host",
        "127.0.0.1",
        "--grpc-port",
        str(grpc_port),
        "--http-port",
        str(http_port),
        "--data-dir",
        str(tmp_path / "data"),
        "--agent",
        "echo",
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=_limited_nofile,
    )
    assert proc.stdout is not None
    flood: list[socket.socket] = []
    output = bytearray()  # the server's log
    collector: asyncio.Task | None = None
    peak = -1
    tally: dict[str, int] = {}
    try:
        while b"A2A service ready" not in output:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, output.decode(errors="replace")
            output += line

        async def collect() -> (
            None
        ):  # the log, read as it comes (a full pipe would stall the server)
            while chunk := await proc.stdout.read(65536):
                if len(output) < 1 << 20:
                    output.extend(chunk[: (1 << 20) - len(output)])

        collector = asyncio.create_task(collect())
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
        health = health_pb2_grpc.HealthStub(channel)
        await health.Check(health_pb2.HealthCheckRequest(), timeout=BOUND, wait_for_ready=True)

        # The flood: 300 silent and 100 half-sent-header sockets on HTTP, 50 trickling
        # bodies, 200 silent sockets on gRPC.
        firsts: dict[socket.socket, bytes] = {}

        def connect(port: int, first: bytes = b"") -> socket.socket:
            s = socket.socket()
            s.setblocking(False)
            flood.append(s)
            s.connect_ex(("127.0.0.1", port))
            firsts[s] = first
            return s

        trickle_head = (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"A2A-Version: 1.0\r\nContent-Length: 5000\r\n\r\n{"
        )
        # Five trickles first, taken while there is room: mid-body, they are never evicted,
        # and only their body deadline (408) ends them. A request on a new connection after
        # them is answered once they were accepted (the listen queue is first in, first out).
        early = []
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", http_port), timeout=BOUND)
            s.sendall(trickle_head)
            s.setblocking(False)
            flood.append(s)
            early.append(s)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{http_port}", timeout=BOUND
        ) as client:
            assert (await client.get("/health")).status_code == 200
        silent = [connect(http_port) for _ in range(300)]
        partial = [
            connect(http_port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Ty") for _ in range(100)
        ]
        trickling = early + [connect(http_port, trickle_head) for _ in range(45)]
        grpc_silent = [connect(grpc_port) for _ in range(200)]
        pending = set(flood)
        with selectors.DefaultSelector() as sel:  # wait (bounded) until every connect is through
            for s in flood:
                sel.register(s, selectors.EVENT_WRITE)
            deadline = time.monotonic() + BOUND
            while pending and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=0.2):
                    pending.discard(key.fileobj)
                    sel.unregister(key.fileobj)
        assert not pending, f"{len(pending)} of {len(flood)} connects did not complete"
        for s, first in firsts.items():
            if first:
                try:
                    s.send(first)
                except OSError:
                    pass  # refused or evicted already: seen below
        peak = _open_fds(proc.pid)

        # While they are open: HTTP health and SendMessage from a new client, gRPC health and
        # SendMessage (with a push notification) on the existing channel, push delivery. A
        # new connection that arrives while evictions are still closing may be told 503 +
        # Retry-After (the documented answer): the client does as told, a few times at most.
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{http_port}", timeout=BOUND
        ) as client:

            async def served(method: str, path: str, **kwargs) -> httpx.Response:
                for _ in range(5):
                    r = await client.request(method, path, **kwargs)
                    if r.status_code != 503:
                        return r
                    await asyncio.sleep(float(r.headers["retry-after"]))
                return r

            assert (await served("GET", "/health")).status_code == 200
            r = await served(
                "POST",
                "/",
                content=send_request(),
                headers={**V1, "Content-Type": "application/json"},
            )
            assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=BOUND)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        request = pb.SendMessageRequest(message=user_message("pushed"))
        request.configuration.task_push_notification_config.CopyFrom(
            pb.TaskPushNotificationConfig(url=receiver.url)
        )
        task = (await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(request, timeout=BOUND)).task
        assert task.status.state == pb.TASK_STATE_COMPLETED
        await eventually(lambda: len(receiver.requests) >= 1, BOUND, "a push notification")
        peak = max(peak, _open_fds(proc.pid))

        # Every flood socket is closed by the server (evicted, refused with 503, or past its
        # deadline: trickling bodies get a 408); the trickles keep trickling meanwhile.
        answers: dict[socket.socket, bytes] = {s: b"" for s in flood}
        open_ = set(flood)
        sel = selectors.DefaultSelector()
        for s in flood:
            sel.register(s, selectors.EVENT_READ)
        deadline = time.monotonic() + 3 * BOUND
        while open_ and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.2):
                s = key.fileobj
                try:
                    chunk = s.recv(65536)
                except (ConnectionResetError, BrokenPipeError):
                    chunk = b""
                except BlockingIOError:
                    continue
                if chunk:
                    answers[s] += chunk
                else:
                    open_.discard(s)
                    sel.unregister(s)
            for s in trickling:
                if s in open_:
                    try:
                        s.send(b" ")
                    except OSError:
                        pass
            peak = max(peak, _open_fds(proc.pid))
        sel.close()
        assert not open_, f"{len(open_)} flood sockets still open"
        for s in silent + partial:
            assert answers[s] in (b"", BUSY_RESPONSE), answers[s][:100]
        for s in (
            grpc_silent
        ):  # past grpc's cap: nothing; else its SETTINGS, then GOAWAY at the deadline
            assert answers[s] == b"" or answers[s].endswith(b"handshake timeout"), answers[s][-100:]
        for s in trickling:
            assert answers[s].startswith((b"HTTP/1.1 408", b"HTTP/1.1 503")), answers[s][:100]
        assert all(answers[s].startswith(b"HTTP/1.1 408") for s in early), [
            answers[s][:40] for s in early
        ]
        tally = {
            "http 503": sum(answers[s] == BUSY_RESPONSE for s in silent + partial + trickling),
            "http closed silently": sum(answers[s] == b"" for s in silent + partial),
            "http 408": sum(answers[s].startswith(b"HTTP/1.1 408") for s in trickling),
            "grpc refused": sum(answers[s] == b"" for s in grpc_silent),
            "grpc handshake timeout": sum(answers[s] != b"" for s in grpc_silent),
        }

        # Afterwards: a new gRPC connection, health on both, and no descriptor trouble.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as fresh:
            reply = await health_pb2_grpc.HealthStub(fresh).Check(
                health_pb2.HealthCheckRequest(), timeout=BOUND, wait_for_ready=True
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{http_port}", timeout=BOUND
        ) as client:
            assert (await client.get("/health")).status_code == 200
        await channel.close()
        assert 0 < peak < 256
    finally:
        for s in flood:
            s.close()
        await receiver.stop()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if collector is not None:
            await asyncio.wait_for(collector, 10)
    log = bytes(output)
    text = log.decode(errors="replace")
    print(
        f"\nproof: {len(flood)} flood sockets ({tally}), peak {peak} descriptors of 256, "
        f"server log {len(log)} bytes:\n{text}"
    )
    assert proc.returncode == 0, text
    assert (
        not shows_traceback(text)
        and "Too many open files" not in text
        and "internal error" not in text
    ), text
    # The flood is summarised, not logged line by line; what remains is one access line per
    # request the server took (the trickles it admitted, and this test's own requests).
    lines = text.splitlines()
    access = [line for line in lines if '"logger": "service.access"' in line]
    assert len("\n".join(line for line in lines if line not in access)) < 6000, text
    assert len(access) <= 50 + 3, text
