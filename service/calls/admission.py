"""The built-in interceptors: what lets a call reach the A2AApi, in this order.

1. `DrainGate`: a draining server takes no new calls (UNAVAILABLE with a retry hint).
2. `LagGate`: while the event loop runs late (`stream_refusal_lag_ms`), no new streams
   (RESOURCE_EXHAUSTED with a retry hint); unary calls and open streams go on.
3. `RateLimit`: the caller's requests per second (`rate_limit_per_principal`).
4. `VersionCheck`: the A2A version the caller speaks (an A2A RPC only: a file download
   needs none): 1.x on the 1.0 bindings, 0.3 (or none) on a v0.3 codec's call (its
   binding ends in `-v0.3`, served while `compat_v03` is on); and the extensions this
   agent requires.

A file download (`DownloadFile`, not an RPC) passes the drain gate and the rate limit only.
"""

from __future__ import annotations

from google.protobuf.message import Message

from service.calls.record import Call
from service.engine.limits import RateLimiter, refuse
from service.ops.looplag import LoopLag
from service.protocol.admission import Gate
from service.protocol.errors import ExtensionSupportRequiredError, VersionNotSupportedError
from service.protocol.params import (
    V03_BINDING_SUFFIX,
    V03_VERSION,
    CallContext,
    is_supported_version,
    is_v03_version,
    supported_versions,
)

DOWNLOAD = "DownloadFile"  # the gateway's file route: admitted like a call, but no RPC


class DrainGate:
    __slots__ = ("gate",)

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def before(self, call: Call, context: CallContext, request: Message | None) -> None:
        if self.gate.closed:
            self.gate.check()

    def after(self, call: Call) -> None:
        return None


class LagGate:
    """New streams are refused while the loop runs `limit_ms` late or more: each one would
    add events to a loop that already delivers them late, and a replica that keeps up
    serves it better. What is already open, and unary calls, are served (late)."""

    __slots__ = ("meter", "limit_ms")

    def __init__(self, meter: LoopLag, limit_ms: float) -> None:
        self.meter = meter
        self.limit_ms = limit_ms

    async def before(self, call: Call, context: CallContext, request: Message | None) -> None:
        if not call.stream:
            return
        lag = self.meter.lag_ms()
        if lag > self.limit_ms:
            raise refuse(
                "stream_refusal_lag_ms",
                self.limit_ms,
                f"The server is overloaded: its event loop runs {lag:.0f} ms late (the limit "
                f"for new streams is {self.limit_ms:g} ms); retry after the hint, or on "
                "another replica.",
                retry_after=self.meter.retry_after(),
            )

    def after(self, call: Call) -> None:
        return None


class RateLimit:
    __slots__ = ("limiter",)

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter

    async def before(self, call: Call, context: CallContext, request: Message | None) -> None:
        self.limiter.check(context.principal)

    def after(self, call: Call) -> None:
        return None


class VersionCheck:
    """The A2A version (any 1.x; 0.3 on a v0.3 codec's call when `compat_v03`) and the
    extensions the agent requires.

    A caller who sends no version speaks 0.3 (A2A spec §3.6): served by a v0.3 codec
    (its call's binding ends in `-v0.3`), refused on a 1.0 method with a message that says
    0.3 was assumed and which header to send."""

    __slots__ = ("required_extensions", "compat_v03")

    def __init__(self, required_extensions: tuple[str, ...] = (), compat_v03: bool = True) -> None:
        self.required_extensions = required_extensions
        self.compat_v03 = compat_v03

    async def before(self, call: Call, context: CallContext, request: Message | None) -> None:
        if call.method == DOWNLOAD:
            return
        self.check_version(call.binding, call.method, context)
        if self.required_extensions:
            extensions = context.extensions
            missing = [u for u in self.required_extensions if u not in extensions]
            if missing:
                raise ExtensionSupportRequiredError(
                    f"This agent requires the extension(s) {', '.join(missing)}; list them in "
                    "the A2A-Extensions header (gRPC metadata 'a2a-extensions')."
                )

    def check_version(self, binding: str, method: str, context: CallContext) -> None:
        """Raise VersionNotSupportedError unless the call's binding serves its version (also
        called by a codec before it decodes a body, so the version is checked first)."""
        sent = context.sent_version
        if binding.endswith(V03_BINDING_SUFFIX):
            if self.compat_v03 and (not sent or is_v03_version(sent)):
                return
            raise self._refusal(
                sent or V03_VERSION,
                f"{method or 'This'} is an A2A 0.3 method"
                + (
                    f", but A2A-Version {sent!r} was sent; send 'A2A-Version: 0.3' or none, "
                    "or call the 1.0 method"
                    if self.compat_v03
                    else "; this server has turned A2A 0.3 off (compat_v03 = false): "
                    "call the 1.0 method with the header 'A2A-Version: 1.0'"
                ),
            )
        version = context.version
        if version == "1.0" or is_supported_version(version):
            return
        where = f"{method} is an A2A 1.0 method" if method else "this server speaks A2A 1.0"
        if not sent:
            reason = (
                f"No A2A-Version was sent, so A2A {version} was assumed (A2A spec §3.6); "
                f"{where}: send the header 'A2A-Version: 1.0' (or the query parameter "
                "A2A-Version=1.0; gRPC metadata 'a2a-version')"
            )
        else:
            reason = (
                f"A2A version {version!r} is not supported by {method or 'this call'}; send "
                "the header 'A2A-Version: 1.0' (gRPC metadata 'a2a-version')"
            )
        if is_v03_version(version):
            reason += (
                ", or use the A2A 0.3 methods (JSON-RPC message/send, ..., REST /v1/..., "
                "gRPC a2a.v1.A2AService)"
                if self.compat_v03
                else "; A2A 0.3 is turned off on this server (compat_v03 = false)"
            )
        raise self._refusal(version, reason)

    def _refusal(self, requested: str, reason: str) -> VersionNotSupportedError:
        supported = supported_versions(self.compat_v03)
        return VersionNotSupportedError(
            f"{reason}. Supported versions: {', '.join(supported)}.",
            metadata={"requested": requested, "supported": ",".join(supported)},
        )

    def after(self, call: Call) -> None:
        return None


def admission(
    gate: Gate | None,
    rate_limit: RateLimiter | None = None,
    required_extensions: tuple[str, ...] = (),
    *,
    check_version: bool = True,
    compat_v03: bool = True,
    loop_lag: LoopLag | None = None,
    stream_refusal_lag_ms: float = 0.0,
) -> list[DrainGate | LagGate | RateLimit | VersionCheck]:
    """The built-in interceptors, in order, for what is configured (`check_version` False:
    a proxy, whose upstream checks the version and extensions; `compat_v03`: the v0.3
    codecs' calls are served; `loop_lag` and `stream_refusal_lag_ms` > 0: new streams are
    refused while the loop lags)."""
    steps: list[DrainGate | LagGate | RateLimit | VersionCheck] = []
    if gate is not None:
        steps.append(DrainGate(gate))
    if loop_lag is not None and stream_refusal_lag_ms > 0:
        steps.append(LagGate(loop_lag, stream_refusal_lag_ms))
    if rate_limit is not None:
        steps.append(RateLimit(rate_limit))
    if check_version:
        steps.append(VersionCheck(required_extensions, compat_v03))
    return steps
