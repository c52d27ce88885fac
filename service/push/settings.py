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

    push_notifications: bool = field(
        default=False,
        metadata={"help": "enables push notification configs (`capabilities.pushNotifications`)"},
    )
    push_queue: str = field(
        default="local-file",
        metadata={
            "help": 'where delivery jobs wait: `local-file` (DATA_DIR/push-queue) or `redis-streams` (see "Push notifications")'
        },
    )
    push_allow_hosts: list[str] = field(
        default_factory=list,
        metadata={
            "help": "callback host names allowed although the SSRF rules would refuse them (exact "
            "names; comma list in the environment)"
        },
    )
    push_allow_networks: list[str] = field(
        default_factory=list,
        metadata={
            "help": "callback networks allowed although private/local, as CIDRs (`10.2.0.0/16`, "
            "`127.0.0.1/32`)"
        },
    )
    push_secret_keys: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Fernet keys sealing push tokens and credentials at rest; the first seals, all "
            "open (rotation). Default: DATA_DIR/push-secret.key, created with mode 0600",
            "default": "generated key file",
        },
    )
    push_timeout_seconds: float = field(
        default=10.0, metadata={"help": "per-request timeout of a callback POST"}
    )
    push_concurrency: int = field(default=32, metadata={"help": "callback POSTs in flight at once"})
    push_host_concurrency: int = field(
        default=8, metadata={"help": "callback POSTs in flight per callback host"}
    )
    push_max_attempts: int = field(
        default=10,
        metadata={"help": "attempts before a notification goes to the dead-letter store"},
    )
    push_max_age_seconds: float = field(
        default=86400.0,
        metadata={"help": "how long a notification may be retried before it is dead"},
    )
    push_retry_base_seconds: float = field(
        default=1.0,
        metadata={
            "help": "exponential backoff of callback retries: the first delay (half jittered); "
            "`Retry-After` is honoured"
        },
    )
    push_retry_max_seconds: float = field(
        default=300.0, metadata={"help": "exponential backoff: the longest delay"}
    )
    push_lease_seconds: float = field(
        default=300.0,
        metadata={
            "help": "a job leased by a worker that stopped answering is handed out again after this "
            "(must exceed `push_timeout_seconds`)"
        },
    )
    push_reconcile_seconds: float = field(
        default=30.0,
        metadata={
            "help": "how often the dispatcher looks over every cursor: catches up tasks whose "
            "events another (stopped) process committed but did not enqueue, and drops the "
            "cursors of tasks that were never stored"
        },
    )
    push_redis_url: str = field(
        default="redis://127.0.0.1:6379/0", metadata={"help": "Redis for `redis-streams`"}
    )
    push_redis_prefix: str = field(
        default="a2a:push", metadata={"help": "prefix of every Redis key of the queue"}
    )
    push_redis_stream: str = field(
        default="",
        metadata={"help": "the Redis stream of delivery jobs", "default": "`PREFIX:stream`"},
    )
    push_redis_retry_key: str = field(
        default="",
        metadata={
            "help": "the Redis sorted set of jobs waiting for a retry",
            "default": "`PREFIX:retry`",
        },
    )
    push_redis_dead_stream: str = field(
        default="", metadata={"help": "the Redis dead-letter stream", "default": "`PREFIX:dead`"}
    )
    push_redis_group: str = field(
        default="a2a-push", metadata={"help": "consumer group shared by the replicas"}
    )
    push_redis_consumer: str = field(
        default="",
        metadata={
            "help": "this replica's consumer name (stable across restarts, distinct per replica)",
            "default": "`HOST:HASH`, the host name and a hash of the data directory",
        },
    )


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
        "push_reconcile_seconds",
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
