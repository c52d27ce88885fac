"""Back-pressure after a refusal on the HTTP listener (docs/operations.md, "Limits and retention").

A `429` with `Retry-After` (a per-caller limit: rate, turns, streams) goes out at once,
but the connection that got it is not read again until the hint has passed (at most
`BASE_PAUSE_SECONDS` of it), times a random factor between 1 and 2. Answering a refusal costs the event loop about as much as
the cheap request it refuses (parsing, routing, authentication, the error body), so a
flood that ignores the hint would keep the loop busy whatever the answer; paused, it gets
at most one request per connection per pause, and the rest waits in the kernel's socket
buffer, costing nothing. The random factor spreads a herd of polite clients that all got
the same hint, instead of letting them come back together.

A connection refused again within `STREAK_SECONDS` of its last refusal is paused twice
as long as the last time (before the random factor, at most `MAX_PAUSE_SECONDS`), whatever
it was answered in between: a flood that keeps its connections busy ends up with about one
refused request per connection per 20 seconds beyond what its limit grants, while a caller
refused now and then keeps pauses of a second or two. The pause is back-pressure, not the
limit: the limiter still decides every request. Other connections, and so other callers,
are served as before; requests of other principals sharing the paused connection wait
with it.

The protocol (gateway.limits.connections.GuardedProtocol) puts one `ConnectionBackoff` per
connection into each request's ASGI scope under `EXTENSION`; `pause_after_refusals`
marks it when the application answers `429`, and the protocol asks for the pause when
the response is complete.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

EXTENSION = "a2a.connection_backoff"  # key in scope["extensions"]
JITTER = (1.0, 2.0)  # the pause is Retry-After times a factor drawn from this range
BASE_PAUSE_SECONDS = 1.0  # the first pause: the hint, but not more than this
MAX_PAUSE_SECONDS = 15.0  # however often a connection is refused (then times the factor)
STREAK_SECONDS = 30.0  # a refusal this long after the last one starts over
_RETRY_AFTER = b"retry-after"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


# One generator for every connection: a Random holds 2.5 KiB of Mersenne Twister state, which
# one per open connection (an SSE stream is one) would cost for a factor drawn per refusal.
_RANDOM = random.Random()


class ConnectionBackoff:
    """One connection's refusals: how long to stop reading it after the current response."""

    __slots__ = ("_hint", "_streak", "_last", "_random", "_clock")

    def __init__(
        self, rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._hint = 0.0  # Retry-After of the response being sent, 0 if it is no refusal
        self._streak = 0  # refusals on this connection, each within STREAK_SECONDS of the last
        self._last = 0.0  # when the last of them was sent
        self._random = rng or _RANDOM
        self._clock = clock

    def refused(self, retry_after: float) -> None:
        """The response being sent is a refusal with this hint (seconds)."""
        self._hint = max(retry_after, 0.0)

    def pause(self) -> float:
        """Seconds not to read the connection now that the response is complete (0: none)."""
        hint, self._hint = self._hint, 0.0
        if not hint:
            return 0.0
        now = self._clock()
        self._streak = self._streak + 1 if now - self._last < STREAK_SECONDS else 1
        self._last = now
        grown = min(hint, BASE_PAUSE_SECONDS) * 2.0 ** min(self._streak - 1, 16)
        return min(grown, MAX_PAUSE_SECONDS) * self._random.uniform(*JITTER)


def retry_after(headers: list[tuple[bytes, bytes]]) -> float:
    """The Retry-After of a response's ASGI headers in seconds (0 when absent or a date)."""
    for name, value in headers:
        if name.lower() == _RETRY_AFTER:
            try:
                return max(float(value), 0.0)
            except ValueError:
                return 0.0
    return 0.0


def pause_after_refusals(app: App) -> App:
    """ASGI wrapper: a `429` with Retry-After marks its connection's `ConnectionBackoff`."""

    async def marked(scope: Scope, receive: Receive, send: Send) -> None:
        backoff = scope.get("extensions", {}).get(EXTENSION) if scope["type"] == "http" else None
        if backoff is None:
            await app(scope, receive, send)
            return

        async def send_marked(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 429:
                hint = retry_after(list(message.get("headers", ())))
                if hint:
                    backoff.refused(hint)
            await send(message)

        await app(scope, receive, send_marked)

    return marked
