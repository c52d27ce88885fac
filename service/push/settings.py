"""The `push_*` settings: the section the configuration composes, and its checks
(ValueError naming the key; the configuration reports it as a ConfigError)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from service.push.crypto import check_key

QUEUES = ("local-file", "redis-streams")
KEY_HINT = (
    'generate one with: python -c "from cryptography.fernet import Fernet; '
    'print(Fernet.generate_key().decode())"'
)


@dataclass
class PushSettings:
    """Push notifications: delivery queue, SSRF exceptions, sealing keys, retries (README "Push notifications")."""

    push_notifications: bool = False
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


def validate_push(s: PushSettings) -> None:
    if s.push_queue not in QUEUES:
        raise ValueError(f"push_queue: expected {' or '.join(QUEUES)}, got {s.push_queue!r}")
    for net in s.push_allow_networks:
        try:
            ipaddress.ip_network(net.strip(), strict=False)
        except ValueError:
            raise ValueError(
                f"push_allow_networks: {net!r} is not a network; write an address or CIDR like 10.1.2.0/24"
            ) from None
    for host in s.push_allow_hosts:
        if not host.strip() or any(c in host for c in "/@ \t"):
            raise ValueError(
                f"push_allow_hosts: {host!r} is not a host name (no scheme, port or path)"
            )
    for i, key in enumerate(s.push_secret_keys):
        try:
            check_key(key)
        except ValueError:
            raise ValueError(
                f"push_secret_keys[{i}]: not a Fernet key (32 url-safe base64-encoded bytes); {KEY_HINT}"
            ) from None
    positive = (
        "push_timeout_seconds",
        "push_max_age_seconds",
        "push_retry_base_seconds",
        "push_lease_seconds",
    )
    for key in positive:
        if getattr(s, key) <= 0:
            raise ValueError(f"{key}: must be greater than 0 (got {getattr(s, key)})")
    for key in ("push_concurrency", "push_host_concurrency", "push_max_attempts"):
        if getattr(s, key) < 1:
            raise ValueError(f"{key}: must be at least 1 (got {getattr(s, key)})")
    if s.push_retry_max_seconds < s.push_retry_base_seconds:
        raise ValueError("push_retry_max_seconds: must not be smaller than push_retry_base_seconds")
    if s.push_lease_seconds <= s.push_timeout_seconds:
        raise ValueError(
            "push_lease_seconds: must be larger than push_timeout_seconds, or a delivery still "
            "running would be handed to another worker"
        )
    if s.push_queue == "redis-streams" and not s.push_redis_url.startswith(
        ("redis://", "rediss://", "unix://")
    ):
        raise ValueError(
            f"push_redis_url: expected redis://HOST:PORT/DB, rediss://... or unix://PATH, got {s.push_redis_url!r}"
        )
    if s.push_queue == "redis-streams" and not s.push_redis_group.strip():
        raise ValueError("push_redis_group: must not be empty")
