"""The settings of the WebSocket transport: JSON-RPC over WebSocket on the HTTP listener
(`websocket_path`, docs/transports.md). Off unless a path is configured.

A message's size limit is `max_request_bytes`, as for every other binding: a message over
it is refused as its frame header arrives (never held whole) and the socket is closed
with 1009, since the rest of that message cannot be skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.setting import at_least, check_section, rule, setting


def _path_ok(path: str) -> bool:
    return path == "" or (
        path.startswith("/") and "?" not in path and "#" not in path and " " not in path
    )


@dataclass
class WebSocketSettings:
    """The WebSocket transport: JSON-RPC on the HTTP listener ([Other transports](transports.md))."""

    websocket_path: str = setting(
        "",
        "serve JSON-RPC over WebSocket at this path of the HTTP listener (e.g. `/a2a/ws`): "
        "one JSON request per text frame, concurrent requests per socket; empty: off. "
        "A message may hold at most `max_request_bytes`",
        check=rule(_path_ok, "expected a path such as /a2a/ws (or empty: off), got {value!r}"),
    )
    websocket_ping_seconds: float = setting(
        20.0,
        "seconds between the server's pings on an open socket (keep-alive through proxies "
        "and NATs); `0`: no pings",
        check=at_least(0),
    )
    websocket_ping_timeout_seconds: float = setting(
        20.0,
        "a socket whose peer does not answer a ping within this many seconds is closed "
        "(1011); `0`: wait forever",
        check=at_least(0),
    )
    websocket_max_in_flight: int = setting(
        64,
        "requests one socket may have unanswered at once; past it a request is refused at "
        "once (retryable, `RetryInfo`)",
        check=at_least(1),
    )


def validate_websocket(s: WebSocketSettings) -> None:
    check_section(s, WebSocketSettings)
    http_port = getattr(s, "http_port", 0)
    if s.websocket_path and http_port < 0:
        raise ValueError(
            "websocket_path: the WebSocket transport runs on the HTTP listener, which "
            "http_port -1 turns off"
        )
