"""The authentication schemes and the one `Authenticator` every binding calls.

A caller is authenticated from its call metadata: gRPC metadata, or the HTTP
request headers (both with lower-case names, so `authorization` and the API key
header read the same on every binding). Each enabled scheme looks at the
credential it understands; the first that is valid names the principal:

    scheme    credential                         principal           card (securitySchemes)
    bearer    Authorization: Bearer <token>      bearer:<name>       http, scheme bearer
    jwt       Authorization: Bearer <JWT>        jwt:<iss>|<sub>     http bearer, bearerFormat JWT
                                                                     (openIdConnect with a discovery URL)
    basic     Authorization: Basic <user:pass>   basic:<user>        http, scheme basic
    apiKey    <header>: <key>                    apikey:<name>       apiKey in header <header>

No valid credential -> `UnauthenticatedError` (HTTP 401 `{"error":"Unauthorized"}` with a
`WWW-Authenticate` challenge per scheme; gRPC UNAUTHENTICATED). The reason is logged at
debug level only and never names a secret.

A credential key sent more than once (two `authorization` entries, two API key headers) is
refused the same way on every binding, whichever copy would be valid: taking the first or
the last would let a proxy that adds one and a client that sends another disagree about who
the caller is. The HTTP guard sees the raw headers; gRPC metadata comes as `call_metadata`,
which keeps the last value of each key and remembers which keys were repeated.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field

from gen import a2a_pb2 as pb
from service.auth.credentials import SecretTable
from service.auth.jwt_bearer import JwtVerifier
from service.protocol.errors import UnauthenticatedError
from service.telemetry import hub

log = logging.getLogger("service.auth")

AUTHORIZATION = "authorization"
REALM = "a2a"

# securitySchemes keys (this service's names)
BEARER, JWT, BASIC, API_KEY, MTLS = "bearer", "jwt", "basic", "apiKey", "mtls"


class CallMetadata(dict[str, str]):
    """Call metadata by lower-case key (the last value of a repeated key), and `repeated`:
    the keys that came more than once."""

    repeated: frozenset[str] = frozenset()


def call_metadata(pairs: Iterable[tuple[str, str | bytes]]) -> CallMetadata:
    """gRPC invocation metadata as the text entries by lower-case key (binary `-bin` entries
    are left out), noting repeated keys so the Authenticator can refuse repeated credentials."""
    metadata = CallMetadata()
    repeated: set[str] = set()
    for key, value in pairs:
        if not isinstance(value, str):
            continue
        key = key.lower()
        if key in metadata:
            repeated.add(key)
        metadata[key] = value
    if repeated:
        metadata.repeated = frozenset(repeated)
    return metadata


@dataclass
class Authenticator:
    """Static tokens, Basic users, API keys and JWTs; any subset may be enabled."""

    bearer_tokens: SecretTable = field(default_factory=lambda: SecretTable(()))
    basic_users: SecretTable = field(
        default_factory=lambda: SecretTable(())
    )  # "user:password" digests
    api_keys: SecretTable = field(default_factory=lambda: SecretTable(()))
    api_key_header: str = "X-API-Key"  # as advertised; looked up in lower case
    jwt: JwtVerifier | None = None
    oidc_url: str = ""  # advertise JWT as OpenID Connect with this discovery URL
    mtls: bool = False  # client certificates are required at the TLS layer (advertised only)

    @property
    def api_key_key(self) -> str:
        """The API key's metadata key (gRPC metadata and the gateway's header map are lower case)."""
        return self.api_key_header.lower()

    @property
    def enabled(self) -> bool:
        return bool(self.bearer_tokens or self.basic_users or self.api_keys or self.jwt)

    @property
    def credential_keys(self) -> tuple[str, ...]:
        """Metadata keys that carry credentials (removed once the caller is authenticated)."""
        keys = []
        if self.bearer_tokens or self.basic_users or self.jwt:
            keys.append(AUTHORIZATION)
        if self.api_keys:
            keys.append(self.api_key_key)
        return tuple(keys)

    # ---- checking ------------------------------------------------------------------

    async def principal(self, metadata: Mapping[str, str]) -> str:
        """The caller's principal, or UnauthenticatedError. `metadata` from `call_metadata`
        also tells which keys were repeated: a repeated credential key is refused."""
        repeated = getattr(metadata, "repeated", ())
        for key in self.credential_keys:
            if key in repeated:
                log.debug("refused: the credential key %r was sent more than once", key)
                hub.count_auth_failure(self._offered(metadata))
                raise UnauthenticatedError(
                    f"Unauthorized: {key!r} was sent more than once; send exactly one credential."
                )
        found = await self._check_authorization(metadata.get(AUTHORIZATION))
        if found is None and self.api_keys:
            offered = metadata.get(self.api_key_key)
            if offered:
                found = self.api_keys.match(offered.strip())
                found = f"apikey:{found}" if found else None
        if found is None:
            hub.count_auth_failure(self._offered(metadata))
            raise UnauthenticatedError("Unauthorized")
        return found

    def _offered(self, metadata: Mapping[str, str]) -> str:
        """Which scheme a refused caller tried, for the auth-failure metric (never a value)."""
        header = metadata.get(AUTHORIZATION, "").strip()
        if header:
            word = header.partition(" ")[0].lower()
            return word if word in ("bearer", "basic") else "other"
        if self.api_keys and metadata.get(self.api_key_key):
            return API_KEY
        return "none"

    async def __call__(self, metadata: MutableMapping[str, str]) -> str:
        """Authenticate, then drop the credentials from `metadata`: past this point (the API,
        the agent) nobody needs or should see them."""
        principal = await self.principal(metadata)
        for key in self.credential_keys:
            metadata.pop(key, None)
        return principal

    async def _check_authorization(self, header: str | None) -> str | None:
        if not header:
            return None
        scheme, _, value = header.strip().partition(" ")
        value = value.strip()
        scheme = scheme.lower()
        if not value:
            return None
        if scheme == "bearer":
            if self.bearer_tokens:
                name = self.bearer_tokens.match(value)
                if name is not None:
                    return f"bearer:{name}"
            if self.jwt is not None:
                return await self.jwt.principal(value)
            return None
        if scheme == "basic" and self.basic_users:
            try:
                decoded = base64.b64decode(value, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                return None
            if ":" not in decoded:
                return None
            name = self.basic_users.match(decoded)  # the table holds "user:password" digests
            return f"basic:{name}" if name is not None else None
        return None

    # ---- advertising ----------------------------------------------------------------

    def challenges(self) -> list[str]:
        """One `WWW-Authenticate` challenge per enabled scheme (RFC 9110 11.6.1)."""
        out = []
        if self.bearer_tokens or self.jwt:
            out.append(f'Bearer realm="{REALM}"')
        if self.basic_users:
            out.append(f'Basic realm="{REALM}", charset="UTF-8"')
        if self.api_keys:
            out.append(f'ApiKey realm="{REALM}", header="{self.api_key_header}"')
        return out

    def security_schemes(self) -> dict[str, pb.SecurityScheme]:
        """The card's `securitySchemes`: exactly the enabled schemes."""
        schemes: dict[str, pb.SecurityScheme] = {}
        if self.bearer_tokens:
            schemes[BEARER] = pb.SecurityScheme(
                http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
                    scheme="Bearer", description="A static bearer token issued by the operator."
                )
            )
        if self.jwt is not None:
            if self.oidc_url:
                schemes[JWT] = pb.SecurityScheme(
                    open_id_connect_security_scheme=pb.OpenIdConnectSecurityScheme(
                        open_id_connect_url=self.oidc_url,
                        description="An access token (JWT) from this OpenID Connect provider, sent as a bearer token.",
                    )
                )
            else:
                schemes[JWT] = pb.SecurityScheme(
                    http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
                        scheme="Bearer",
                        bearer_format="JWT",
                        description="A JWT signed by the operator's identity provider.",
                    )
                )
        if self.basic_users:
            schemes[BASIC] = pb.SecurityScheme(
                http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
                    scheme="Basic", description="HTTP Basic user name and password."
                )
            )
        if self.api_keys:
            schemes[API_KEY] = pb.SecurityScheme(
                api_key_security_scheme=pb.APIKeySecurityScheme(
                    location="header",
                    name=self.api_key_header,
                    description="An API key in this header (gRPC: metadata of the same name).",
                )
            )
        if self.mtls:
            schemes[MTLS] = pb.SecurityScheme(
                mtls_security_scheme=pb.MutualTlsSecurityScheme(
                    description="A client certificate issued by the operator's CA."
                )
            )
        return schemes

    def security_requirements(self) -> list[pb.SecurityRequirement]:
        """Alternatives (any one satisfies); a required client certificate joins each of them."""
        schemes = [name for name in self.security_schemes() if name != MTLS]
        if not schemes:
            schemes_per_requirement = [[MTLS]] if self.mtls else []
        else:
            schemes_per_requirement = [[name, MTLS] if self.mtls else [name] for name in schemes]
        requirements = []
        for names in schemes_per_requirement:
            requirement = pb.SecurityRequirement()
            for name in names:
                requirement.schemes[name].CopyFrom(pb.StringList())
            requirements.append(requirement)
        return requirements
