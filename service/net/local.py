"""The settings of the two local transports: JSON-RPC over stdin/stdout (`stdio`) and over
a unix socket (`unix_socket`), docs/transports.md. Off unless configured.

`unix_socket_peer_principals` maps the peer's user id (SO_PEERCRED, Linux) to the
principal the server vouches for when a request sends no credential: entries
`UID=PRINCIPAL`, and `*` for every other user as `uid:<uid>`. Empty (the default): peers
are identified by the credentials they send, as on every binding.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.setting import at_least, check_section, rule, setting

ANY_PEER = "*"  # in unix_socket_peer_principals: every user not named is `uid:<uid>`
UID_PREFIX = "uid:"


def socket_mode(text: str) -> int | None:
    """`unix_socket_mode` as a number ("0600", "600", "0o600"), None if it is not one."""
    digits = text.strip().lower().removeprefix("0o")
    if not digits or len(digits) > 4 or any(c not in "01234567" for c in digits):
        return None
    mode = int(digits, 8)
    return mode if mode <= 0o777 else None


def _peer_entry_ok(entry: str) -> bool:
    if entry == ANY_PEER:
        return True
    uid, sep, name = entry.partition("=")
    return bool(sep) and uid.strip().isdigit() and bool(name.strip())


def peer_principals(entries: list[str]) -> tuple[dict[int, str], bool]:
    """The configured uid -> principal map, and whether any other uid is `uid:<uid>`."""
    named: dict[int, str] = {}
    for entry in entries:
        if entry != ANY_PEER:
            uid, _, name = entry.partition("=")
            named[int(uid)] = name.strip()
    return named, ANY_PEER in entries


@dataclass
class LocalTransportSettings:
    """Local transports: JSON-RPC over stdin/stdout and a unix socket ([Other transports](transports.md))."""

    stdio: bool = setting(
        False,
        "serve JSON-RPC on stdin/stdout (`serve --transport stdio`): one JSON request per "
        "line in, one answer frame per line out; logs, the ready line and anything else "
        "go to stderr; end of stdin drains and exits 0. The gRPC and HTTP listeners run "
        "as configured beside it (`-1` turns either off)",
    )
    stdio_max_in_flight: int = setting(
        64,
        "requests on stdin unanswered at once; past it a request is refused at once "
        "(retryable, `RetryInfo`)",
        check=at_least(1),
    )
    unix_socket: str = setting(
        "",
        "serve JSON-RPC on a unix socket at this path (one JSON request per line, "
        "concurrent requests per connection); a stale socket there is replaced, any other "
        "file stops startup; removed on exit",
    )
    unix_socket_mode: str = setting(
        "0600",
        "the socket file's permissions, octal (who may connect)",
        check=rule(
            lambda v: socket_mode(v) is not None,
            "expected octal permissions such as 0600 or 0660, got {value!r}",
        ),
    )
    unix_socket_peer_principals: list[str] = setting(
        [],
        "vouch for the peer's user id (SO_PEERCRED) when a request sends no credential: "
        "`UID=PRINCIPAL` entries, `*` for every other user as `uid:<uid>`; empty: only "
        "credentials identify callers",
        check=rule(
            lambda v: all(_peer_entry_ok(e) for e in v),
            "expected UID=PRINCIPAL entries or *, got {value!r}",
        ),
    )
    unix_socket_max_in_flight: int = setting(
        64,
        "requests one unix socket connection may have unanswered at once; past it a request "
        "is refused at once (retryable, `RetryInfo`)",
        check=at_least(1),
    )


def validate_local_transports(s: LocalTransportSettings) -> None:
    check_section(s, LocalTransportSettings)
    if s.unix_socket_peer_principals and not s.unix_socket:
        raise ValueError("unix_socket_peer_principals: set unix_socket too (the peers it names)")
