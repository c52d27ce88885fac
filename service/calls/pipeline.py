"""The pipeline every call runs, whatever its binding.

    open the record ─► authenticate ─► (the binding decodes the request) ─► interceptors
        ─► the A2AApi method ─► (the binding encodes the answer) ─► close the record

A binding (a codec) calls, in this order: `open` when a request arrives, `authenticate`
with the credentials it carries, `admit` once the request message and its `CallContext`
are built, then the `A2AApi` method, and `close` when the answer is out. Any step may
refuse by raising an A2AError; the binding hands it to `failed`, which notes it on the
record once (so the refusal is logged, traced and counted once, by the record's close),
and encodes it as its error.

Interceptors (`Interceptor`) run in order; `after` runs, in reverse order, for each one
whose `before` let the call through, when the record closes. The built-in ones
(admission.py) are the drain gate, the event-loop lag's refusal of new streams, the
caller's rate limit, and the version and required-extension checks; the composition root adds configured ones after them.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Protocol

from google.protobuf.message import Message

from service.auth import Authenticator
from service.calls.access import AccessLog
from service.calls.record import REQUEST_SPAN, Call
from service.protocol.errors import A2AError, UnauthenticatedError, as_a2a_error
from service.protocol.params import CallContext
from service.telemetry import hub


class Interceptor(Protocol):
    """One step of every call, after authentication and decoding."""

    async def before(self, call: Call, context: CallContext, request: Message | None) -> None:
        """Let the call through, or raise an A2AError to refuse it (`request`: None on a
        route that carries no message, a file download)."""

    def after(self, call: Call) -> None:
        """The call is over (its outcome on `call`); only if `before` let it through."""


class CallerUnknown(UnauthenticatedError):
    """Authentication refused the caller (an HTTP binding answers it with its 401
    challenge, not with an A2A error document)."""


class Pipeline:
    """The steps of every call on every binding; built once by the composition root."""

    def __init__(
        self,
        *,
        authenticator: Authenticator | None = None,
        interceptors: Sequence[Interceptor] = (),
        access: AccessLog | None = None,
        telemetry: hub.Telemetry | None = None,
        forward_credentials: bool = False,
    ) -> None:
        self.authenticator = authenticator  # None: every caller is anonymous
        self.interceptors = tuple(interceptors)
        self.access = access  # None: no access lines
        self.telemetry = telemetry  # None: no spans, no call metrics
        self.forward_credentials = forward_credentials  # proxy mode: the upstream checks again
        self.credential_keys = frozenset(authenticator.credential_keys if authenticator else ())

    # ---- the record ---------------------------------------------------------------------

    def open(
        self,
        binding: str,
        method: str = "",
        *,
        span_binding: str = "",
        carrier: Mapping[str, str] | None = None,
        service: str = "",
    ) -> Call:
        """The record of a new call, current from here on. `span_binding` and `service`: the
        call opens its own span (gRPC), continuing the trace in `carrier`; otherwise it
        adopts the HTTP request's span, if any."""
        access = self.access.sink() if self.access is not None else None
        tel = self.telemetry
        if service and tel is not None:
            call = Call(
                binding,
                method,
                access,
                tel.server_call(method, span_binding, carrier, service=service),
                service,
            )
        else:
            call = Call(binding, method, access, REQUEST_SPAN.get())
        call.enter()
        return call

    def close(self, call: Call) -> None:
        """The answer is out: the interceptors' `after` (reverse order), then the record."""
        passed, call.passed = call.passed, 0
        interceptors = self.interceptors
        for i in range(passed - 1, -1, -1):
            interceptors[i].after(call)
        call.close()

    def failed(self, call: Call, exc: BaseException, where: str) -> A2AError:
        """`exc` as the A2AError the binding answers (an unexpected one is logged with a
        ref, see `as_a2a_error`), noted on the record."""
        err = as_a2a_error(exc, where)
        call.failed(err)
        return err

    # ---- the steps ----------------------------------------------------------------------

    async def authenticate(self, call: Call | None, metadata: MutableMapping[str, str]) -> str:
        """The caller's principal ('' when authentication is off), or CallerUnknown. The
        credentials are removed from `metadata` (unless forwarded to an upstream): past
        this point nobody needs or should see them."""
        authenticator = self.authenticator
        if authenticator is None:
            return ""
        try:
            principal = await authenticator.principal(metadata)
        except UnauthenticatedError as exc:
            raise CallerUnknown(exc.message) from None
        if not self.forward_credentials:
            for key in self.credential_keys:
                metadata.pop(key, None)
        if call is not None:
            call.identified(principal)
        return principal

    async def admit(
        self, call: Call, context: CallContext, request: Message | None, *, stream: bool = False
    ) -> None:
        """Run the interceptors in order; the first refusal (an A2AError) ends the call.
        `request`: None for a route that carries no message (a file download); `stream`: the
        method's descriptor says it answers with a stream (`call.stream` for the interceptors)."""
        call.stream = stream
        if request is not None:
            call.saw(request)
        for interceptor in self.interceptors:
            await interceptor.before(call, context, request)
            call.passed += 1
