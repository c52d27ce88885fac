"""Authentication on every binding: static bearer tokens, HTTP Basic and API keys; the 401 /
UNAUTHENTICATED answers; what stays public; the card's securitySchemes; the principal each
credential gives (the same on gRPC, JSON-RPC and REST); the extended card; proxy mode."""

from __future__ import annotations

import json
import logging

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2 as sdk
from a2a.utils import errors as sdk_errors
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.grpc_util import expect_error
from tests.security_util import (
    API_KEYS,
    BASIC,
    BINDINGS,
    TOKENS,
    all_static_settings,
    basic_header,
    sdk_clients,
    v10_schemes,
)

EXTENDED_SKILLS = [
    {"id": "secret-skill", "name": "Secret", "description": "for members", "tags": ["x"]}
]
WHOAMI = "tests.security_util:WhoAmIAgent"

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
CAROL = {"Authorization": basic_header("carol", BASIC["carol"])}
CI = {"X-API-Key": API_KEYS["ci"]}


@pytest.fixture
async def secured(start_service):
    return await start_service(
        http_port=0,
        store="memory:",
        agent=WHOAMI,
        extended_card=True,
        extended_skills=EXTENDED_SKILLS,
        **all_static_settings(),
    )


def http_base(service) -> str:
    return f"http://127.0.0.1:{service.http_port}"


def _jsonrpc(method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}


