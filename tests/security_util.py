"""Test helpers for authentication and TLS: throwaway certificates and signing keys made at
run time, a loopback JWKS / OpenID Connect server, and a2a-sdk clients that carry
credentials (over any binding, optionally over TLS)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import pathlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import jwt
from a2a.client import ClientConfig, create_client
from a2a.client.auth import AuthInterceptor, CredentialService
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BINDINGS = ["GRPC", "JSONRPC", "HTTP+JSON"]
ISSUER = "https://idp.example.test"
AUDIENCE = "a2a-test-service"

# Static credentials (long enough for the service's minimums); never real secrets.
TOKENS = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef00"}
API_KEYS = {"ci": "ci-key-0123456789abcdef0123"}
BASIC = {"carol": "carol-password-1"}


def v10_schemes(schemes: dict[str, Any]) -> dict[str, Any]:
    """A card's securitySchemes as 1.0 has them: each entry's `<kind>SecurityScheme`
    wrapper (the card also carries v0.3's OpenAPI members beside it, docs/v03-clients.md)."""
    return {
        name: {k: v for k, v in entry.items() if k.endswith("SecurityScheme")}
        for name, entry in schemes.items()
    }


def bearer_settings(**extra) -> dict[str, Any]:
    return dict(auth_bearer_tokens=[f"{n}={t}" for n, t in TOKENS.items()], **extra)


def all_static_settings(**extra) -> dict[str, Any]:
    return dict(
        auth_bearer_tokens=[f"{n}={t}" for n, t in TOKENS.items()],
        auth_api_keys=[f"{n}={k}" for n, k in API_KEYS.items()],
        auth_basic_users=[f"{u}:{p}" for u, p in BASIC.items()],
        **extra,
    )


def basic_header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# ---------------------------------------------------------------- certificates


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(
    subject: str,
    key,
    issuer_name: x509.Name,
    issuer_key,
    *,
    ca: bool = False,
    server: bool = False,
    client: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if client:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_pki(directory: pathlib.Path) -> SimpleNamespace:
    """A throwaway CA, a server certificate for localhost / 127.0.0.1 / ::1, a client
    certificate from the same CA, and a client certificate from another CA."""
    directory.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}

    def write(name: str, data: bytes) -> str:
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        out[name.replace(".", "_")] = str(path)
        return str(path)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("Test CA", ca_key, _name("Test CA"), ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert("localhost", server_key, ca.subject, ca_key, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("test-client", client_key, ca.subject, ca_key, client=True)
    rogue_ca_key = ec.generate_private_key(ec.SECP256R1())
    rogue_ca = _cert("Rogue CA", rogue_ca_key, _name("Rogue CA"), rogue_ca_key, ca=True)
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    rogue = _cert("rogue-client", rogue_key, rogue_ca.subject, rogue_ca_key, client=True)

    pem = serialization.Encoding.PEM
    write("ca.pem", ca.public_bytes(pem))
    write("server.pem", server.public_bytes(pem))
    write("server.key", _pem_key(server_key))
    write("client.pem", client.public_bytes(pem))
    write("client.key", _pem_key(client_key))
    write("rogue.pem", rogue.public_bytes(pem))
    write("rogue.key", _pem_key(rogue_key))
    ns = SimpleNamespace(**out)
    ns.ca_bytes = ca.public_bytes(pem)
    return ns


# ---------------------------------------------------------------- JWT signing keys and a JWKS server


class SigningKey:
    """A throwaway private key with its public JWK."""

    def __init__(self, kid: str, alg: str = "ES256") -> None:
        self.kid, self.alg = kid, alg
        if alg.startswith("ES"):
            self.key = ec.generate_private_key(ec.SECP256R1())
            public = jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        elif alg in ("RS256", "PS256"):
            self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            public = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        elif alg == "EdDSA":
            self.key = ed25519.Ed25519PrivateKey.generate()
            public = jwt.algorithms.OKPAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        else:
            raise ValueError(alg)
        self.jwk = {**public, "kid": kid, "use": "sig", "alg": alg}

    def token(
        self,
        *,
        sub: str | None = "user-1",
        iss: str | None = ISSUER,
        aud: str | list[str] | None = AUDIENCE,
        exp_in: float | None = 300,
        kid: Any = ...,
        alg: str | None = None,
        **claims,
    ) -> str:
        """A signed token; a claim set to None is left out; kid=None: no kid header."""
        now = int(time.time())
        payload = {
            "sub": sub,
            "iss": iss,
            "aud": aud,
            "iat": now,
            "exp": now + exp_in if exp_in is not None else None,
            **claims,
        }
        payload = {k: v for k, v in payload.items() if v is not None}
        headers = {} if kid is None else {"kid": self.kid if kid is ... else kid}
        return jwt.encode(payload, self.key, algorithm=alg or self.alg, headers=headers or None)


class JwksServer:
    """Serves /jwks.json and /.well-known/openid-configuration on a loopback port; counts fetches."""

    def __init__(self, keys: list[SigningKey]) -> None:
        self.keys = list(keys)
        self.fetches = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                if self.path == "/jwks.json":
                    owner.fetches += 1
                    body = json.dumps({"keys": [k.jwk for k in owner.keys]}).encode()
                elif self.path == "/.well-known/openid-configuration":
                    body = json.dumps(
                        {"issuer": ISSUER, "jwks_uri": owner.url + "/jwks.json"}
                    ).encode()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def jwks_url(self) -> str:
        return self.url + "/jwks.json"

    @property
    def discovery_url(self) -> str:
        return self.url + "/.well-known/openid-configuration"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- a2a-sdk clients with credentials


class FixedCredentials(CredentialService):
    """Credentials per securitySchemes name, as an application's credential store would give them."""

    def __init__(self, by_scheme: dict[str, str]) -> None:
        self.by_scheme = by_scheme

    async def get_credentials(self, security_scheme_name, context):
        return self.by_scheme.get(security_scheme_name)


async def sdk_clients(
    service,
    binding: str,
    *,
    credentials: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    pki: SimpleNamespace | None = None,
    client_cert: bool = False,
):
    """Unary and streaming a2a-sdk clients for one binding, found through the agent card.
    `credentials`: securitySchemes name -> credential, applied by the SDK's AuthInterceptor from
    the card; `headers`: sent on every HTTP request and as gRPC metadata; `pki`: talk TLS."""
    scheme = "https" if pki is not None else "http"
    base = f"{scheme}://127.0.0.1:{service.http_port}"
    cert = (pki.client_pem, pki.client_key) if pki is not None and client_cert else None
    http = httpx.AsyncClient(
        timeout=10,
        headers=headers or {},
        verify=_httpx_verify(pki, cert) if pki is not None else True,
    )
    channels: list[grpc.aio.Channel] = []
    metadata = tuple((k.lower(), v) for k, v in (headers or {}).items())

    def channel_factory(url: str) -> grpc.aio.Channel:
        interceptors = [_MetadataInterceptor(metadata)] if metadata else None
        if pki is not None:
            creds = grpc.ssl_channel_credentials(
                root_certificates=pki.ca_bytes,
                private_key=pathlib.Path(pki.client_key).read_bytes() if client_cert else None,
                certificate_chain=pathlib.Path(pki.client_pem).read_bytes()
                if client_cert
                else None,
            )
            channels.append(grpc.aio.secure_channel(url, creds, interceptors=interceptors))
        else:
            channels.append(grpc.aio.insecure_channel(url, interceptors=interceptors))
        return channels[-1]

    def config(streaming: bool) -> ClientConfig:
        return ClientConfig(
            streaming=streaming,
            supported_protocol_bindings=[binding],
            use_client_preference=True,
            httpx_client=http,
            grpc_channel_factory=channel_factory,
        )

    interceptors = [AuthInterceptor(FixedCredentials(credentials))] if credentials else None
    unary = await create_client(base, config(False), interceptors=interceptors)
    streaming = await create_client(base, config(True), interceptors=interceptors)

    async def close():
        await http.aclose()
        for channel in channels:
            await channel.close()

    return SimpleNamespace(
        unary=unary, streaming=streaming, close=close, binding=binding, http=http
    )


def _httpx_verify(pki: SimpleNamespace, cert: tuple[str, str] | None):
    import ssl

    context = ssl.create_default_context(cafile=pki.ca_pem)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


class _MetadataInterceptor(
    grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor
):
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = metadata

    def _with(self, details):
        merged = tuple(details.metadata or ()) + self.metadata
        return details._replace(metadata=merged)

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(self._with(client_call_details), request)

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(self._with(client_call_details), request)


class WhoAmIAgent:
    """Answers with who the engine says the caller is, and which metadata keys reached the agent."""

    name = "Who am I"
    description = "Echoes the caller's principal."

    async def run(self, ctx) -> None:
        keys = ",".join(sorted(ctx.caller.metadata))
        await ctx.artifact(f"{ctx.caller.principal}|{ctx.caller.tenant}|{keys}", name="whoami")
