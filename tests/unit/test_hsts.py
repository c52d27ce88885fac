"""Strict-Transport-Security: the ASGI middleware around tiny apps (every response to an https
request gets exactly one header, plain http none) and the setting. (The gateway over real
TLS: tests/integration/test_hsts_tls.py.)"""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.hsts import HstsMiddleware
from service.app.config import ConfigError, Settings, load, validate

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