# Every kind of HTTP route an A2A caller can reach (and one that does not exist).
GUARDED = [
    ("POST", "/", _jsonrpc("ListTasks")),
    ("POST", "/", _jsonrpc("GetExtendedAgentCard")),
    (
        "POST",
        "/",
        _jsonrpc(
            "SendStreamingMessage",
            {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
        ),
    ),
    ("GET", "/tasks", None),
    ("GET", "/tasks/some-task", None),
    (
        "POST",
        "/message:send",
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
    ),
    ("POST", "/tasks/some-task:subscribe", None),
    ("GET", "/tasks/some-task/pushNotificationConfigs", None),
    ("GET", "/extendedAgentCard", None),
    ("GET", "/acme/tasks", None),
    ("GET", "/no/such/route", None),
    ("DELETE", "/", None),
]

BAD_CREDENTIALS = [
    {},
    {"Authorization": "Bearer wrong-token-0123456789abcdef"},
    {"Authorization": f"Bearer {TOKENS['alice']}x"},
    {"Authorization": f"bearer  {TOKENS['alice'][:-1]}"},
    {"Authorization": basic_header("carol", "wrong-password")},
    {"Authorization": basic_header("alice", TOKENS["alice"])},
    {"Authorization": "Basic !!!not-base64!!!"},
    {"Authorization": f"Token {TOKENS['alice']}"},
    {"Authorization": TOKENS["alice"]},
    {"X-API-Key": "wrong-key-0123456789abcdef"},
    {"X-API-Key": TOKENS["alice"]},  # a bearer token is not an API key
    {"Authorization": f"Bearer {API_KEYS['ci']}"},  # nor the reverse
]


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, (response.status_code, response.text)
    assert response.content == b'{"error":"Unauthorized"}'
    assert response.headers["content-type"].startswith("application/json")
    challenges = response.headers.get_list("www-authenticate")
    assert challenges == [
        'Bearer realm="a2a"',
        'Basic realm="a2a", charset="UTF-8"',
        'ApiKey realm="a2a", header="X-API-Key"',
    ]


@pytest.mark.parametrize("credentials", BAD_CREDENTIALS, ids=range(len(BAD_CREDENTIALS)))
async def test_every_http_route_refuses_without_valid_credentials(secured, credentials):
    async with httpx.AsyncClient(base_url=http_base(secured), timeout=10) as http:
        for method, path, body in GUARDED:
            headers = {"A2A-Version": "1.0", **credentials}
            response = await http.request(method, path, json=body, headers=headers)
            assert_unauthorized(response)


async def test_card_and_health_stay_public(secured):
    async with httpx.AsyncClient(base_url=http_base(secured), timeout=10) as http:
        card = await http.get("/.well-known/agent-card.json")
        assert card.status_code == 200 and card.json()["name"]
        assert (await http.get("/health")).json() == {"status": "healthy"}
        # A credential on a public route is simply not needed (and a wrong one does not hurt).
        assert (
            await http.get("/health", headers={"Authorization": "Bearer nope"})
        ).status_code == 200


async def test_the_card_advertises_exactly_the_enabled_schemes(secured, start_service):
    async with httpx.AsyncClient(base_url=http_base(secured), timeout=10) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
    assert v10_schemes(card["securitySchemes"]) == {
        "bearer": {
            "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "A static bearer token issued by the operator.",
            }
        },
        "basic": {
            "httpAuthSecurityScheme": {
                "scheme": "Basic",
                "description": "HTTP Basic user name and password.",
            }
        },
        "apiKey": {
            "apiKeySecurityScheme": {
                "location": "header",
                "name": "X-API-Key",
                "description": "An API key in this header (gRPC: metadata of the same name).",
            }
        },
    }
    assert card["securityRequirements"] == [
        {"schemes": {"bearer": {}}},
        {"schemes": {"basic": {}}},
        {"schemes": {"apiKey": {}}},
    ]

    only_key = await start_service(
        http_port=0,
        store="memory:",
        auth_api_keys=["ci=" + API_KEYS["ci"]],
        auth_api_key_header="X-Agent-Key",
        push_notifications=False,
    )
    open_service = await start_service(http_port=0, store="memory:", push_notifications=False)
    async with httpx.AsyncClient(timeout=10) as http:
        card = (await http.get(http_base(only_key) + "/.well-known/agent-card.json")).json()
        assert list(card["securitySchemes"]) == ["apiKey"]
        assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"] == "X-Agent-Key"
        assert card["securityRequirements"] == [{"schemes": {"apiKey": {}}}]
        card = (await http.get(http_base(open_service) + "/.well-known/agent-card.json")).json()
        assert "securitySchemes" not in card and "securityRequirements" not in card


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize(
    "who,headers,principal",
    [
        ("bearer", ALICE, "bearer:alice"),
        ("basic", CAROL, "basic:carol"),
        ("apikey", CI, "apikey:ci"),
    ],
    ids=["bearer", "basic", "apikey"],
)
async def test_each_scheme_names_the_same_principal_on_every_binding(
    secured, binding, who, headers, principal
):
    clients = await sdk_clients(secured, binding, headers=headers)
    try:
        request = sdk.SendMessageRequest(message=user_message("who am i"))
        [event] = [e async for e in clients.unary.send_message(request)]
        seen, tenant, keys = event.task.artifacts[0].parts[0].text.rsplit("|", 2)
        assert seen == principal and tenant == ""
        # The credentials stop at the authentication check: the agent never sees them.
        assert "authorization" not in keys.split(",") and "x-api-key" not in keys.split(",")
        got = await clients.unary.get_task(sdk.GetTaskRequest(id=event.task.id))
        assert got.id == event.task.id
    finally:
        await clients.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_sdk_client_authenticates_from_the_card(secured, binding):
    """The a2a-sdk's AuthInterceptor reads securitySchemes/securityRequirements from our card
    and attaches the credential the application holds for the scheme name."""
    for credentials in ({"bearer": TOKENS["bob"]}, {"apiKey": API_KEYS["ci"]}):
        clients = await sdk_clients(secured, binding, credentials=credentials)
        try:
            listed = await clients.unary.list_tasks(sdk.ListTasksRequest())
            assert listed.total_size == 0
        finally:
            await clients.close()
    anonymous = await sdk_clients(secured, binding)
    try:
        with pytest.raises(Exception) as info:
            await anonymous.unary.list_tasks(sdk.ListTasksRequest())
        assert (
            "401" in str(info.value)
            or "UNAUTHENTICATED" in str(info.value)
            or "Unauthorized" in str(info.value)
        )
    finally:
        await anonymous.close()


