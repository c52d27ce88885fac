"""Validation of the `push_*` configuration keys (called from `service.config.validate`)."""

from __future__ import annotations

import ipaddress
from typing import Any

from service.app.config import ConfigError
from service.push.crypto import check_key

QUEUES = ("local-file", "redis-streams")
KEY_HINT = (
    'generate one with: python -c "from cryptography.fernet import Fernet; '
    'print(Fernet.generate_key().decode())"'
)


def validate_push(s: Any) -> None:
    if s.push_queue not in QUEUES:
        raise ConfigError(f"push_queue: expected {' or '.join(QUEUES)}, got {s.push_queue!r}")
    for net in s.push_allow_networks:
        try:
            ipaddress.ip_network(net.strip(), strict=False)
        except ValueError:
            raise ConfigError(
                f"push_allow_networks: {net!r} is not a network; write an address or CIDR like 10.1.2.0/24"
            ) from None
    for host in s.push_allow_hosts:
        if not host.strip() or any(c in host for c in "/@ \t"):
            raise ConfigError(
                f"push_allow_hosts: {host!r} is not a host name (no scheme, port or path)"
            )
    for i, key in enumerate(s.push_secret_keys):
        try:
            check_key(key)
        except ValueError:
            raise ConfigError(
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
            raise ConfigError(f"{key}: must be greater than 0 (got {getattr(s, key)})")
    for key in ("push_concurrency", "push_host_concurrency", "push_max_attempts"):
        if getattr(s, key) < 1:
            raise ConfigError(f"{key}: must be at least 1 (got {getattr(s, key)})")
    if s.push_retry_max_seconds < s.push_retry_base_seconds:
        raise ConfigError(
            "push_retry_max_seconds: must not be smaller than push_retry_base_seconds"
        )
    if s.push_lease_seconds <= s.push_timeout_seconds:
        raise ConfigError(
            "push_lease_seconds: must be larger than push_timeout_seconds, or a delivery still "
            "running would be handed to another worker"
        )
    if s.push_queue == "redis-streams" and not s.push_redis_url.startswith(
        ("redis://", "rediss://", "unix://")
    ):
        raise ConfigError(
            f"push_redis_url: expected redis://HOST:PORT/DB, rediss://... or unix://PATH, got {s.push_redis_url!r}"
        )
    if s.push_queue == "redis-streams" and not s.push_redis_group.strip():
        raise ConfigError("push_redis_group: must not be empty")
