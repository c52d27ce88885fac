"""Transport security with throwaway certificates made at run time: TLS on the gRPC and HTTP
listeners, https URLs in the card, and client certificates (mTLS) required on both when a
client CA is configured -- a client without one, or with one from another CA, is refused."""

from __future__ import annotations

import ssl

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2 as sdk
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.app.config import ConfigError, Settings, validate
from tests.conftest import user_message
from tests.security_util import (
    BINDINGS,
    TOKENS,
    bearer_settings,
    make_pki,
    sdk_clients,
    v10_schemes,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_settings(pki, mutual: bool = False, **extra):
    values = dict(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        tls_cert_file=pki.server_pem,
        tls_key_file=pki.server_key,
        **extra,
    )
    if mutual:
        values["tls_client_ca_file"] = pki.ca_pem
    return values


def client_context(pki, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.ca_pem)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


def grpc_credentials(pki, cert: tuple[str, str] | None = None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca_bytes,
        private_key=open(cert[1], "rb").read() if cert else None,
        certificate_chain=open(cert[0], "rb").read() if cert else None,
    )


async def _send(client) -> sdk.Task:
    [event] = [
        e
        async for e in client.unary.send_message(
            sdk.SendMessageRequest(message=user_message("echo tls"))
        )
    ]
    return event.task


@pytest.mark.parametrize("binding", BINDINGS)
async def test_tls_on_every_binding(start_service, pki, binding):
    service = await start_service(**tls_settings(pki))
    clients = await sdk_clients(service, binding, pki=pki)
    try:
        card = clients.unary._card
        urls = {i.protocol_binding: i.url for i in card.supported_interfaces}
        assert urls["JSONRPC"].startswith("https://") and urls["HTTP+JSON"].startswith("https://")
        task = await _send(clients)
        assert task.status.state == sdk.TASK_STATE_COMPLETED
    finally:
        await clients.close()


async def test_plaintext_clients_are_refused_by_a_tls_service(start_service, pki):
    service = await start_service(**tls_settings(pki))
    async with httpx.AsyncClient(timeout=5) as http:
        with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port
            await http.get(f"http://127.0.0.1:{service.http_port}/health")
    async with httpx.AsyncClient(timeout=5) as http:
        with pytest.raises(httpx.ConnectError):  # TLS, but the server is not trusted (system CAs)
            await http.get(f"https://127.0.0.1:{service.http_port}/health")
    async with httpx.AsyncClient(timeout=5, verify=client_context(pki)) as http:
        assert (await http.get(f"https://localhost:{service.http_port}/health")).status_code == 200
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(pb.ListTasksRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    async with grpc.aio.secure_channel(
        f"127.0.0.1:{service.grpc_port}", grpc_credentials(pki)
    ) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("binding", BINDINGS)
async def test_mtls_with_a_client_certificate_on_every_binding(start_service, pki, binding):
    service = await start_service(**tls_settings(pki, mutual=True, **bearer_settings()))
    clients = await sdk_clients(
        service, binding, pki=pki, client_cert=True, credentials={"bearer": TOKENS["alice"]}
    )
    try:
        card = clients.unary._card
        assert card.security_schemes["mtls"].HasField("mtls_security_scheme")
        assert [set(r.schemes) for r in card.security_requirements] == [{"bearer", "mtls"}]
        assert (await _send(clients)).status.state == sdk.TASK_STATE_COMPLETED
    finally:
        await clients.close()


async def test_mtls_refuses_clients_without_a_certificate_from_the_ca(start_service, pki):
    service = await start_service(**tls_settings(pki, mutual=True))
    base = f"https://127.0.0.1:{service.http_port}"
    for cert in (None, (pki.rogue_pem, pki.rogue_key)):
        async with httpx.AsyncClient(timeout=5, verify=client_context(pki, cert)) as http:
            with pytest.raises(httpx.HTTPError):
                await http.get(base + "/.well-known/agent-card.json")
        async with grpc.aio.secure_channel(
            f"127.0.0.1:{service.grpc_port}", grpc_credentials(pki, cert)
        ) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    good = (pki.client_pem, pki.client_key)
    async with httpx.AsyncClient(timeout=5, verify=client_context(pki, good)) as http:
        card = (await http.get(base + "/.well-known/agent-card.json")).json()
        assert v10_schemes(card["securitySchemes"]) == {
            "mtls": {
                "mtlsSecurityScheme": {
                    "description": "A client certificate issued by the operator's CA."
                }
            }
        }
        assert card["securityRequirements"] == [{"schemes": {"mtls": {}}}]
    async with grpc.aio.secure_channel(
        f"127.0.0.1:{service.grpc_port}", grpc_credentials(pki, good)
    ) as channel:
        listed = await a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(
            pb.ListTasksRequest(), timeout=5
        )
        assert listed.total_size == 0


def test_tls_configuration_errors(pki, tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    cases = [
        (dict(tls_cert_file=pki.server_pem), "tls_key_file: TLS needs both"),
        (dict(tls_key_file=pki.server_key), "tls_cert_file: TLS needs both"),
        (dict(tls_client_ca_file=pki.ca_pem), "client certificates need TLS"),
        (
            dict(tls_cert_file=pki.server_pem, tls_key_file=pki.client_key),
            "matching",
        ),  # key of another cert
        (
            dict(tls_cert_file=str(garbage), tls_key_file=pki.server_key),
            "tls_cert_file / tls_key_file",
        ),
        (
            dict(tls_cert_file=str(tmp_path / "missing.pem"), tls_key_file=pki.server_key),
            "cannot read",
        ),
        (
            dict(
                tls_cert_file=pki.server_pem,
                tls_key_file=pki.server_key,
                tls_client_ca_file=str(garbage),
            ),
            "tls_client_ca_file",
        ),
    ]
    for values, message in cases:
        with pytest.raises(ConfigError, match=message):
            validate(Settings(**values))
    validate(
        Settings(
            tls_cert_file=pki.server_pem, tls_key_file=pki.server_key, tls_client_ca_file=pki.ca_pem
        )
    )
