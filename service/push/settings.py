"""The `push_*` settings: the section the configuration composes, and its checks
(ValueError naming the key; the configuration reports it as a ConfigError)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from service.push.crypto import check_key
from service.setting import at_least, check_section, greater_than_0, one_of, setting

QUEUES = ("local-file", "redis-streams")
KEY_HINT = (
    'generate one with: python -c "from cryptography.fernet import Fernet; '
    'print(Fernet.generate_key().decode())"'
)


@dataclass
class PushSettings:
    """Push notifications: delivery queue, SSRF exceptions, sealing keys, retries ([Push notifications](push-notifications.md))."""

    push_notifications: bool = setting(
        False, "enables push notification configs (`capabilities.pushNotifications`)"
    )
    push_queue: str = setting(
        "local-file",
        "where delivery jobs wait: `local-file` (DATA_DIR/push-queue) or `redis-streams` (see [Push notifications](push-notifications.md))",
        check=one_of(QUEUES, " or ".join(QUEUES)),
    )
    push_allow_hosts: list[str] = setting(
        [],
        "callback host names allowed although the SSRF rules would refuse them (exact "
        "names; comma list in the environment)",
    )
    push_allow_networks: list[str] = setting(
        [],
        "callback networks allowed although private/local, as CIDRs (`10.2.0.0/16`, "
        "`127.0.0.1/32`)",
    )
    push_secret_keys: list[str] = setting(
        [],
        "Fernet keys sealing push tokens and credentials at rest; the first seals, all "
        "open (rotation). Default: DATA_DIR/push-secret.key, created with mode 0600",
        shown="generated key file",
    )
    push_timeout_seconds: float = setting(
        10.0, "per-request timeout of a callback POST", check=greater_than_0()
    )
    push_concurrency: int = setting(32, "callback POSTs in flight at once", check=at_least(1))
    push_host_concurrency: int = setting(
        8, "callback POSTs in flight per callback host", check=at_least(1)
    )
    push_max_attempts: int = setting(
        10, "attempts before a notification goes to the dead-letter store", check=at_least(1)
    )
    push_max_age_seconds: float = setting(
        86400.0, "how long a notification may be retried before it is dead", check=greater_than_0()
    )
    push_retry_base_seconds: float = setting(
        1.0,
        "exponential backoff of callback retries: the first delay (half jittered); "
        "`Retry-After` is honoured",
        check=greater_than_0(),
    )
    push_retry_max_seconds: float = setting(300.0, "exponential backoff: the longest delay")
    push_lease_seconds: float = setting(
        300.0,
        "a job leased by a worker that stopped answering is handed out again after this "
        "(must exceed `push_timeout_seconds`)",
        check=greater_than_0(),
    )
    push_reconcile_seconds: float = setting(
        30.0,
        "how often the dispatcher looks over every cursor: catches up tasks whose "
        "events another (stopped) process committed but did not enqueue, and drops the "
        "cursors of tasks that were never stored",
        check=greater_than_0(),
    )
    push_redis_url: str = setting("redis://127.0.0.1:6379/0", "Redis for `redis-streams`")
    push_redis_prefix: str = setting("a2a:push", "prefix of every Redis key of the queue")
    push_redis_stream: str = setting(
        "", "the Redis stream of delivery jobs", shown="`PREFIX:stream`"
    )
    push_redis_retry_key: str = setting(
        "", "the Redis sorted set of jobs waiting for a retry", shown="`PREFIX:retry`"
    )
    push_redis_dead_stream: str = setting("", "the Redis dead-letter stream", shown="`PREFIX:dead`")
    push_redis_group: str = setting("a2a-push", "consumer group shared by the replicas")
    push_redis_consumer: str = setting(
        "",
        "this replica's consumer name (stable across restarts, distinct per replica)",
        shown="`HOST:HASH`, the host name and a hash of the data directory",
    )


def validate_push(s: PushSettings) -> None:
    check_section(s, PushSettings)
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
