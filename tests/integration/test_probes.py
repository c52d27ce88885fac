"""Liveness and readiness: `/health/live` stays 200 while the process answers,
`/health/ready` (and gRPC health) turn 503 / NOT_SERVING while the push queue's Redis or
the task store is unreachable and come back with it; `probe_port` serves the probes in
plaintext, without a client certificate, while the gateway demands one (mTLS); a drain
makes every probe 503, on both listeners.

Redis here is a server this test starts itself, on its own port, and stops and restarts
(never the machine's shared one)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import missing_part
from tests.process import free_port
from tests.push_util import eventually
from tests.security_util import make_pki

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class OwnRedis:
    """A redis-server of this test's own, on a free port, without persistence."""

    def __init__(self, directory) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing_part("redis-server is not installed: the readiness test with Redis NOT RUN")
        self.binary = binary
        self.port = free_port()
        self.directory = directory
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _spawn(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def start(self) -> None:
        self._spawn()

        async def answers() -> bool:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                return False
            writer.close()
            return True

        await eventually(answers, 15, "redis-server to listen")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
async def redis(tmp_path):
    server = OwnRedis(tmp_path)
    await server.start()
    yield server
    server.stop()


async def _health(port: int, service: str = "") -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service)
        )
        return reply.status


async def test_ready_follows_the_push_queue_while_live_stays_200(start_service, redis):
    service = await start_service(
        http_port=0,
        store="memory:",
        push_queue="redis-streams",
        push_redis_url=redis.url,
        push_redis_prefix="test-probes",
        readiness_shared_dependencies="fail",  # the default ignores a shared part
    )
    base = f"http://127.0.0.1:{service.http_port}"
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        ready = await http.get("/health/ready")
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        assert await _health(service.grpc_port) == SERVING

        redis.stop()

        async def unready() -> bool:
            return (await http.get("/health/ready")).status_code == 503

        await eventually(unready, 20, "/health/ready 503 with Redis down")
        assert (await http.get("/health/ready")).json()["unreachable"] == ["push_queue"]
        live = await http.get("/health/live")
        assert live.status_code == 200 and live.json() == {"status": "healthy"}
        assert (await http.get("/health")).status_code == 200
        for name in ("", "lf.a2a.v1.A2AService"):
            assert await _health(service.grpc_port, name) == NOT_SERVING

        await redis.start()  # the same port again

        async def ready_again() -> bool:
            return (await http.get("/health/ready")).status_code == 200

        await eventually(ready_again, 20, "/health/ready 200 with Redis back")
        assert await _health(service.grpc_port, "lf.a2a.v1.A2AService") == SERVING


async def test_ready_turns_503_when_the_store_is_unreachable(start_service):
    service = await start_service(http_port=0)  # SQLite in the data directory
    base = f"http://127.0.0.1:{service.http_port}"
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        assert (await http.get("/health/ready")).status_code == 200
        assert service.store is not None
        await service.store.close()  # the store cannot answer any more

        async def unready() -> bool:
            return (await http.get("/health/ready")).status_code == 503

        await eventually(unready, 20, "/health/ready 503 with the store closed")
        assert (await http.get("/health/ready")).json()["unreachable"] == ["store"]
        assert (await http.get("/health/live")).status_code == 200
        assert await _health(service.grpc_port) == NOT_SERVING


async def test_probe_port_needs_no_client_certificate_with_mtls_on(start_service, tmp_path):
    pki = make_pki(tmp_path / "pki")
    service = await start_service(
        http_port=0,
        store="memory:",
        tls_cert_file=pki.server_pem,
        tls_key_file=pki.server_key,
        tls_client_ca_file=pki.ca_pem,
        probe_port=0,
    )
    assert service.probe_port > 0
    no_cert = ssl.create_default_context(cafile=pki.ca_pem)
    async with httpx.AsyncClient(verify=no_cert, timeout=10) as https:
        with pytest.raises(httpx.HTTPError):  # the gateway's /health demands a certificate
            await https.get(f"https://localhost:{service.http_port}/health")
    probes = f"http://127.0.0.1:{service.probe_port}"
    async with httpx.AsyncClient(base_url=probes, timeout=10) as http:
        for path, body in (
            ("/health", {"status": "healthy"}),
            ("/health/live", {"status": "healthy"}),
            ("/health/ready", {"status": "ready"}),
        ):
            answer = await http.get(path)
            assert answer.status_code == 200 and answer.json() == body, path
            assert "strict-transport-security" not in answer.headers
        # Only the probes: no A2A operation, no card on the plaintext port.
        assert (await http.get("/tasks", headers={"A2A-Version": "1.0"})).status_code == 404
        assert (await http.get("/.well-known/agent-card.json")).status_code == 404


async def test_a_drain_makes_every_probe_503_on_both_listeners(start_service):
    service = await start_service(
        http_port=0, store="memory:", probe_port=0, drain_grace_seconds=2.0, drain_seconds=3.0
    )
    async with httpx.AsyncClient(timeout=10) as http:
        bases = (f"http://127.0.0.1:{service.http_port}", f"http://127.0.0.1:{service.probe_port}")
        for base in bases:
            assert (await http.get(f"{base}/health/ready")).status_code == 200
        stopping = asyncio.create_task(service.stop())
        try:

            async def all_draining() -> bool:
                for base in bases:
                    for path in ("/health", "/health/live", "/health/ready"):
                        answer = await http.get(f"{base}{path}")
                        if answer.status_code != 503 or answer.json() != {"status": "draining"}:
                            return False
                return True

            await eventually(all_draining, 10, "every probe 503 during the drain")
        finally:
            await stopping
