"""The `auth_*` and `tls_*` settings: their section, and from it an `Authenticator` and `TlsFiles`.

`validate_security` runs with the rest of the config validation, so a bad entry
stops startup with a message naming the key (never the secret); failures are
ValueError, which the configuration reports as a ConfigError. The composition
root calls `authenticator_from` and `tls_from` to build what it wires in, and
`startup_warnings` for what an operator should hear about at startup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from service.auth.credentials import (
    MIN_PASSWORD_CHARS,
    MIN_TOKEN_CHARS,
    CredentialError,
    SecretTable,
    load_pairs,
)
from service.auth.jwt_bearer import (
    SUPPORTED_ALGORITHMS,
    JwksError,
    JwtVerifier,
    KeySet,
    check_fetch_url,
    is_loopback,
    read_json,
    signing_keys,
)
from service.auth.schemes import Authenticator
from service.auth.tls import TlsFiles, tls_files
from service.protocol.params import EXTENSIONS_KEY, VERSION_KEY
from service.setting import at_least, check_section, setting

_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_RESERVED_HEADERS = frozenset(
    {
        "authorization",
        VERSION_KEY,
        EXTENSIONS_KEY,
        "content-type",
        "content-length",
        "host",
        "te",
        "connection",
        "user-agent",
        "last-event-id",
        "accept",
        "cookie",
    }
)
MAX_LEEWAY_SECONDS = 600.0


@dataclass
class SecuritySettings:
    """Who may call (bearer tokens, Basic users, API keys, JWTs) and TLS ([Security](security.md)). Secrets come from the config file, the environment or a *_file; there are no flags for them."""

    auth_bearer_tokens: list[str] = setting(
        [],
        "static bearer tokens, `NAME=TOKEN` entries (comma list in "
        "`A2A_AUTH_BEARER_TOKENS`); principal `bearer:NAME`. Secret: file or environment "
        "only",
        secret=True,
    )
    auth_bearer_tokens_file: str = setting("", "file with one `NAME=TOKEN` per line (`#` comments)")
    auth_basic_users: list[str] = setting(
        [],
        "HTTP Basic users, `USER:PASSWORD` entries; principal `basic:USER`. Secret: file "
        "or environment only",
        secret=True,
    )
    auth_basic_users_file: str = setting("", "file with one `USER:PASSWORD` per line")
    auth_api_keys: list[str] = setting(
        [],
        "API keys, `NAME=KEY` entries; principal `apikey:NAME`. Secret: file or environment only",
        secret=True,
    )
    auth_api_keys_file: str = setting("", "file with one `NAME=KEY` per line")
    auth_api_key_header: str = setting(
        "X-API-Key", "header (gRPC: metadata key, lower case) that carries the API key"
    )
    auth_jwt_jwks_url: str = setting(
        "",
        "JWKS URL for bearer JWTs (`https://`, or `http://` on loopback); principal `jwt:ISS|SUB`",
    )
    auth_jwt_jwks_file: str = setting("", "a local JWKS file instead")
    auth_jwt_oidc_url: str = setting(
        "",
        "OpenID Connect discovery URL: the card advertises `openIdConnect`; its "
        "`jwks_uri` is used when no JWKS is set",
    )
    auth_jwt_issuer: str = setting("", "required with JWTs: the expected `iss`")
    auth_jwt_audience: list[str] = setting([], "required with JWTs: the accepted `aud` values")
    auth_jwt_algorithms: list[str] = setting(
        ["RS256", "PS256", "ES256", "EdDSA"], "allowlist of token algorithms (asymmetric only)"
    )
    auth_jwt_leeway_seconds: float = setting(30.0, "clock skew allowed on `exp`, `nbf`, `iat`")
    auth_jwt_jwks_cache_seconds: float = setting(
        300.0, "how long fetched keys are reused; an unknown `kid` refetches (at most every 10 s)"
    )
    tls_cert_file: str = setting(
        "", "PEM certificate chain: TLS on gRPC and HTTP (card URLs become `https`)"
    )
    tls_key_file: str = setting("", "its PEM private key (unencrypted)")
    tls_client_ca_file: str = setting(
        "", "PEM CA(s): both listeners require a client certificate signed by them (mTLS)"
    )
    tls_hsts_max_age_seconds: int = setting(
        31_536_000,
        "with TLS: every HTTP gateway response carries `Strict-Transport-Security: "
        "max-age=` this; `0` = no header",
        shown="`31536000` (1 year)",
        check=at_least(
            0,
            "must not be negative (seconds browsers keep to https; 0 sends no Strict-Transport-Security header)",
        ),
    )


SECRET_FILE_KEYS = (
    "auth_bearer_tokens_file",
    "auth_basic_users_file",
    "auth_api_keys_file",
    "auth_jwt_jwks_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_client_ca_file",
)


@dataclass(frozen=True)
class Credentials:
    """One kind of static credential: the key of its entries (`KEY` inline, `KEY_file` for
    a file), the separator of name and secret, and what the secret must be."""

    key: str
    sep: str
    what: str
    min_chars: int
    allow_spaces: bool = False


CREDENTIALS = (
    Credentials("auth_bearer_tokens", "=", "token", MIN_TOKEN_CHARS),
    Credentials("auth_basic_users", ":", "password", MIN_PASSWORD_CHARS, allow_spaces=True),
    Credentials("auth_api_keys", "=", "key", MIN_TOKEN_CHARS),
)


def _pairs(s: SecuritySettings, kind: Credentials, lenient: bool = False) -> list[tuple[str, str]]:
    """The (name, secret) entries of one kind, inline and from its file; `lenient` takes
    any secret however short (to redact what is configured, not to accept it)."""
    return load_pairs(
        getattr(s, kind.key),
        getattr(s, f"{kind.key}_file"),
        key=kind.key,
        sep=kind.sep,
        what="secret" if lenient else kind.what,
        min_chars=1 if lenient else kind.min_chars,
        allow_spaces=lenient or kind.allow_spaces,
    )


def secret_files(s: SecuritySettings) -> list[str]:
    """Files of this section that hold secrets or keys (no message may point at them)."""
    return [path for path in (getattr(s, key) for key in SECRET_FILE_KEYS) if path]


class Exposure(Protocol):
    """What the startup warnings weigh besides the section: where it listens, what it offers."""

    host: str
    extended_card: bool


def _api_key_header(s: SecuritySettings) -> str:
    name = s.auth_api_key_header.strip()
    lower = name.lower()
    if (
        not _HEADER_NAME.fullmatch(name)
        or lower in _RESERVED_HEADERS
        or lower.startswith("grpc-")
        or lower.endswith("-bin")
    ):
        raise ValueError(
            f"auth_api_key_header: {name!r} cannot carry an API key; use a header name of letters, digits "
            "and '-' that is not a standard or gRPC header (e.g. X-API-Key)"
        )
    return name


def _jwt(s: SecuritySettings) -> JwtVerifier | None:
    if not (s.auth_jwt_jwks_url or s.auth_jwt_jwks_file or s.auth_jwt_oidc_url):
        return None
    if s.auth_jwt_jwks_url and s.auth_jwt_jwks_file:
        raise ValueError("auth_jwt_jwks_url / auth_jwt_jwks_file: set one of them, not both")
    for key in ("auth_jwt_jwks_url", "auth_jwt_oidc_url"):
        url = getattr(s, key)
        problem = check_fetch_url(url, key) if url else None
        if problem:
            raise ValueError(problem)
    if not s.auth_jwt_issuer:
        raise ValueError(
            "auth_jwt_issuer: JWT authentication needs the expected issuer (the tokens' iss)"
        )
    if not s.auth_jwt_audience:
        raise ValueError(
            "auth_jwt_audience: JWT authentication needs the expected audience (the tokens' aud)"
        )
    bad = [a for a in s.auth_jwt_algorithms if a not in SUPPORTED_ALGORITHMS]
    if bad or not s.auth_jwt_algorithms:
        raise ValueError(
            f"auth_jwt_algorithms: {', '.join(bad) or 'empty'} not allowed; choose from "
            f"{', '.join(SUPPORTED_ALGORITHMS)} (asymmetric only: a JWKS publishes public keys)"
        )
    if not 0 <= s.auth_jwt_leeway_seconds <= MAX_LEEWAY_SECONDS:
        raise ValueError(f"auth_jwt_leeway_seconds: must be between 0 and {MAX_LEEWAY_SECONDS:g}")
    if s.auth_jwt_jwks_cache_seconds <= 0:
        raise ValueError(
            "auth_jwt_jwks_cache_seconds: must be positive (seconds a fetched key set is reused)"
        )
    if s.auth_jwt_jwks_file:
        try:
            signing_keys(read_json(s.auth_jwt_jwks_file), s.auth_jwt_jwks_file)
        except JwksError as exc:
            raise ValueError(f"auth_jwt_jwks_file: {exc}") from None
    keys = KeySet(
        file=s.auth_jwt_jwks_file,
        url=s.auth_jwt_jwks_url,
        discovery_url=s.auth_jwt_oidc_url,
        cache_seconds=s.auth_jwt_jwks_cache_seconds,
    )
    return JwtVerifier(
        keys,
        issuer=s.auth_jwt_issuer,
        audience=s.auth_jwt_audience,
        algorithms=s.auth_jwt_algorithms,
        leeway_seconds=s.auth_jwt_leeway_seconds,
    )


def authenticator_from(s: SecuritySettings) -> Authenticator | None:
    """The configured authenticator, or None when authentication is off (nothing configured)."""
    try:
        bearer, basic, api_keys = (_pairs(s, kind) for kind in CREDENTIALS)
    except CredentialError as exc:
        raise ValueError(str(exc)) from None
    auth = Authenticator(
        bearer_tokens=SecretTable.of(bearer),
        basic_users=SecretTable.of([(user, f"{user}:{password}") for user, password in basic]),
        api_keys=SecretTable.of(api_keys),
        api_key_header=_api_key_header(s),
        jwt=_jwt(s),
        oidc_url=s.auth_jwt_oidc_url,
        mtls=bool(s.tls_client_ca_file),
    )
    return auth if auth.enabled else None


def configured_secrets(s: SecuritySettings) -> list[str]:
    """The tokens, passwords and keys configured (inline and in files), for the log redactor."""
    found: list[str] = []
    for kind in CREDENTIALS:
        try:
            pairs = _pairs(s, kind, lenient=True)
        except (CredentialError, ValueError):
            continue  # reported by authenticator_from
        found += [secret for _, secret in pairs]
    return found


def tls_from(s: SecuritySettings) -> TlsFiles | None:
    try:
        tls = tls_files(s.tls_cert_file, s.tls_key_file, s.tls_client_ca_file)
        if tls is not None:
            tls.check()
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    return tls


def advertised(auth: Authenticator | None, tls: TlsFiles | None) -> Authenticator | None:
    """What the card declares: the authenticator, or only mTLS when that is all there is."""
    if auth is None and tls is not None and tls.mutual:
        return Authenticator(mtls=True)
    return auth


def validate_security(s: SecuritySettings) -> None:
    authenticator_from(s)
    tls_from(s)
    check_section(s, SecuritySettings)


def startup_warnings(s: Exposure, auth: Authenticator | None, tls: TlsFiles | None) -> list[str]:
    if is_loopback(s.host):
        return []
    where = f"{s.host or 'all interfaces'}"
    if auth is None:
        extra = " The extended agent card is served to anyone too." if s.extended_card else ""
        return [
            f"AUTHENTICATION IS OFF and the service listens on {where}: anyone who can reach it can send "
            "messages to the agent and read every task." + extra + " Configure auth_bearer_tokens, "
            "auth_basic_users, auth_api_keys or auth_jwt_* (docs/security.md), or listen on 127.0.0.1."
        ]
    if tls is None:
        return [
            f"TLS is off and the service listens on {where}: credentials and task data travel unencrypted. "
            "Set tls_cert_file and tls_key_file, or terminate TLS in front of the service."
        ]
    return []
