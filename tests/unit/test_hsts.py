"""Strict-Transport-Security: the ASGI middleware around tiny apps (every response to an https
request gets exactly one header, plain http none), the setting, and the gateway over real TLS."""

from __future__ import annotations

import ssl

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.hsts import HstsMiddleware
from service.app.config import ConfigError, Settings, load, validate
from tests.security_util import bearer_settings, make_pki

STS = "strict-transport-security"


async def raw_app(scope, receive, send):
    """A bare ASGI app: 204 with no headers at all."""
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 204})
    await send({"type": "http.response.body", "body": b""})


def starlette_app() -> Starlette:
    async def ok(request):
        return PlainTextResponse("ok")

    async def own(request):  # sets its own, weaker header: replaced, not doubled
        return Response("x", headers={"Strict-Transport-Security": "max-age=1"})

    async def stream(request):
        async def chunks():
            yield b"a"
            yield b"b"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def boom(request):
        raise RuntimeError("unexpected")

    return Starlette(
        routes=[
            Route("/ok", ok),
            Route("/own", own),
            Route("/stream", stream),
            Route("/boom", boom),
        ]
    )


def client(app, scheme: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url=f"{scheme}://gw")


async def test_every_https_response_carries_exactly_one_header():
    async with client(HstsMiddleware(starlette_app(), 31_536_000), "https") as http:
        for path, status in (
            ("/ok", 200),
            ("/own", 200),
            ("/stream", 200),
            ("/missing", 404),
            ("/boom", 500),
        ):
            response = await http.get(path)
            assert response.status_code == status, path
            assert response.headers.get_list(STS) == ["max-age=31536000"], path
        assert (await http.post("/ok")).headers.get_list(STS) == ["max-age=31536000"]  # 405
    async with client(HstsMiddleware(raw_app, 600), "https") as http:
        response = await http.get("/")
        assert response.status_code == 204 and response.headers[STS] == "max-age=600"


async def test_plain_http_responses_never_carry_it():
    # RFC 6797 7.2: not over non-secure transport.
    async with client(HstsMiddleware(starlette_app(), 31_536_000), "http") as http:
        assert STS not in (await http.get("/ok")).headers
        assert (await http.get("/own")).headers.get_list(STS) == [
            "max-age=1"
        ]  # the app's own, untouched


async def test_other_scopes_pass_through_untouched():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])
        await send({"type": "lifespan.startup.complete"})

    sent = []

    async def send(message):
        sent.append(message)

    await HstsMiddleware(app, 10)({"type": "lifespan"}, None, send)
    assert seen == ["lifespan"] and sent == [{"type": "lifespan.startup.complete"}]
    with pytest.raises(ValueError):
        HstsMiddleware(app, 0)


def test_the_setting():
    assert Settings().tls_hsts_max_age_seconds == 31_536_000
    assert load(env={"A2A_TLS_HSTS_MAX_AGE_SECONDS": "0"}).tls_hsts_max_age_seconds == 0
    with pytest.raises(ConfigError, match="tls_hsts_max_age_seconds"):
        validate(Settings(tls_hsts_max_age_seconds=-1))
    with pytest.raises(ConfigError, match="tls_hsts_max_age_seconds"):
        load(env={"A2A_TLS_HSTS_MAX_AGE_SECONDS": "a year"})


# ------------------------------------------------------------------------------ the gateway


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_settings(pki, **extra):
    return dict(
        http_port=0,
        store="memory:",
        push_notifications=False,
        tls_cert_file=pki.server_pem,
        tls_key_file=pki.server_key,
        **extra,
    )


async def _headers(service, pki, scheme: str, path: str, **kwargs) -> httpx.Response:
    verify = ssl.create_default_context(cafile=pki.ca_pem) if scheme == "https" else True
    async with httpx.AsyncClient(
        base_url=f"{scheme}://localhost:{service.http_port}", verify=verify, timeout=10
    ) as http:
        return await http.get(path, **kwargs)


async def test_the_gateway_sends_it_on_every_response_with_tls(start_service, pki):
    service = await start_service(**tls_settings(pki, **bearer_settings()))
    for path, status in (
        ("/health", 200),
        ("/.well-known/agent-card.json", 200),
        ("/tasks", 401),
        ("/no/such/route", 401),
    ):
        response = await _headers(service, pki, "https", path)
        assert response.status_code == status, path
        assert response.headers.get_list(STS) == ["max-age=31536000"], path
    authorized = {
        "Authorization": "Bearer " + bearer_settings()["auth_bearer_tokens"][0].split("=", 1)[1],
        "A2A-Version": "1.0",
    }
    for path, status in (("/tasks", 200), ("/tasks/nope", 404)):
        response = await _headers(service, pki, "https", path, headers=authorized)
        assert response.status_code == status and response.headers[STS] == "max-age=31536000", path


async def test_the_max_age_is_configurable_and_0_or_no_tls_sends_none(start_service, pki, tmp_path):
    short = await start_service(**tls_settings(pki, tls_hsts_max_age_seconds=300))
    assert (await _headers(short, pki, "https", "/health")).headers[STS] == "max-age=300"
    off = await start_service(
        **tls_settings(pki, tls_hsts_max_age_seconds=0, data_dir=str(tmp_path / "off"))
    )
    assert STS not in (await _headers(off, pki, "https", "/health")).headers
    plain = await start_service(http_port=0, store="memory:", data_dir=str(tmp_path / "plain"))
    assert STS not in (await _headers(plain, pki, "http", "/health")).headers
