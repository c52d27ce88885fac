"""One typed configuration: defaults < TOML file < environment < command-line flags.

Every key has one name. In a file it is written as is (`grpc_port = 50051`), in
the environment as `A2A_` + upper case (`A2A_GRPC_PORT=50051`), on the command
line as a flag (`--grpc-port 50051`). A bad value stops startup with a message
that names the key and how to fix it; a misspelt key gets the nearest known ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import pathlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_type_hints

from gateway.unknown_fields import UnknownFieldSettings, validate_unknown_fields
from service.app.memory import MemorySettings, validate_memory
from service.auth import settings as security
from service.auth.settings import SecuritySettings
from service.cards import signing
from service.cards.signing import SigningSettings
from service.engine.files import FileSettings, validate_files
from service.engine.limits import LimitSettings, validate_limits
from service.engine.retention import RetentionSettings, validate_retention
from service.engine.settings import ClusterSettings, validate_cluster
from service.inputs.policy import InputSettings, validate_inputs
from service.net.limits import NetSettings, validate_netlimits
from service.net.local import LocalTransportSettings, validate_local_transports
from service.net.redis_streams import RedisStreamsSettings, url_secrets, validate_redis_streams
from service.net.websocket import WebSocketSettings, validate_websocket
from service.ops.logs import LogSettings, validate_logs
from service.ops.readiness import ProbeSettings, validate_probes
from service.permission.policy import PermissionSettings, validate_permissions
from service.push.settings import PushSettings, validate_push
from service.setting import (
    SECONDS,
    at_least,
    between,
    check_section,
    greater_than_0,
    port,
    rule,
    setting,
)
from service.telemetry.settings import TelemetrySettings, validate_telemetry

ENV_PREFIX = "A2A_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
WHERE_KEYS_ARE = 'every key: README "Configuration", or `python -m service config-reference`'

# `A2A_*` variables that are not settings but are read by something else of the project,
# so `unknown_env` does not warn about them.
OTHER_ENV = frozenset(
    {
        "A2A_OUTPUT_DIR",  # given to the command agent's program each turn
        "A2A_WORKER_INDEX",  # set by `serve --workers N` in each worker
        "A2A_WORKER_METRICS_DIR",  # and, with metrics on, where its metrics socket is
        "A2A_CALL_BEARER",  # the a2a-call client's credentials
        "A2A_CALL_API_KEY",
        "A2A_CALL_BASIC",
        "A2A_TEST_POSTGRES_URL",  # the test suite's
        "A2A_FAULTS_LONG",
        "A2A_FUZZ_EXAMPLES",
    }
)


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says which and why."""


