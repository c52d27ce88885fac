"""Bearer JWTs against a JWKS served from a loopback HTTP server, signed with throwaway keys:
what is accepted (and names which principal), what is refused, caching, key rotation by
`kid`, a local JWKS file, and OpenID Connect discovery."""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import jwt
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.app.config import ConfigError, Settings, validate
from tests.conftest import user_message
from tests.grpc_util import expect_error
from tests.security_util import AUDIENCE, ISSUER, TOKENS, JwksServer, SigningKey, v10_schemes

WHOAMI = "tests.security_util:WhoAmIAgent"


@pytest.fixture(scope="module")
def keys():
    return {
        "k1": SigningKey("k1", "ES256"),
        "k2": SigningKey("k2", "RS256"),
        "k3": SigningKey("k3", "EdDSA"),
        "stranger": SigningKey("k1", "ES256"),
    }  # same kid as k1, another key


@pytest.fixture
def jwks(keys):
    server = JwksServer([keys["k1"]])
    yield server
    server.close()


def jwt_settings(jwks: JwksServer, **extra):
    return dict(
        auth_jwt_jwks_url=jwks.jwks_url,
        auth_jwt_issuer=ISSUER,
        auth_jwt_audience=[AUDIENCE],
        push_notifications=False,
        **extra,
    )


async def whoami(service, token: str) -> tuple[int, str]:
    """(HTTP status, principal the agent saw) for a REST SendMessage with this bearer token."""
    body = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(
            f"http://127.0.0.1:{service.http_port}/message:send",
            json=body,
            headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}"},
        )
    if response.status_code != 200:
        assert response.content == b'{"error":"Unauthorized"}'
        return response.status_code, ""
    return 200, response.json()["task"]["artifacts"][0]["parts"][0]["text"].rsplit("|", 2)[0]


async def test_a_valid_token_names_issuer_and_subject_on_http_and_grpc(start_service, jwks, keys):
    service = await start_service(http_port=0, store="memory:", agent=WHOAMI, **jwt_settings(jwks))
    token = keys["k1"].token(sub="svc-42")
    assert await whoami(service, token) == (200, f"jwt:{ISSUER}|svc-42")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        response = await stub.SendMessage(
            pb.SendMessageRequest(message=user_message("hi")),
            metadata=(("authorization", f"Bearer {token}"),),
        )
        assert response.task.artifacts[0].parts[0].text.startswith(f"jwt:{ISSUER}|svc-42|")
        await expect_error(
            stub.ListTasks(
                pb.ListTasksRequest(), metadata=(("authorization", f"Bearer {token}x"),)
            ),
            grpc.StatusCode.UNAUTHENTICATED,
            "UNAUTHENTICATED",
        )


def _refused_tokens(keys) -> dict[str, str]:
    k1 = keys["k1"]
    header, payload, signature = k1.token().split(".")
    forged_payload = jwt.utils.base64url_encode(
        json.dumps({"sub": "admin", "iss": ISSUER, "aud": AUDIENCE, "exp": 9999999999}).encode()
    ).decode()
    unsigned = (
        jwt.utils.base64url_encode(b'{"alg":"none","kid":"k1"}').decode()
        + "."
        + forged_payload
        + "."
    )
    return {
        "expired beyond the leeway": k1.token(exp_in=-120),
        "not yet valid": k1.token(nbf=int(__import__("time").time()) + 600),
        "wrong issuer": k1.token(iss="https://evil.example"),
        "wrong audience": k1.token(aud="another-service"),
        "no audience": k1.token(aud=None),
        "no expiry": k1.token(exp_in=None),
        "no subject": k1.token(sub=None),
        "unknown kid": k1.token(kid="nobody"),
        "signed by another key with the same kid": keys["stranger"].token(),
        "tampered payload": f"{header}.{forged_payload}.{signature}",
        "alg none": unsigned,
        "HS256 (a shared-secret algorithm)": jwt.encode(
            {"sub": "x", "iss": ISSUER, "aud": AUDIENCE, "exp": 9999999999},
            "k" * 32,
            algorithm="HS256",
            headers={"kid": "k1"},
        ),
        "garbage": "not.a.jwt",
        "a static token of another service": TOKENS["alice"],
    }


async def test_refused_tokens_get_the_same_401(start_service, jwks, keys):
    service = await start_service(http_port=0, store="memory:", agent=WHOAMI, **jwt_settings(jwks))
    for what, token in _refused_tokens(keys).items():
        assert await whoami(service, token) == (401, ""), what
    # Within the leeway an expired token still passes (clock skew).
    assert (await whoami(service, keys["k1"].token(exp_in=-5)))[0] == 200


