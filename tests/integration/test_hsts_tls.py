"""Strict-Transport-Security from the gateway over real TLS: on every response, with the
configured max-age, and none with 0 or without TLS. (The middleware itself and the setting:
tests/unit/test_hsts.py.)"""

from __future__ import annotations

import ssl

import httpx
import pytest

from tests.security_util import bearer_settings, make_pki

STS = "strict-transport-security"


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
