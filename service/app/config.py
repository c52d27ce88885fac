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

from service.auth import settings as security
from service.auth.settings import SecuritySettings
from service.cards import signing
from service.cards.signing import SigningSettings
from service.inputs.policy import InputSettings, validate_inputs
from service.net.limits import NetSettings, validate_netlimits
from service.push.settings import PushSettings, validate_push
from service.telemetry.settings import TelemetrySettings, validate_telemetry

ENV_PREFIX = "A2A_"


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says which and why."""


@dataclass
class Settings(
    PushSettings, SecuritySettings, InputSettings, SigningSettings, NetSettings, TelemetrySettings
):
    """Every key: the sections each subsystem owns (and validates), plus the service's own."""

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
    extended_card: bool = False
    extended_skills: list[dict[str, Any]] | None = None
    required_extensions: list[str] = field(default_factory=list)
    card_max_age: int = 60
    sse_keepalive_seconds: float = 15.0  # comment line sent on idle event streams
    drain_seconds: float = 5.0  # on SIGTERM: how long running turns and in-flight calls may finish
    drain_grace_seconds: float = (
        1.0  # on SIGTERM: how long new calls are still taken (health is already non-serving)
    )
    log_level: str = "INFO"

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
    for check in (
        validate_push,
        validate_inputs,
        signing.validate_signing,
        security.validate_security,
        validate_netlimits,
        validate_telemetry,
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
