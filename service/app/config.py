"""One typed configuration: defaults < TOML file < environment < command-line flags.

Every key has one name. In a file it is written as is (`grpc_port = 50051`), in
the environment as `A2A_` + upper case (`A2A_GRPC_PORT=50051`), on the command
line as a flag (`--grpc-port 50051`). A bad value stops startup with a message
that names the key and how to fix it.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import tomllib
from dataclasses import dataclass, field
from typing import Any, get_type_hints

ENV_PREFIX = "A2A_"


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says which and why."""


@dataclass
class Settings:
    host: str = "127.0.0.1"
    grpc_port: int = 50051
    http_port: int = 8080  # 0 = any free port; -1 = no HTTP gateway
    data_dir: str = "data"
    store: str = ""  # default: sqlite in data_dir
    store_commit_interval_ms: float = (
        5.0  # SQLite group commit: how long concurrent writes may wait to share a commit
    )
    agent: str = "echo"
    command: str = ""  # argv for the `command` agent (shell-style quoting)
    command_grace_seconds: float = 5.0  # SIGTERM -> SIGKILL delay when a command turn is canceled
    public_url: str = ""  # base URL clients use to reach the HTTP gateway (behind a proxy)
    grpc_public_address: str = ""  # host:port clients use for gRPC
    upstream: str = (
        ""  # proxy mode: host:port of a remote A2A gRPC server; only the gateway runs here
    )
    name: str = ""
    description: str = ""
    version: str = "0.1.0"
    provider_organization: str = ""
    provider_url: str = ""
    documentation_url: str = ""
    skills: list[dict[str, Any]] | None = None  # default: the agent's own
    input_modes: list[str] = field(default_factory=list)
    output_modes: list[str] = field(default_factory=list)
    push_notifications: bool = False
    # push delivery (validated in service/push/settings.py; README "Push notifications")
    push_queue: str = "local-file"  # or redis-streams
    push_allow_hosts: list[str] = field(
        default_factory=list
    )  # callback hosts allowed despite SSRF rules
    push_allow_networks: list[str] = field(default_factory=list)  # CIDRs allowed despite SSRF rules
    push_secret_keys: list[str] = field(
        default_factory=list
    )  # Fernet keys; first seals; default: key file
    push_timeout_seconds: float = 10.0
    push_concurrency: int = 32
    push_host_concurrency: int = 8
    push_max_attempts: int = 10
    push_max_age_seconds: float = 86400.0
    push_retry_base_seconds: float = 1.0
    push_retry_max_seconds: float = 300.0
    push_lease_seconds: float = 300.0
    push_redis_url: str = "redis://127.0.0.1:6379/0"
    push_redis_prefix: str = "a2a:push"
    push_redis_stream: str = ""  # default PREFIX:stream
    push_redis_retry_key: str = ""  # default PREFIX:retry
    push_redis_dead_stream: str = ""  # default PREFIX:dead
    push_redis_group: str = "a2a-push"
    push_redis_consumer: str = ""  # default: the host name
    extended_card: bool = False
    extended_skills: list[dict[str, Any]] | None = None
    required_extensions: list[str] = field(default_factory=list)
    card_max_age: int = 60
    sse_keepalive_seconds: float = 15.0  # comment line sent on idle event streams
    drain_seconds: float = 5.0  # on SIGTERM: how long running turns and in-flight calls may finish
    grpc_max_concurrent_calls: int = 1000  # gRPC calls in flight at once (streams included); more: RESOURCE_EXHAUSTED; 0 = no limit
    drain_grace_seconds: float = (
        1.0  # on SIGTERM: how long new calls are still taken (health is already non-serving)
    )
    log_level: str = "INFO"
    # input limits and workspaces (validated in service/inputs.py; README "Input validation")
    max_request_bytes: int = (
        16 * 1024 * 1024
    )  # whole request: gRPC max receive size, HTTP body limit
    input_max_parts: int = 100
    input_max_text_bytes: int = 1024 * 1024  # inline text-like parts; text-like file:// files
    input_max_binary_bytes: int = 5 * 1024 * 1024  # inline raw/data parts of other media types
    input_max_file_bytes: int = 25 * 1024 * 1024  # file:// files of other media types
    input_text_media_types: list[str] = field(default_factory=list)  # more types to treat as text
    input_allow_remote_urls: bool = False  # accept http(s) URL parts (never fetched by the service)
    workspace_roots: list[str] = field(default_factory=list)  # default: working dir and temp dir
    # agent card signing (validated in service/signing.py; README "Agent card signing")
    card_signing_key_files: list[str] = field(
        default_factory=list
    )  # [KID=]PEM file; the first signs
    card_signing_secret: str = field(default="", repr=False)  # HS256 secret (file or env only)
    card_signing_secret_file: str = ""  # or a file holding it
    card_signing_secret_kid: str = ""  # default "hs256"
    card_signing_jku: str = ""  # jku header: "" = the served JWKS URL, "none", or a URL
    card_jwks_path: str = "/.well-known/jwks.json"  # where the public keys are served ("" = not)
    # authentication and TLS (validated in service/auth/settings.py; README "Security").
    # Secrets come from the config file, the environment or a *_file; there are no flags for them.
    auth_bearer_tokens: list[str] = field(default_factory=list, repr=False)  # NAME=TOKEN entries
    auth_bearer_tokens_file: str = ""  # one NAME=TOKEN per line
    auth_basic_users: list[str] = field(default_factory=list, repr=False)  # USER:PASSWORD entries
    auth_basic_users_file: str = ""  # one USER:PASSWORD per line
    auth_api_keys: list[str] = field(default_factory=list, repr=False)  # NAME=KEY entries
    auth_api_keys_file: str = ""  # one NAME=KEY per line
    auth_api_key_header: str = "X-API-Key"
    auth_jwt_jwks_url: str = ""  # JWKS URL (https, or http on loopback)
    auth_jwt_jwks_file: str = ""  # or a local JWKS file
    auth_jwt_oidc_url: str = (
        ""  # OpenID Connect discovery URL: advertised; its jwks_uri is the default JWKS
    )
    auth_jwt_issuer: str = ""
    auth_jwt_audience: list[str] = field(default_factory=list)
    auth_jwt_algorithms: list[str] = field(
        default_factory=lambda: ["RS256", "PS256", "ES256", "EdDSA"]
    )
    auth_jwt_leeway_seconds: float = 30.0
    auth_jwt_jwks_cache_seconds: float = 300.0
    tls_cert_file: str = ""  # PEM certificate chain: TLS on the gRPC and HTTP listeners
    tls_key_file: str = ""  # its PEM private key (unencrypted)
    tls_client_ca_file: str = (
        ""  # PEM CA(s): client certificates signed by them are required (mTLS)
    )
    tls_hsts_max_age_seconds: int = (
        31_536_000  # with TLS: Strict-Transport-Security max-age on HTTP (0 = none)
    )
    # connection limits (validated in service/netlimits.py; README "Connection limits")
    max_connections: int = (
        1000  # open connections per listener; lowered to fit RLIMIT_NOFILE - fd_reserve
    )
    fd_reserve: int = (
        128  # descriptors kept free of connections (store, push queue, logs, grpc internals)
    )
    http_header_timeout_seconds: float = (
        10.0  # a request's headers (and a TLS handshake) must arrive within this
    )
    http_body_timeout_seconds: float = (
        60.0  # a request body must be complete this long after its headers
    )
    http_keepalive_timeout_seconds: float = 5.0  # idle keep-alive connections close after this
    grpc_handshake_timeout_seconds: float = 10.0  # a new gRPC connection's TLS and HTTP/2 setup
    grpc_keepalive_seconds: float = (
        60.0  # ping a silent connection after this; drop it if unanswered
    )
    grpc_keepalive_timeout_seconds: float = 20.0  # ... within this
    grpc_max_connection_idle_seconds: float = (
        300.0  # close connections without calls after this (0 = never)
    )
    grpc_max_connection_age_seconds: float = 3600.0  # close connections this old (0 = never) ...
    grpc_max_connection_age_grace_seconds: float = 600.0  # ... once their calls end, or after this

    @property
    def store_url(self) -> str:
        return self.store or f"sqlite:{pathlib.Path(self.data_dir) / 'tasks.db'}"


FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
_TYPES = get_type_hints(Settings)


def _coerce(key: str, value: Any, source: str) -> Any:
    kind = _TYPES[key]
    where = f"{key} (from {source})"
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if kind is int:
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if kind is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if kind is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    if kind == list[str]:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    # list[dict] values (skills): only from a file
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{where}: expected a list of tables (set it in the config file)")
    return value


def load(
    config_file: str | None = None,
    env: dict[str, str] | None = None,
    flags: dict[str, Any] | None = None,
) -> Settings:
    values: dict[str, Any] = {}
    if config_file:
        path = pathlib.Path(config_file)
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(
                f"config file {config_file!r}: cannot read it ({exc.strerror})"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config_file!r}: not valid TOML ({exc})") from None
        for key, value in data.items():
            if key not in FIELDS:
                raise ConfigError(
                    f"config file {config_file!r}: unknown key {key!r}; known: {', '.join(FIELDS)}"
                )
            values[key] = _coerce(key, value, "config file")
    environ = os.environ if env is None else env
    for key in FIELDS:
        name = ENV_PREFIX + key.upper()
        if name in environ:
            values[key] = _coerce(key, environ[name], f"environment {name}")
    for key, value in (flags or {}).items():
        if value is not None:
            values[key] = _coerce(key, value, f"--{key.replace('_', '-')}")
    settings = Settings(**values)
    validate(settings)
    return settings


