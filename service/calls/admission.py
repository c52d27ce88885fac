"""The built-in interceptors: what lets a call reach the A2AApi, in this order.

1. `DrainGate`: a draining server takes no new calls (UNAVAILABLE with a retry hint).
2. `RateLimit`: the caller's requests per second (`rate_limit_per_principal`).
3. `VersionCheck`: the A2A version the caller speaks (an A2A RPC only: a file download
   needs none), and the extensions this agent requires.

A file download (`DownloadFile`, not an RPC) passes the first two only.
"""

from __future__ import annotations

from google.protobuf.message import Message

from service.calls.record import Call
from service.engine.limits import RateLimiter
from service.protocol.admission import Gate
from service.protocol.errors import ExtensionSupportRequiredError, VersionNotSupportedError
from service.protocol.params import SUPPORTED_VERSIONS, CallContext, is_supported_version

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


class RateLimit:
    __slots__ = ("limiter",)

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter

    async def before(self, call: Call, context: CallContext, request: Message | None) -> None:
        self.limiter.check(context.principal)

    def after(self, call: Call) -> None:
        return None


class VersionCheck:
    """The A2A version (any 1.x) and the extensions the agent requires."""

    __slots__ = ("required_extensions",)

    def __init__(self, required_extensions: tuple[str, ...] = ()) -> None:
        self.required_extensions = required_extensions

    async def before(self, call: Call, context: CallContext, request: Message | None) -> None:
        if call.method == DOWNLOAD:
            return
        version = context.version
        if (
            version != "1.0"
            and not is_supported_version(version)
            and not (version == "0.3" and call.binding.endswith("-v0.3"))  # a v0.3 codec's call
        ):
            supported = ", ".join(SUPPORTED_VERSIONS)
            raise VersionNotSupportedError(
                f"A2A version {version!r} is not supported; supported: {supported}. "
                "Send the header 'A2A-Version: 1.0' (gRPC metadata 'a2a-version').",
                metadata={"requested": version, "supported": ",".join(SUPPORTED_VERSIONS)},
            )
        if self.required_extensions:
            extensions = context.extensions
            missing = [u for u in self.required_extensions if u not in extensions]
            if missing:
                raise ExtensionSupportRequiredError(
                    f"This agent requires the extension(s) {', '.join(missing)}; list them in "
                    "the A2A-Extensions header (gRPC metadata 'a2a-extensions')."
                )

    def after(self, call: Call) -> None:
        return None


def admission(
    gate: Gate | None,
    rate_limit: RateLimiter | None = None,
    required_extensions: tuple[str, ...] = (),
    *,
    check_version: bool = True,
) -> list[DrainGate | RateLimit | VersionCheck]:
    """The built-in interceptors, in order, for what is configured (`check_version` False:
    a proxy, whose upstream checks the version and extensions)."""
    steps: list[DrainGate | RateLimit | VersionCheck] = []
    if gate is not None:
        steps.append(DrainGate(gate))
    if rate_limit is not None:
        steps.append(RateLimit(rate_limit))
    if check_version:
        steps.append(VersionCheck(required_extensions))
    return steps