async def test_time_claims_must_be_json_numbers(start_service, jwks, keys):
    """RFC 7519 NumericDate is a JSON number; PyJWT's int() would take "1767225600" or true."""
    service = await start_service(http_port=0, store="memory:", agent=WHOAMI, **jwt_settings(jwks))
    k1 = keys["k1"]
    now = int(__import__("time").time())
    refused = {
        "exp as a numeric string": k1.token(exp_in=None, exp=str(now + 300)),
        "nbf as a numeric string": k1.token(nbf=str(now - 10)),
        "iat as a numeric string": k1.token(iat=str(now)),
        "iat as true": k1.token(iat=True),
        "nbf as false": k1.token(nbf=False),
        "exp as a list": k1.token(exp_in=None, exp=[now + 300]),
    }
    for what, token in refused.items():
        assert await whoami(service, token) == (401, ""), what
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        await expect_error(
            stub.ListTasks(
                pb.ListTasksRequest(),
                metadata=(("authorization", f"Bearer {refused['iat as a numeric string']}"),),
            ),
            grpc.StatusCode.UNAUTHENTICATED,
            "UNAUTHENTICATED",
        )
    # Numbers pass, fractions included (a NumericDate may be non-integer).
    accepted = [
        k1.token(),
        k1.token(exp_in=None, exp=now + 300.5),
        k1.token(iat=now - 0.25, nbf=now - 1.5),
    ]
    for token in accepted:
        assert await whoami(service, token) == (200, f"jwt:{ISSUER}|user-1")


async def test_algorithm_allowlist(start_service, keys):
    server = JwksServer([keys["k1"], keys["k2"], keys["k3"]])
    try:
        service = await start_service(
            http_port=0,
            store="memory:",
            agent=WHOAMI,
            **jwt_settings(server, auth_jwt_algorithms=["ES256", "EdDSA"]),
        )
        assert (await whoami(service, keys["k1"].token()))[0] == 200
        assert (await whoami(service, keys["k3"].token()))[0] == 200
        assert (await whoami(service, keys["k2"].token()))[0] == 401  # RS256: not on the list
    finally:
        server.close()


async def test_keys_are_cached_and_an_unknown_kid_refetches_once(start_service, jwks, keys):
    # Long enough that five requests on a busy machine stay inside one cache period (the
    # cache period is also the least time between refetches for unknown kids).
    CACHE = 2.0
    service = await start_service(
        http_port=0,
        store="memory:",
        agent=WHOAMI,
        **jwt_settings(jwks, auth_jwt_jwks_cache_seconds=CACHE),
    )
    assert jwks.fetches == 1  # primed at startup
    for _ in range(5):
        assert (await whoami(service, keys["k1"].token()))[0] == 200
    assert jwks.fetches == 1
    # The provider rotates in a new key: a token with its kid triggers one refetch.
    jwks.keys.append(keys["k2"])
    await asyncio.sleep(CACHE + 0.1)  # past the minimum interval between refetches
    assert (await whoami(service, keys["k2"].token(sub="rotated")))[1] == f"jwt:{ISSUER}|rotated"
    fetched = jwks.fetches
    # A burst of made-up kids does not turn into a burst of fetches.
    results = await asyncio.gather(
        *(whoami(service, keys["k1"].token(kid=f"junk-{i}")) for i in range(10))
    )
    assert all(status == 401 for status, _ in results)
    assert jwks.fetches <= fetched + 1
    # The provider goes away: the cached keys keep working.
    jwks.close()
    await asyncio.sleep(CACHE + 0.1)
    assert (await whoami(service, keys["k1"].token()))[0] == 200


async def test_token_without_kid_uses_the_only_key(start_service, jwks, keys):
    service = await start_service(http_port=0, store="memory:", agent=WHOAMI, **jwt_settings(jwks))
    assert (await whoami(service, keys["k1"].token(kid=None)))[0] == 200
    jwks.keys.append(keys["k3"])
    service2 = await start_service(
        http_port=0,
        store="memory:",
        agent=WHOAMI,
        data_dir=str(service.settings.data_dir) + "2",
        **jwt_settings(jwks),
    )
    assert (await whoami(service2, keys["k1"].token(kid=None)))[0] == 401  # ambiguous with two keys