def validate(s: Settings) -> None:
    for key in ("grpc_port", "http_port"):
        port = getattr(s, key)
        low = -1 if key == "http_port" else 0
        if not low <= port <= 65535:
            raise ConfigError(
                f"{key}: {port} is not a port number (0-65535{', or -1 to disable' if low else ''})"
            )
    if s.agent == "command" and not s.command.strip():
        raise ConfigError(
            "command: the command agent needs a program; set --command or A2A_COMMAND"
        )
    if s.upstream:
        host, sep, port = s.upstream.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(
                f"upstream: expected HOST:PORT of the gRPC server to proxy to, got {s.upstream!r}"
            )
        if s.http_port < 0:
            raise ConfigError(
                "upstream: proxy mode serves only the HTTP gateway; set http_port (not -1)"
            )
    if s.sse_keepalive_seconds <= 0:
        raise ConfigError(
            "sse_keepalive_seconds: must be positive (seconds between keep-alive comments)"
        )
    if s.grpc_max_concurrent_calls < 0:
        raise ConfigError(
            "grpc_max_concurrent_calls: must be 0 (no limit) or a positive number of calls"
        )
    if not 0 <= s.drain_seconds <= 3600:
        raise ConfigError(
            f"drain_seconds: must be between 0 and 3600 (seconds), got {s.drain_seconds}"
        )
    if not 0 <= s.drain_grace_seconds <= 3600:
        raise ConfigError(
            f"drain_grace_seconds: must be between 0 and 3600 (seconds), got {s.drain_grace_seconds}"
        )
    if s.card_max_age < 0:
        raise ConfigError("card_max_age: must not be negative")
    if not 0 <= s.store_commit_interval_ms <= 1000:
        raise ConfigError(
            "store_commit_interval_ms: must be between 0 and 1000 (milliseconds between group commits)"
        )
    if s.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"log_level: expected DEBUG, INFO, WARNING or ERROR, got {s.log_level!r}")
    from service.push.settings import validate_push  # imports this module

    validate_push(s)
    from service.cards.signing import validate_signing
    from service.inputs.policy import validate_inputs

    validate_inputs(s)
    validate_signing(s)
    from service.auth.settings import validate_security  # imports this module

    validate_security(s)
    if s.tls_hsts_max_age_seconds < 0:
        raise ConfigError(
            "tls_hsts_max_age_seconds: must not be negative (seconds browsers keep to https; "
            "0 sends no Strict-Transport-Security header)"
        )
    from service.net.limits import validate_netlimits

    validate_netlimits(s)
