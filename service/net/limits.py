"""Connection limits of both listeners, and the file-descriptor budget behind them.

Every open connection costs a file descriptor, and so do the task store, the push
queue, log files, outgoing push requests and grpc's own machinery. Without limits,
idle sockets from one unauthenticated client exhaust RLIMIT_NOFILE: new connections
then fail on both ports and the store and push queue fail with EMFILE. So:

- at startup the soft RLIMIT_NOFILE is raised to the hard limit (`raise_nofile_limit`);
- each listener keeps at most `connection_cap(settings)` connections open: the
  `max_connections` setting, lowered so that the listeners together leave
  `fd_reserve` descriptors for everything else;
- gRPC (`grpc_server_options`): grpc's own per-listener connection quota
  (`grpc.max_allowed_incoming_connections`: past it a new connection is closed as soon
  as it is accepted), a handshake deadline for new connections (TLS and the HTTP/2
  preface: a socket that sends nothing is closed), keepalive pings that drop dead
  peers (also on connections without calls), an idle limit (a connection without
  calls is closed with GOAWAY; clients reconnect on their next call) and a maximum
  age with a grace period for the calls still running;
- HTTP (gateway.limits.connections): the same cap, plus deadlines for headers and bodies and
  the keep-alive timeout (`http_limits`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from service.engine.limits import refuse
from service.protocol.errors import A2AError
from service.setting import at_least, between, check_section, rule, setting

log = logging.getLogger("service.netlimits")

MIN_FD_RESERVE = 32
TIMEOUT = rule(
    lambda value: 0 < value <= 86400,
    "must be more than 0 and at most 86400 seconds (got {value})",
)
AGE_LIMIT = between(
    0, 30 * 86400, "must be between {low} (no limit) and {high} seconds (got {value})"
)
_reported: set[tuple[int, int, int]] = set()


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (idempotent); the (soft, hard) limits
    now in force, or (0, 0) where the platform has none."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return 0, 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # e.g. macOS caps the soft limit below an infinite hard one
            pass
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard


@dataclass
class NetSettings:
    """Connection limits of both listeners ([Operations: connection limits](operations.md#connection-limits))."""

    grpc_max_concurrent_calls: int = setting(
        1000,
        "gRPC calls in flight at once, streams included; past it a call is refused at "
        "once with `RESOURCE_EXHAUSTED` (reason `RESOURCE_EXHAUSTED`, "
        "`google.rpc.RetryInfo` of 1 s); `0` = no limit",
        check=at_least(0, "must be 0 (no limit) or a positive number of calls"),
    )
    max_connections: int = setting(
        1000,
        "open connections per listener (gRPC and HTTP each); lowered at startup, with a warning, to (RLIMIT_NOFILE − `fd_reserve`) ÷ listeners. See [Operations: connection limits](operations.md#connection-limits)",
        check=at_least(1),
    )
    fd_reserve: int = setting(
        128,
        "file descriptors kept free of connections for the store, push queue, outgoing "
        "push requests, logs and grpc itself (at least 32; keep it above "
        "`push_concurrency` + 64)",
        check=at_least(MIN_FD_RESERVE),
    )
    http_header_timeout_seconds: float = setting(
        10.0,
        "a new HTTP connection's TLS handshake and first request headers must arrive "
        "within this of accept; a later request's headers within this of its first byte; "
        "else the connection is closed",
        check=TIMEOUT,
    )
    http_body_timeout_seconds: float = setting(
        60.0,
        "a request body must be complete this long after its headers, else `408` and close",
        check=TIMEOUT,
    )
    http_keepalive_timeout_seconds: float = setting(
        5.0, "an idle keep-alive HTTP connection is closed after this", check=TIMEOUT
    )
    grpc_handshake_timeout_seconds: float = setting(
        10.0,
        "a new gRPC connection must finish TLS and send its HTTP/2 settings within this, "
        "else it is closed",
        check=TIMEOUT,
    )
    grpc_keepalive_seconds: float = setting(
        60.0,
        "the server pings a silent gRPC connection after this long (dead peers)",
        check=TIMEOUT,
    )
    grpc_keepalive_timeout_seconds: float = setting(
        20.0, "... and closes it when no answer comes within this", check=TIMEOUT
    )
    grpc_max_connection_idle_seconds: float = setting(
        300.0,
        "a gRPC connection without calls is closed (GOAWAY; clients reconnect on their "
        "next call); `0` = never",
        check=AGE_LIMIT,
    )
    grpc_max_connection_age_seconds: float = setting(
        3600.0,
        "a gRPC connection this old gets GOAWAY (±10 %); `0` = no age limit",
        check=AGE_LIMIT,
    )
    grpc_max_connection_age_grace_seconds: float = setting(
        600.0,
        "calls still running on a connection past its age have this long to finish",
        check=TIMEOUT,
    )


class _Listeners(Protocol):
    """What the descriptor budget needs besides the limits: which listeners run."""

    max_connections: int
    fd_reserve: int
    upstream: str
    http_port: int


def listener_count(s: _Listeners) -> int:
    """Listeners sharing the descriptor budget: gRPC (not in proxy mode) and HTTP (unless off)."""
    return max(1, (0 if s.upstream else 1) + (1 if s.http_port >= 0 else 0))


def connection_cap(s: _Listeners) -> int:
    """Connections each listener keeps open at once: max_connections, lowered when the soft
    RLIMIT_NOFILE (after raising it to the hard limit) minus fd_reserve, shared by the
    listeners, is smaller."""
    soft, _ = raise_nofile_limit()
    cap = s.max_connections
    if soft > 0:
        budget = (soft - s.fd_reserve) // listener_count(s)
        if budget < cap:
            cap = max(1, budget)
            seen = (soft, s.fd_reserve, cap)
            if seen not in _reported:
                _reported.add(seen)
                log.warning(
                    "max_connections lowered from %d to %d per listener: RLIMIT_NOFILE is %d "
                    "and %d descriptors are kept in reserve (fd_reserve); raise the limit "
                    "(ulimit -n, LimitNOFILE=) to allow more",
                    s.max_connections,
                    cap,
                    soft,
                    s.fd_reserve,
                )
    return cap


class _GrpcListener(_Listeners, Protocol):
    grpc_handshake_timeout_seconds: float
    grpc_keepalive_seconds: float
    grpc_keepalive_timeout_seconds: float
    grpc_max_connection_idle_seconds: float
    grpc_max_connection_age_seconds: float
    grpc_max_connection_age_grace_seconds: float
    grpc_max_concurrent_calls: int


class _HttpListener(_Listeners, Protocol):
    http_header_timeout_seconds: float
    http_body_timeout_seconds: float
    http_keepalive_timeout_seconds: float


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


PENDING_CALLS_MIN = 65_536


def pending_calls(s: _GrpcListener) -> int:
    """How many arrived calls grpc-core queues for the servicer before it cancels some."""
    return max(PENDING_CALLS_MIN, 16 * s.grpc_max_concurrent_calls)


def grpc_server_options(s: _GrpcListener) -> list[tuple[str, int]]:
    """grpc.aio.server channel options for the connection limits (see the module docstring)."""
    options = [
        ("grpc.max_allowed_incoming_connections", connection_cap(s)),
        ("grpc.server_handshake_timeout_ms", _ms(s.grpc_handshake_timeout_seconds)),
        ("grpc.keepalive_time_ms", _ms(s.grpc_keepalive_seconds)),
        ("grpc.keepalive_timeout_ms", _ms(s.grpc_keepalive_timeout_seconds)),
        ("grpc.keepalive_permit_without_calls", 1),  # our pings also find dead idle peers
        ("grpc.http2.max_pings_without_data", 0),  # ... and go on while a stream is silent
        # Calls that arrived but are not yet handed to the servicer: past grpc-core's default
        # (1,000, randomly dropping up to 3,000) it CANCELs them before our call limit can
        # answer RESOURCE_EXHAUSTED with a retry hint. They wait only until the event loop
        # takes them, and a refusal is quick, so the queue may be long.
        ("grpc.server.max_pending_requests", pending_calls(s)),
        ("grpc.server.max_pending_requests_hard_limit", pending_calls(s)),
    ]
    if s.grpc_max_connection_idle_seconds > 0:
        options.append(("grpc.max_connection_idle_ms", _ms(s.grpc_max_connection_idle_seconds)))
    if s.grpc_max_connection_age_seconds > 0:
        options.append(("grpc.max_connection_age_ms", _ms(s.grpc_max_connection_age_seconds)))
        options.append(
            ("grpc.max_connection_age_grace_ms", _ms(s.grpc_max_connection_age_grace_seconds))
        )
    return options


@dataclass(frozen=True)
class HttpLimits:
    max_connections: int = 1000  # already fitted to the descriptor budget
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    keepalive_timeout: float = 5.0


def http_limits(s: _HttpListener) -> HttpLimits:
    return HttpLimits(
        max_connections=connection_cap(s),
        header_timeout=s.http_header_timeout_seconds,
        body_timeout=s.http_body_timeout_seconds,
        keepalive_timeout=s.http_keepalive_timeout_seconds,
    )


def validate_netlimits(s: NetSettings) -> None:
    """Startup checks of the connection settings (ValueError naming the key)."""
    check_section(s, NetSettings)


RETRY_AFTER_OVERLOAD_SECONDS = 1.0


class CallLimit:
    """Calls in flight on the gRPC binding, and how many may be at once (0: no limit). Past
    it a call is refused at once, RESOURCE_EXHAUSTED with a retry hint, instead of queueing
    until grpc gives up on it."""

    __slots__ = ("limit", "active")

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self.active = 0

    def take(self) -> None:
        """Hold a slot for a call, or raise the refusal (`give` returns the slot)."""
        if self.limit and self.active >= self.limit:
            raise self.refusal()
        self.active += 1

    def give(self) -> None:
        self.active -= 1

    def refusal(self) -> A2AError:
        return refuse(
            "grpc_max_concurrent_calls",
            self.limit,
            f"The server is handling its limit of {self.limit} concurrent calls; retry shortly.",
            retry_after=RETRY_AFTER_OVERLOAD_SECONDS,
        )
