"""Per-caller limits: concurrent turns, open streams (and `HeldStream`, a stream holding
its slot), request rate, and stalled turns.

A principal is whoever authentication says the caller is (`CallContext.principal`,
the owner of its tasks); with authentication off every caller is the one principal
"". Excess work is refused at once with `RESOURCE_EXHAUSTED` (HTTP 429) and a retry
hint, never queued: `refuse` builds every such refusal, so they can be counted in
one place.

The checks are transport-free (the API's admission and the engine call them), so a
limit holds on gRPC, JSON-RPC and REST alike. Each is off by default (0) and costs
one comparison when off.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gen import a2a_pb2 as pb
from service.engine.stream import NumberedEvents
from service.protocol.errors import OverloadedError
from service.setting import at_least, between, check_section, setting
from service.telemetry import hub

RETRY_AFTER_SECONDS = 1.0  # the hint for limits on work in flight (a turn or stream ends soon)
_MAX_BUCKETS = 100_000  # principals with a partly used bucket kept at once (full ones are dropped)
NO_LIMIT_OR_MORE = at_least(0, "must be 0 (no limit) or a positive number")
# The default: most answers to a question come within minutes; a question unanswered for
# five is likely to wait much longer, and its live turn then costs memory for nothing.
PAUSED_TURN_IDLE_SECONDS = 300.0
FIRST_EVENT_GRACE_MS = 50.0  # the default: a quick agent still answers with a Message
# The default: a second late is far past any agent's or client's patience for one event,
# yet well above the few milliseconds a busy but healthy loop runs late.
STREAM_REFUSAL_LAG_MS = 1000.0
OFF_OR_UP_TO_30_DAYS = between(0, 30 * 86400, "must be between {low} (off) and {high}, got {value}")


@dataclass
class LimitSettings:
    """Per-caller limits and stalled-turn timeouts ([Operations: limits and retention](operations.md#limits-and-retention)). 0 = off."""

    max_concurrent_turns: int = setting(
        0,
        "agent turns at work at once, all callers together; past it a message is refused with `RESOURCE_EXHAUSTED` / `429` + `Retry-After`. A turn paused in `ctx.ask()` does not count. `0` = no limit (see [Operations: limits and retention](operations.md#limits-and-retention))",
        check=NO_LIMIT_OR_MORE,
    )
    max_concurrent_turns_per_principal: int = setting(
        0,
        "the same per principal (the authenticated caller; everyone is one principal with auth off)",
        check=NO_LIMIT_OR_MORE,
    )
    max_streams_per_principal: int = setting(
        0,
        "open `SendStreamingMessage` / `SubscribeToTask` streams per principal; `0` = no limit",
        check=NO_LIMIT_OR_MORE,
    )
    rate_limit_per_principal: float = setting(
        0.0,
        "requests per second per principal (token bucket, every A2A method on every binding, file downloads and the gateway's `/metrics`; health, the card and the JWKS are not counted); `0` = off",
        check=OFF_OR_UP_TO_30_DAYS,
    )
    rate_limit_burst: int = setting(
        0,
        "requests a principal may make at once after a quiet spell (the bucket size)",
        shown="one second's worth",
        check=NO_LIMIT_OR_MORE,
    )
    turn_inactivity_timeout_seconds: float = setting(
        0.0,
        "a turn whose agent emits nothing for this long is stopped and its task `FAILED` with a message naming the setting; a turn paused in `ctx.ask()` is not stalled; `0` = off",
        check=OFF_OR_UP_TO_30_DAYS,
    )
    max_turn_seconds: float = setting(
        0.0,
        "a turn still at work after this long is stopped the same way; `0` = off",
        check=OFF_OR_UP_TO_30_DAYS,
    )
    paused_turn_idle_seconds: float = setting(
        PAUSED_TURN_IDLE_SECONDS,
        "a turn waiting in `ctx.ask()` this long without an answer is parked: its coroutine is released (cancelled; the agent's `finally` blocks run), the question stays in the stored task (`INPUT_REQUIRED`), and the answer starts a new turn that receives it, as after a restart. A live paused turn holds its coroutine and everything it references; a parked one, nothing in the process. `0` = never park (see [Agents](agents.md#parked-turns))",
        check=OFF_OR_UP_TO_30_DAYS,
    )
    first_event_grace_ms: float = setting(
        FIRST_EVENT_GRACE_MS,
        "a streaming send (and a `returnImmediately` one) whose agent has said nothing this long gets its task (`SUBMITTED`) at once, so the caller has a task id to cancel, subscribe to or resume; an agent that answers with a direct Message sooner still can. `0` = the task at once, no direct Message on those sends (see [Agents](agents.md#the-first-event))",
        check=between(0, 60_000, "must be between {low} and {high} (milliseconds), got {value}"),
    )
    stream_refusal_lag_ms: float = setting(
        STREAM_REFUSAL_LAG_MS,
        "once the event loop runs this late (`a2a.event_loop.lag`: the longest delay of the last 5 s), new streams (`SendStreamingMessage`, `SubscribeToTask`, their v0.3 forms, on every binding) are refused with `RESOURCE_EXHAUSTED` / `429` + `Retry-After`, so a load balancer can send them elsewhere; open streams and unary calls go on. `0` = never refuse (see [Operations: event-loop lag](operations.md#event-loop-lag))",
        check=between(
            0, 3_600_000, "must be between {low} (never) and {high} (milliseconds), got {value}"
        ),
    )


def validate_limits(s: LimitSettings) -> None:
    """Startup checks (ValueError naming the key)."""
    check_section(s, LimitSettings)
    if s.rate_limit_burst and not s.rate_limit_per_principal:
        raise ValueError("rate_limit_burst: set rate_limit_per_principal too (requests per second)")


def refuse(
    setting: str, limit: float, message: str, retry_after: float = RETRY_AFTER_SECONDS
) -> OverloadedError:
    """The one refusal of every limit (count refusals here): RESOURCE_EXHAUSTED / 429 with
    ErrorInfo metadata `setting` (the limit's key) and `limit` (its value), and a
    RetryInfo / Retry-After hint. Counted in the `a2a.limits.refused` metric."""
    hub.count_refusal(setting)
    return OverloadedError(
        message, metadata={"setting": setting, "limit": f"{limit:g}"}, retry_after=retry_after
    )


class Slots:
    """Work in flight (turns, streams): at most `total` at once and `per_key` per principal
    (0 = no limit); `names` are the two settings, as the refusal names them. `take` raises
    the refusal; every successful take is paired with one `give`."""

    __slots__ = ("total", "per_key", "names", "what", "active", "by_key")

    def __init__(self, total: int, per_key: int, names: tuple[str, str], what: str) -> None:
        self.total = total
        self.per_key = per_key
        self.names = names
        self.what = what  # "turns", "streams": for the message
        self.active = 0
        self.by_key: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.total or self.per_key)

    def take(self, key: str) -> None:
        if self.total and self.active >= self.total:
            raise refuse(
                self.names[0],
                self.total,
                f"The server is running its limit of {self.total} {self.what} at once; "
                "retry shortly.",
            )
        held = self.by_key.get(key, 0)
        if self.per_key and held >= self.per_key:
            raise refuse(
                self.names[1],
                self.per_key,
                f"You have {held} {self.what} running, your limit; retry when one has ended.",
            )
        self.active += 1
        self.by_key[key] = held + 1

    def give(self, key: str) -> None:
        self.active -= 1
        held = self.by_key.get(key, 0) - 1
        if held > 0:
            self.by_key[key] = held
        else:
            self.by_key.pop(key, None)


class RateLimiter:
    """A token bucket per principal: `rate` requests per second, up to `burst` at once.

    A bucket is two floats in a dict; one refilled to full is dropped, so the dict holds
    only principals that were busy lately. `check` is a few float operations."""

    __slots__ = ("rate", "burst", "_buckets", "_clock")

    def __init__(
        self, rate: float, burst: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = float(burst or max(1, round(rate)))
        self._buckets: dict[str, tuple[float, float]] = {}  # principal -> (tokens, when)
        self._clock = clock

    def check(self, principal: str) -> None:
        """Take one token, or raise the refusal with the wait until one is there."""
        now = self._clock()
        bucket = self._buckets.get(principal)
        if bucket is None:
            tokens = self.burst
        else:
            tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
        if tokens < 1.0:
            self._buckets[principal] = (tokens, now)
            wait = (1.0 - tokens) / self.rate
            raise refuse(
                "rate_limit_per_principal",
                self.rate,
                f"Too many requests: the limit is {self.rate:g} per second "
                f"(bursts of {self.burst:g}); retry after the hint.",
                retry_after=wait,
            )
        self._buckets[principal] = (tokens - 1.0, now)
        if len(self._buckets) > _MAX_BUCKETS:
            self._drop_full(now)

    def _drop_full(self, now: float) -> None:
        """Forget the buckets that have refilled (they are as good as new ones)."""
        full = [
            key
            for key, (tokens, when) in self._buckets.items()
            if tokens + (now - when) * self.rate >= self.burst
        ]
        for key in full:
            del self._buckets[key]
        if len(self._buckets) > _MAX_BUCKETS:  # all busy: the oldest go (a fresh bucket is full)
            for key in list(self._buckets)[: len(self._buckets) - _MAX_BUCKETS]:
                del self._buckets[key]


class HeldStream:
    """A stream that holds a slot of a limit (`max_streams_per_principal`) while it is open:
    the slot is given back exactly once, when the stream ends, fails, is closed, or is
    dropped without being iterated."""

    __slots__ = ("_events", "_release", "__weakref__")

    def __init__(
        self, events: NumberedEvents[pb.StreamResponse], release: Callable[[], None]
    ) -> None:
        self._events = events
        self._release: Callable[[], None] | None = release

    @property
    def seq(self) -> int | None:
        return self._events.seq

    def __aiter__(self) -> HeldStream:
        return self

    async def __anext__(self) -> pb.StreamResponse:
        try:
            return await self._events.__anext__()
        except BaseException:
            self._give_back()
            raise

    async def aclose(self) -> None:
        self._give_back()
        await self._events.aclose()

    def _give_back(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __del__(self) -> None:
        self._give_back()
