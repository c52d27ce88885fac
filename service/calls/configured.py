"""Interceptors named by configuration (`call_interceptors`): a team's own step on every
call, on every binding, after the built-in ones (so a call the server itself refuses never
reaches it).

Each entry is an import path `package.module:attr` naming an object with
`async def before(self, call, context, request)` and `def after(self, call)` (see
`Interceptor`), or a class or factory that makes one when called with no arguments.
`before` refuses a call by raising an error of `service.protocol.errors` (any other
exception is answered as an internal error with a reference, and logged).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from service.agent import import_object
from service.calls.pipeline import Interceptor


def load_interceptors(specs: Sequence[str]) -> list[Interceptor]:
    """The configured interceptors, in order (a ValueError names the first that is not one)."""
    return [_load(spec) for spec in specs]


def _load(spec: str) -> Interceptor:
    target = import_object(spec, "call interceptor")
    made = target
    if not _is_interceptor(target) and callable(target):
        try:
            made = target()
        except Exception as exc:
            raise ValueError(
                f"call interceptor {spec!r}: making it failed ({type(exc).__name__}: {exc})"
            ) from None
    if not _is_interceptor(made):
        raise ValueError(
            f"call interceptor {spec!r}: expected an object with 'async def before(self, call, "
            "context, request)' and 'def after(self, call)', or a class or factory making one"
        )
    interceptor: Interceptor = made
    return interceptor


def _is_interceptor(obj: object) -> bool:
    before = getattr(obj, "before", None)
    after = getattr(obj, "after", None)
    return (
        not isinstance(obj, type)
        and inspect.iscoroutinefunction(before)
        and callable(after)
        and not inspect.iscoroutinefunction(after)
    )
