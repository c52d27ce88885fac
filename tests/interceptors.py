"""Call interceptors that tests name in `call_interceptors` (loaded by import path, in the
server's process: the lists below are what the tests read)."""

from __future__ import annotations

from service.protocol.errors import UnsupportedOperationError

BEFORE: list[tuple[str, str]] = []  # (binding, method) of every call that reached `before`
AFTER: list[tuple[str, str, str]] = []  # (binding, method, outcome) of every call let through


class Audit:
    """Sees every call the built-in checks let through; refuses CancelTask."""

    async def before(self, call, context, request) -> None:
        BEFORE.append((call.binding, call.method))
        if call.method == "CancelTask":
            raise UnsupportedOperationError("Tasks are not cancelled here.")

    def after(self, call) -> None:
        AFTER.append((call.binding, call.method, call.outcome))


def make_audit() -> Audit:
    """A factory, as `call_interceptors` accepts one."""
    return Audit()


class NotOne:
    """Has no `before`: not an interceptor."""

    def after(self, call) -> None:
        return None