@dataclass
class Settings(
    PushSettings,
    SecuritySettings,
    InputSettings,
    SigningSettings,
    NetSettings,
    LocalTransportSettings,
    WebSocketSettings,
    RedisStreamsSettings,
    UnknownFieldSettings,
    FileSettings,
    PermissionSettings,
    LogSettings,
    ProbeSettings,
    LimitSettings,
    RetentionSettings,
    ClusterSettings,
    TelemetrySettings,
    MemorySettings,
):
    """Every key: the sections each subsystem owns (and validates), plus the service's own."""

    host: str = setting("127.0.0.1", "listen address (`0.0.0.0` for all interfaces)")
    grpc_port: int = setting(
        50051,
        "gRPC port; `0` picks a free one, `-1` turns gRPC off (health and reflection too)",
        check=port("0-65535, or -1 to turn gRPC off", low=-1),
    )
    grpc_jsonrpc: bool = setting(
        False,
        "also serve JSON-RPC inside gRPC on the gRPC listener: the service "
        "`a2a_service.jsonrpc.v1.JsonRpc` (`Send`, `Stream`), listed by reflection and "
        "health ([Other transports](transports.md))",
    )
    http_port: int = setting(
        8080,
        "HTTP gateway port; `0` picks a free one, `-1` disables the gateway",
        check=port("0-65535, or -1 to disable", low=-1),
    )
    data_dir: str = setting(
        "data", "task database and command-agent workspaces, created on first run"
    )
    store: str = setting(
        "",
        "`sqlite:PATH`, `memory:` (tests and benchmarks; not durable), or `postgresql://USER[:PASSWORD]@HOST[:PORT]/DB` (shared by several processes, see [Scale-out](scale-out.md)); query parameters of a PostgreSQL URL are server settings, e.g. `?search_path=a2a`",
        shown="`sqlite:DATA_DIR/tasks.db`",
    )
    store_commit_interval_ms: float = setting(
        5.0,
        "group commit (SQLite and PostgreSQL): when independent callers write at once, their writes wait "
        "until this long after the last commit (twice as long while more writers arrive "
        "than one slot gathers) and share one transaction; a lone caller's writes commit "
        "at once; `0` never waits",
        check=between(
            0, 1000, "must be between {low} and {high} (milliseconds between group commits)"
        ),
    )
    agent: str = setting(
        "echo",
        "`echo`, `command`, an import path `package.module:attr`, or an a2a-sdk "
        "AgentExecutor as `a2a_sdk:package.module:attr` (docs/a2a-sdk-agents.md)",
    )
    command: str = setting("", 'program run by the `command` agent, shell-quoted (`"wc -w"`)')
    command_grace_seconds: float = setting(
        5.0, "SIGTERM→SIGKILL delay when a command turn is canceled"
    )
    command_approval: bool = setting(
        False,
        "the `command` agent asks permission (`toolName` `command`) before running "
        "its program each turn; `deny` ends the task `REJECTED` without running it (see "
        "[Human in the loop](human-in-the-loop.md))",
    )
    command_env: list[str] = setting(
        [],
        "what the `command` agent's program gets of the environment besides `PATH`, "
        "`HOME`, `LANG`, `LC_*`, `TZ`, `TMPDIR` and `A2A_OUTPUT_DIR`: `NAME` passes the "
        "server's variable on, `NAME=VALUE` sets one (comma list in `A2A_COMMAND_ENV`). "
        "`A2A_*` and `OTEL_*` names, and values naming a key or secret file of the "
        "server, are refused",
    )
    public_url: str = setting("", "base URL of the HTTP gateway as clients reach it (agent card)")
    grpc_public_address: str = setting("", "`host:port` of gRPC as clients reach it (agent card)")
    upstream: str = setting(
        "", "proxy mode: run only the gateway, forwarding to this A2A gRPC server"
    )
    name: str = setting("", "agent card name", shown="the agent's own")
    description: str = setting("", "agent card description", shown="the agent's own")
    version: str = setting("0.1.0", "agent card version")
    provider_organization: str = setting("", "agent card provider: organization")
    provider_url: str = setting("", "agent card provider: URL (with `provider_organization`)")
    documentation_url: str = setting("", "agent card documentation URL")
    skills: list[dict[str, Any]] | None = setting(
        None, "agent card skills, a list of tables (config file only)", shown="the agent's own"
    )
    input_modes: list[str] = setting(
        [], "agent card default input media types", shown="the agent's own"
    )
    output_modes: list[str] = setting(
        [], "agent card default output media types", shown="the agent's own"
    )
    extended_card: bool = setting(
        False,
        "offer `GetExtendedAgentCard` (`capabilities.extendedAgentCard`; on when "
        "`extended_skills` are set); authenticated callers only when auth is on",
    )
    extended_skills: list[dict[str, Any]] | None = setting(
        None, "the extended card's extra skills, a list of tables (config file only)"
    )
    compat_v03: bool = setting(
        True,
        "serve A2A v0.3 clients beside 1.0, translated into the same API: JSON-RPC's "
        "slash-named methods (`message/send`, ...), and the card's v0.3 members and "
        "`protocolVersion` 0.3 interfaces ([v0.3 clients](v03-clients.md)); `false`: v0.3 "
        "requests get VersionNotSupported",
    )
    required_extensions: list[str] = setting(
        [], "extension URIs callers must list in `A2A-Extensions`"
    )
    call_interceptors: list[str] = setting(
        [],
        "your own steps on every call, every binding: import paths `package.module:attr` of "
        "interceptors ([Writing an agent: call interceptors](agents.md#call-interceptors-your-own-step-on-every-call)), run in order after the built-in checks",
    )
    card_max_age: int = setting(
        60, "`Cache-Control: max-age` of the agent card", check=at_least(0, "must not be negative")
    )
    sse_keepalive_seconds: float = setting(
        15.0,
        "keep-alive comment interval on idle SSE streams",
        check=greater_than_0("must be positive (seconds between keep-alive comments)"),
    )
    drain_seconds: float = setting(
        5.0,
        "on SIGTERM: how long running turns and in-flight calls may finish (0–3600)",
        check=between(0, 3600, SECONDS),
    )
    drain_grace_seconds: float = setting(
        1.0,
        "on SIGTERM: how long new calls are still taken after health turns non-serving, "
        "so load balancers notice (capped by `drain_seconds`)",
        check=between(0, 3600, SECONDS),
    )
    log_level: str = setting(
        "INFO",
        "`DEBUG`, `INFO`, `WARNING`, `ERROR`",
        check=rule(
            lambda v: v.upper() in LOG_LEVELS,
            "expected DEBUG, INFO, WARNING or ERROR, got {value!r}",
        ),
    )

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
                    f"config file {config_file!r}: unknown key {key!r}{_did_you_mean(near_keys(key))} "
                    f"({WHERE_KEYS_ARE})"
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


