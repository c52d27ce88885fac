"""The settings of JSON-RPC over Redis Streams (`redis_streams_url`, docs/transports.md): off
unless a URL is set. The URL may carry a password (`redis://:PASSWORD@HOST:PORT/DB`); it is
never shown: messages, logs and the agent card get `public_url`, without credentials.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

from service.setting import SECONDS, at_least, between, check_section, rule, setting
from service.store import redact_url

SCHEMES = ("redis://", "rediss://", "unix://")


def public_url(url: str) -> str:
    """The URL without user name, password or query (which may hold `password=`); a `db`
    query parameter of a `unix://` URL is kept, it says which database."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    query = ""
    if parts.scheme == "unix":
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k == "db"])
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def url_secrets(url: str) -> list[str]:
    """The password a URL carries (user info or a `password=` parameter), for the log
    redactor."""
    if not url:
        return []
    parts = urlsplit(url)
    found = [v for k, v in parse_qsl(parts.query) if k == "password" and v]
    with_password = [parts.password] if parts.password else []
    return with_password + found


def _url(url: str) -> str | None:
    if not url:
        return None
    if not url.startswith(SCHEMES):
        return f"expected redis://HOST:PORT/DB (or rediss://, unix://), got {redact_url(url)!r}"
    try:
        urlsplit(url).port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return f"the port is not a number in {redact_url(url)!r}"
    return None


def _name(value: str) -> bool:
    return bool(value) and len(value) <= 200 and not any(c.isspace() for c in value)


NAME = "must be a non-empty Redis key name without spaces (at most 200 characters)"


@dataclass
class RedisStreamsSettings:
    """JSON-RPC over Redis Streams: replicas sharing one request stream ([Other transports](transports.md))."""

    redis_streams_url: str = setting(
        "",
        "serve JSON-RPC from a Redis stream: `redis://[:PASSWORD@]HOST:PORT/DB` (also "
        "`rediss://`, `unix://`); every replica with the same stream and group shares "
        "the requests; the card shows the URL without credentials",
        shown="(off)",
        check=_url,
    )
    redis_streams_request_stream: str = setting(
        "a2a:requests",
        "the stream requesters XADD their requests to (`correlation_id`, `reply_stream`, "
        "`payload`)",
        check=rule(_name, NAME),
    )
    redis_streams_group: str = setting(
        "a2a",
        "the consumer group the replicas read the request stream with (each replica one "
        "consumer of its own)",
        check=rule(_name, NAME),
    )
    redis_streams_max_in_flight: int = setting(
        64,
        "requests one replica answers at once; while that many are unanswered it reads no "
        "more (the others stay in the stream for any replica)",
        check=at_least(1),
    )
    redis_streams_reclaim_seconds: float = setting(
        30.0,
        "a request read by a replica that stopped answering (it died) for this long is "
        "taken over by another replica (XAUTOCLAIM) and answered once; a live replica "
        "keeps its own requests fresh",
        check=between(0.5, 86400, SECONDS),
    )
    redis_streams_reply_maxlen: int = setting(
        10000,
        "entries a reply stream keeps at most (XADD MAXLEN ~): the oldest go first if a "
        "requester reads too slowly (it resumes with Last-Event-ID)",
        check=at_least(10),
    )
    redis_streams_reply_ttl_seconds: int = setting(
        600,
        "a reply stream expires this long after its last entry (EXPIRE), so one whose "
        "requester went away does not stay",
        check=between(1, 30 * 86400, SECONDS),
    )


def validate_redis_streams(s: RedisStreamsSettings) -> None:
    check_section(s, RedisStreamsSettings)