async def test_grpc_refuses_with_unauthenticated_and_keeps_health_and_reflection_public(secured):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{secured.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        for metadata in (
            None,
            (("authorization", "Bearer wrong-token-0123456789abcdef"),),
            (("x-api-key", "nope"),),
            (("authorization", basic_header("carol", "bad")),),
        ):
            err = await expect_error(
                stub.ListTasks(pb.ListTasksRequest(), metadata=metadata),
                grpc.StatusCode.UNAUTHENTICATED,
                "UNAUTHENTICATED",
            )
            assert err.details() == "Unauthorized"
        stream = stub.SendStreamingMessage(pb.SendMessageRequest(message=user_message("x")))
        await expect_error(stream.read(), grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
        await expect_error(
            stub.GetExtendedAgentCard(pb.GetExtendedAgentCardRequest()),
            grpc.StatusCode.UNAUTHENTICATED,
            "UNAUTHENTICATED",
        )
        ok = await stub.ListTasks(
            pb.ListTasksRequest(), metadata=(("authorization", f"Bearer {TOKENS['alice']}"),)
        )
        assert ok.total_size == 0
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="")
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = [
            a
            async for a in reflection.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
        ]
        names = [s.name for s in answers[0].list_services_response.service]
        assert "lf.a2a.v1.A2AService" in names


@pytest.mark.parametrize("binding", BINDINGS)
async def test_extended_card_requires_authentication(secured, binding):
    anonymous = await sdk_clients(secured, binding)
    member = await sdk_clients(secured, binding, headers=CI)
    try:
        with pytest.raises(Exception) as info:
            await anonymous.unary.get_extended_agent_card(sdk.GetExtendedAgentCardRequest())
        assert not isinstance(info.value, sdk_errors.UnsupportedOperationError)
        card = await member.unary.get_extended_agent_card(sdk.GetExtendedAgentCardRequest())
        assert "secret-skill" in [s.id for s in card.skills]
        assert set(card.security_schemes) == {"bearer", "basic", "apiKey"}  # the public card, plus
        public = anonymous.unary._card
        assert "secret-skill" not in [s.id for s in public.skills]
        assert public.capabilities.extended_agent_card
    finally:
        await anonymous.close()
        await member.close()


async def test_extended_card_not_configured_and_capability_off(start_service):
    """On every binding (raw calls: the a2a-sdk does not even ask when the capability is off)."""
    enabled_empty = await start_service(
        http_port=0,
        store="memory:",
        extended_card=True,
        push_notifications=False,
        **all_static_settings(),
    )
    off = await start_service(
        http_port=0, store="memory:", push_notifications=False, **all_static_settings()
    )
    metadata = (("authorization", ALICE["Authorization"]),)
    for service, reason, code in (
        (enabled_empty, "EXTENDED_AGENT_CARD_NOT_CONFIGURED", -32007),
        (off, "UNSUPPORTED_OPERATION", -32004),
    ):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            await expect_error(
                stub.GetExtendedAgentCard(pb.GetExtendedAgentCardRequest(), metadata=metadata),
                grpc.StatusCode.FAILED_PRECONDITION,
                reason,
            )
        async with httpx.AsyncClient(
            base_url=http_base(service), timeout=10, headers={"A2A-Version": "1.0", **ALICE}
        ) as http:
            rest = await http.get("/extendedAgentCard")
            assert (
                rest.status_code == 400 and rest.json()["error"]["details"][0]["reason"] == reason
            )
            rpc = (await http.post("/", json=_jsonrpc("GetExtendedAgentCard"))).json()
            assert rpc["error"]["code"] == code
            card = (await http.get("/.well-known/agent-card.json")).json()
            assert card["capabilities"].get("extendedAgentCard", False) == (
                service is enabled_empty
            )
    clients = await sdk_clients(enabled_empty, "JSONRPC", headers=ALICE)
    try:
        with pytest.raises(sdk_errors.ExtendedAgentCardNotConfiguredError):
            await clients.unary.get_extended_agent_card(sdk.GetExtendedAgentCardRequest())
    finally:
        await clients.close()


async def test_configured_extended_skills_turn_the_capability_on(start_service):
    service = await start_service(
        http_port=0, store="memory:", extended_skills=EXTENDED_SKILLS, **all_static_settings()
    )
    async with httpx.AsyncClient(timeout=10) as http:
        card = (await http.get(http_base(service) + "/.well-known/agent-card.json")).json()
    assert card["capabilities"]["extendedAgentCard"] is True


async def test_rest_and_jsonrpc_answer_normally_once_authenticated(secured):
    async with httpx.AsyncClient(
        base_url=http_base(secured), timeout=10, headers={"A2A-Version": "1.0", **ALICE}
    ) as http:
        listed = await http.get("/tasks")
        assert listed.status_code == 200 and listed.json().get("tasks", []) == []
        missing = await http.get("/tasks/no-such-task")
        assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"
        rpc = await http.post("/", json=_jsonrpc("GetTask", {"id": "no-such-task"}))
        assert rpc.status_code == 200 and rpc.json()["error"]["code"] == -32001
        unknown = await http.get("/no/such/route")
        assert unknown.status_code == 404  # routing happens after authentication
        card = await http.get("/extendedAgentCard")
        assert "secret-skill" in json.dumps(card.json())


async def test_proxy_mode_forwards_credentials_and_the_upstream_names_the_caller(start_service):
    settings = dict(
        auth_api_keys=["ci=" + API_KEYS["ci"]],
        auth_api_key_header="X-Agent-Key",
        push_notifications=False,
    )
    upstream = await start_service(store="memory:", agent=WHOAMI, **settings)
    proxy = await start_service(http_port=0, upstream=f"127.0.0.1:{upstream.grpc_port}", **settings)
    async with httpx.AsyncClient(
        base_url=http_base(proxy), timeout=10, headers={"A2A-Version": "1.0"}
    ) as http:
        refused = await http.get("/tasks")
        assert refused.status_code == 401 and refused.content == b'{"error":"Unauthorized"}'
        assert refused.headers["www-authenticate"] == 'ApiKey realm="a2a", header="X-Agent-Key"'
        body = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
        sent = await http.post("/message:send", json=body, headers={"X-Agent-Key": API_KEYS["ci"]})
        assert sent.status_code == 200, sent.text
        principal, _, keys = sent.json()["task"]["artifacts"][0]["parts"][0]["text"].rsplit("|", 2)
        assert principal == "apikey:ci" and "x-agent-key" not in keys.split(",")
    # Without credentials of its own the proxy still cannot get past the upstream.
    open_proxy = await start_service(http_port=0, upstream=f"127.0.0.1:{upstream.grpc_port}")
    async with httpx.AsyncClient(
        base_url=http_base(open_proxy), timeout=10, headers={"A2A-Version": "1.0"}
    ) as http:
        assert (await http.get("/tasks")).status_code == 401
        ok = await http.get("/tasks", headers={"Grpc-Metadata-X-Agent-Key": API_KEYS["ci"]})
        assert ok.status_code == 200


async def test_startup_warns_when_auth_is_off_on_a_non_loopback_address(start_service, caplog):
    caplog.set_level(logging.WARNING, logger="service")
    await start_service(store="memory:", push_notifications=False)  # loopback: quiet
    assert not [r for r in caplog.records if "AUTHENTICATION IS OFF" in r.getMessage()]
    await start_service(
        store="memory:", host="0.0.0.0", extended_card=True, push_notifications=False
    )
    [warning] = [r for r in caplog.records if "AUTHENTICATION IS OFF" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "0.0.0.0" in warning.getMessage() and "extended agent card" in warning.getMessage()
    caplog.clear()
    await start_service(
        store="memory:", host="0.0.0.0", push_notifications=False, **all_static_settings()
    )
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "AUTHENTICATION IS OFF" in m]
    assert [m for m in messages if "TLS is off" in m]


async def test_the_card_signing_jwks_stays_public_and_the_signature_covers_the_schemes(
    start_service, tmp_path
):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = tmp_path / "card.key"
    key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    service = await start_service(
        http_port=0,
        store="memory:",
        push_notifications=False,
        card_signing_key_files=[f"card-1={key}"],
        **all_static_settings(),
    )
    async with httpx.AsyncClient(base_url=http_base(service), timeout=10) as http:
        jwks = await http.get(service.settings.card_jwks_path)
        assert jwks.status_code == 200 and jwks.json()["keys"][0]["kid"] == "card-1"
        card = (await http.get("/.well-known/agent-card.json")).json()
        assert card["signatures"] and set(card["securitySchemes"]) == {"bearer", "basic", "apiKey"}
        assert_unauthorized(await http.get("/extendedAgentCard"))