def _did_you_mean(names: list[str]) -> str:
    return "; did you mean " + " or ".join(names) + "?" if names else ""


def near_keys(key: str) -> list[str]:
    """The known keys nearest to a misspelt one (none when nothing is close)."""
    wanted = key.lower().removeprefix(ENV_PREFIX.lower())  # `GRPC_PORT`, `A2A_GRPC_PORT`
    return difflib.get_close_matches(wanted, FIELDS, n=3, cutoff=0.75)


def unknown_env(env: Mapping[str, str] | None = None) -> list[str]:
    """One warning per `A2A_*` variable that names no setting (a typo is otherwise silently
    ignored), the nearest ones suggested. Only names are used: values may be secrets."""
    environ = os.environ if env is None else env
    warnings = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in OTHER_ENV:
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key in FIELDS:
            continue
        near = [ENV_PREFIX + k.upper() for k in near_keys(key)]
        warnings.append(
            f"environment: {name} is not a setting and is ignored{_did_you_mean(near)} "
            f"({WHERE_KEYS_ARE})"
        )
    return warnings


def validate_own(s: Settings) -> None:
    """The checks of the service's own keys (the sections check theirs)."""
    check_section(s, Settings)
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
        if s.grpc_jsonrpc:
            raise ConfigError(
                "grpc_jsonrpc: proxy mode serves no gRPC listener to carry it; serve it on "
                "the upstream, or use the HTTP gateway's JSON-RPC"
            )
        if s.unix_socket_peer_principals:
            raise ConfigError(
                "unix_socket_peer_principals: in proxy mode the upstream authenticates every "
                "call from its credentials, so a peer cannot be vouched for; send credentials"
            )
    if s.grpc_jsonrpc and s.grpc_port < 0:
        raise ConfigError(
            "grpc_jsonrpc: served on the gRPC listener, which grpc_port = -1 turns off"
        )
    if s.workers > 1:
        for key, value in (("stdio", s.stdio), ("unix_socket", s.unix_socket)):
            if value:
                raise ConfigError(
                    f"{key}: served by one process; it cannot be shared by --workers"
                    f" {s.workers} (run one process, or use the shared TCP ports)"
                )


def validate(s: Settings) -> None:
    for check in (
        validate_own,
        validate_push,
        validate_inputs,
        signing.validate_signing,
        security.validate_security,
        validate_netlimits,
        validate_local_transports,
        validate_websocket,
        validate_redis_streams,
        validate_files,
        validate_unknown_fields,
        validate_permissions,
        validate_logs,
        validate_probes,
        validate_limits,
        validate_retention,
        validate_cluster,
        validate_telemetry,
        validate_memory,
    ):
        try:
            check(s)
        except ConfigError:
            raise
        except ValueError as exc:  # a section's own check; its message names the key
            raise ConfigError(str(exc)) from None


def secret_files(s: Settings) -> list[str]:
    """Every file a setting names that holds a key, secret or certificate (each section lists
    its own), for the input policy: no message may point at them."""
    return security.secret_files(s) + signing.secret_files(s)


def secrets(s: Settings) -> list[str]:
    """Every configured credential and key, so the log redactor never writes one."""
    return [
        *security.configured_secrets(s),
        *([s.card_signing_secret] if s.card_signing_secret else []),
        *s.push_secret_keys,
        *url_secrets(s.redis_streams_url),
    ]