async def test_a_local_jwks_file(start_service, keys, tmp_path):
    path = tmp_path / "jwks.json"
    path.write_text(
        json.dumps({"keys": [keys["k3"].jwk, {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}]})
    )
    service = await start_service(
        http_port=0,
        store="memory:",
        agent=WHOAMI,
        push_notifications=False,
        auth_jwt_jwks_file=str(path),
        auth_jwt_issuer=ISSUER,
        auth_jwt_audience=[AUDIENCE, "second-audience"],
    )
    assert (await whoami(service, keys["k3"].token(aud="second-audience")))[0] == 200
    assert (
        await whoami(
            service,
            jwt.encode(
                {"sub": "x", "iss": ISSUER, "aud": AUDIENCE, "exp": 9999999999},
                "s" * 32,
                algorithm="HS256",
                headers={"kid": "hmac"},
            ),
        )
    )[0] == 401


async def test_card_advertises_jwt_bearer_or_openid_connect(start_service, jwks, keys):
    plain = await start_service(http_port=0, store="memory:", **jwt_settings(jwks))
    oidc = await start_service(
        http_port=0,
        store="memory:",
        agent=WHOAMI,
        data_dir=str(plain.settings.data_dir) + "2",
        auth_jwt_oidc_url=jwks.discovery_url,
        auth_jwt_issuer=ISSUER,
        auth_jwt_audience=[AUDIENCE],
        push_notifications=False,
    )
    async with httpx.AsyncClient(timeout=10) as http:
        card = (
            await http.get(f"http://127.0.0.1:{plain.http_port}/.well-known/agent-card.json")
        ).json()
        assert v10_schemes(card["securitySchemes"]) == {
            "jwt": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "bearerFormat": "JWT",
                    "description": "A JWT signed by the operator's identity provider.",
                }
            }
        }
        assert card["securityRequirements"] == [{"schemes": {"jwt": {}}}]
        card = (
            await http.get(f"http://127.0.0.1:{oidc.http_port}/.well-known/agent-card.json")
        ).json()
        assert (
            card["securitySchemes"]["jwt"]["openIdConnectSecurityScheme"]["openIdConnectUrl"]
            == jwks.discovery_url
        )
    # With only the discovery URL, the keys come from its jwks_uri.
    assert await whoami(oidc, keys["k1"].token(sub="via-oidc")) == (200, f"jwt:{ISSUER}|via-oidc")


async def test_static_tokens_and_jwts_side_by_side(start_service, jwks, keys):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent=WHOAMI,
        auth_bearer_tokens=[f"alice={TOKENS['alice']}"],
        **jwt_settings(jwks),
    )
    assert await whoami(service, TOKENS["alice"]) == (200, "bearer:alice")
    assert await whoami(service, keys["k1"].token(sub="bob")) == (200, f"jwt:{ISSUER}|bob")
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"http://127.0.0.1:{service.http_port}/tasks")
        assert response.headers.get_list("www-authenticate") == ['Bearer realm="a2a"']


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(auth_jwt_issuer=""), "auth_jwt_issuer"),
        (dict(auth_jwt_audience=[]), "auth_jwt_audience"),
        (dict(auth_jwt_algorithms=["HS256"]), "auth_jwt_algorithms"),
        (dict(auth_jwt_algorithms=["none"]), "auth_jwt_algorithms"),
        (
            dict(auth_jwt_jwks_url="http://idp.example.com/jwks.json"),
            "plain http is allowed only for loopback",
        ),
        (dict(auth_jwt_jwks_url="ftp://idp.example.com/jwks.json"), "auth_jwt_jwks_url"),
        (dict(auth_jwt_jwks_file="/nonexistent/jwks.json"), "set one of them"),
        (dict(auth_jwt_leeway_seconds=-1), "auth_jwt_leeway_seconds"),
        (dict(auth_jwt_jwks_cache_seconds=0), "auth_jwt_jwks_cache_seconds"),
    ],
)
def test_jwt_configuration_errors_name_the_key(overrides, message):
    values = dict(
        auth_jwt_jwks_url="https://idp.example.com/jwks.json",
        auth_jwt_issuer=ISSUER,
        auth_jwt_audience=[AUDIENCE],
    )
    values.update(overrides)
    with pytest.raises(ConfigError, match=message):
        validate(Settings(**values))


def test_a_bad_jwks_file_stops_startup(tmp_path):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}))
    with pytest.raises(ConfigError, match="no asymmetric signing keys"):
        validate(
            Settings(
                auth_jwt_jwks_file=str(path), auth_jwt_issuer=ISSUER, auth_jwt_audience=[AUDIENCE]
            )
        )
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        validate(
            Settings(
                auth_jwt_jwks_file=str(path), auth_jwt_issuer=ISSUER, auth_jwt_audience=[AUDIENCE]
            )
        )
