"""Every probe of deploy/ is answered by a real server started with deploy/'s own
environment: the Kubernetes Deployment's (its ConfigMap, its env with `$(VAR)` expanded,
the image's ENV beneath), and a compose replica's (the Dockerfile's HEALTHCHECK and the
compose healthcheck run as written). Only what cannot be the same here is changed: each
container port becomes a free port of this machine, the listen and probe addresses
127.0.0.1, the data and artifact directories temporary ones, the PostgreSQL URL a fresh
database of the machine's server, the Redis URLs the machine's Redis with key prefixes of
this test's own, and the collector address a port where nothing listens."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest
import redis
from cryptography.fernet import Fernet
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests import pg_util
from tests.conftest import missing_part
from tests.deploy_util import (
    PROBES,
    clean_environ,
    compose,
    container_env,
    healthcheck_command,
    image_env,
    interpolate,
    one,
    resources,
)
from tests.process import ROOT, free_port

REDIS_URL = os.environ.get("A2A_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


class Server:
    """`python -m service serve` with only an environment (no flags: as in a container)."""

    def __init__(self, env: dict[str, str], live_url: str, log_path: str) -> None:
        self.log = open(log_path, "w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service", "serve"],
            cwd=ROOT,
            env={**env, "PYTHONPATH": str(ROOT)},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:  # up: the liveness path answers (what a startupProbe waits for)
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited during startup:\n{self.output()}")
            try:
                if httpx.get(live_url, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not come up:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        self.proc.terminate()
        try:
            code = self.proc.wait(40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(5)
        self.log.close()
        return code


def eventually_200(url: str, seconds: float = 20) -> httpx.Response:
    """Readiness needs the background checks of the store, bus and queue (every 2 s)."""
    deadline = time.monotonic() + seconds
    while True:
        response = httpx.get(url, timeout=2)
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    url, name = asyncio.run(pg_util.create_database())
    try:
        yield url
    finally:
        asyncio.run(pg_util.drop_database(name))


@pytest.fixture(scope="module")
def redis_prefix() -> Iterator[str]:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        missing_part(f"REDIS NOT REACHABLE at {REDIS_URL} ({exc}): deploy probe tests NOT RUN")
    prefix = f"a2a-deploy-test-{uuid.uuid4().hex[:10]}"
    try:
        yield prefix
    finally:
        for key in client.scan_iter(match=f"{prefix}*", count=500):
            client.delete(key)
        client.close()


def own_prefixes(env: dict[str, str], prefix: str) -> dict[str, str]:
    """The machine's Redis is shared: this test's keys and channels under its own prefix."""
    return {**env, "A2A_BUS_PREFIX": f"{prefix}:bus", "A2A_PUSH_REDIS_PREFIX": f"{prefix}:push"}


def test_the_k8s_probes_metrics_and_grpc_health_answer_with_the_manifests_env(
    tmp_path, database, redis_prefix
):
    docs = resources()
    pod = one("Deployment", docs)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    secrets = {
        "store-url": database,
        "redis-url": REDIS_URL,
        "push-secret-keys": Fernet.generate_key().decode(),
        "auth-bearer-tokens": f"ops={uuid.uuid4().hex}",
    }
    fields = {
        "metadata.name": "a2a-7d9c-test",
        "metadata.namespace": "default",
        "status.podIP": "127.0.0.1",
    }
    env = container_env(docs, container, secrets=secrets, fields=fields)
    assert env["A2A_PROBE_HOST"] == "127.0.0.1"  # $(POD_IP), expanded as the kubelet does
    assert "k8s.pod.name=a2a-7d9c-test" in env["OTEL_RESOURCE_ATTRIBUTES"]
    port_of = {p["name"]: free_port() for p in container["ports"]}
    key_of = {"grpc": "GRPC", "http": "HTTP", "probes": "PROBE", "metrics": "METRICS"}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {env["A2A_DATA_DIR"], env["A2A_FILE_ARTIFACT_DIR"]} <= mounts
    run_env = {
        **clean_environ(),
        **image_env(),
        **env,
        **{f"A2A_{key_of[name]}_PORT": str(port) for name, port in port_of.items()},
        "A2A_HOST": "127.0.0.1",
        "A2A_DATA_DIR": str(tmp_path / "data"),
        "A2A_FILE_ARTIFACT_DIR": str(tmp_path / "files"),
        "A2A_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",  # no collector here
        "TMPDIR": str(tmp_path),
    }
    base = f"http://127.0.0.1:{port_of[container['startupProbe']['httpGet']['port']]}"
    server = Server(
        own_prefixes(run_env, redis_prefix),
        base + container["startupProbe"]["httpGet"]["path"],
        str(tmp_path / "server.log"),
    )
    try:
        for probe in PROBES:
            get = container[probe]["httpGet"]
            url = f"http://127.0.0.1:{port_of[get['port']]}{get['path']}"
            response = eventually_200(url)
            assert response.status_code == 200, (probe, url, response.text, server.output())
        ready = container["readinessProbe"]["httpGet"]
        assert eventually_200(
            f"http://127.0.0.1:{port_of[ready['port']]}{ready['path']}"
        ).json() == {"status": "ready"}
        # The ServiceMonitor's endpoint, through the Service's port, unauthenticated.
        service_ports = {p["name"]: p["targetPort"] for p in one("Service", docs)["spec"]["ports"]}
        for endpoint in one("ServiceMonitor", docs)["spec"]["endpoints"]:
            port = port_of[service_ports[endpoint["port"]]]
            response = httpx.get(f"http://127.0.0.1:{port}{endpoint['path']}", timeout=5)
            assert response.status_code == 200, response.text
            assert "# TYPE" in response.text
        # The Service's gRPC port: gRPC health SERVING; the card advertises the public URL.
        with grpc.insecure_channel(f"127.0.0.1:{port_of['grpc']}") as channel:
            check = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5
            )
            assert check.status == health_pb2.HealthCheckResponse.SERVING
        card = httpx.get(
            f"http://127.0.0.1:{port_of['http']}/.well-known/agent-card.json", timeout=5
        ).json()
        assert env["A2A_PUBLIC_URL"] in str(card), card
        # Auth from the Secret is on: an A2A call without its bearer token is refused.
        call = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        url = f"http://127.0.0.1:{port_of['http']}/"
        assert httpx.post(url, json=call, timeout=5).status_code == 401
        token = secrets["auth-bearer-tokens"].split("=", 1)[1]
        allowed = httpx.post(
            url, json=call, headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
        )
        assert allowed.status_code == 200 and "result" in allowed.json(), allowed.text
    finally:
        code = server.stop()
    assert code == 0, server.output() if not server.log.closed else code


@pytest.mark.parametrize("replica", ["a2a-1", "a2a-2"])
def test_a_compose_replica_answers_its_healthchecks_and_advertises_its_own_address(
    tmp_path, database, redis_prefix, replica
):
    """The compose replica's environment (interpolated as compose does, with a shared key)
    over the image's ENV; the compose healthcheck and the image's HEALTHCHECK, run as
    written but for the port."""
    service = compose()["services"][replica]
    shell = {"A2A_PUSH_SECRET_KEYS": Fernet.generate_key().decode()}
    env = {k: interpolate(str(v), shell) for k, v in service["environment"].items()}
    assert env["A2A_PUSH_SECRET_KEYS"] == shell["A2A_PUSH_SECRET_KEYS"]
    grpc_port, http_port = free_port(), free_port()
    container_grpc, container_http = (int(p.split(":")[1]) for p in service["ports"])
    run_env = {
        **clean_environ(),
        **image_env(),
        **env,
        "A2A_HOST": "127.0.0.1",
        "A2A_GRPC_PORT": str(grpc_port),
        "A2A_HTTP_PORT": str(http_port),
        "A2A_STORE": database,
        "A2A_BUS": REDIS_URL,
        "A2A_PUSH_REDIS_URL": REDIS_URL,
        "A2A_DATA_DIR": str(tmp_path / "data"),
        "A2A_FILE_ARTIFACT_DIR": str(tmp_path / "files"),
        "TMPDIR": str(tmp_path),
    }
    assert (container_grpc, container_http) == (50051, 8080)  # the image's defaults
    server = Server(
        own_prefixes(run_env, f"{redis_prefix}:{replica}"),
        f"http://127.0.0.1:{http_port}/health/live",
        str(tmp_path / "server.log"),
    )
    try:
        assert eventually_200(f"http://127.0.0.1:{http_port}/health/ready").status_code == 200
        for name, command in (
            ("compose healthcheck", service["healthcheck"]["test"][1:]),
            ("Dockerfile HEALTHCHECK", healthcheck_command()),
        ):
            assert command[0] == "python"
            argv = [sys.executable, *command[1:]]
            argv = [a.replace(f":{container_http}/", f":{http_port}/") for a in argv]
            assert any(f":{http_port}/health/ready" in a for a in argv), (name, command)
            result = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            assert result.returncode == 0, (name, result.stderr)
        card = httpx.get(f"http://127.0.0.1:{http_port}/.well-known/agent-card.json").json()
        urls = {i["url"] for i in card["supportedInterfaces"]}
        assert env["A2A_PUBLIC_URL"] in urls, card
        assert env["A2A_GRPC_PUBLIC_ADDRESS"] in urls, card
    finally:
        code = server.stop()
    assert code == 0
