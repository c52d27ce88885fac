"""The one way a settings section declares a key: `setting()` and the checks it may carry.

A section (push, auth, limits, ...) is a dataclass; each of its keys is a `setting()`:
its default, the help text the configuration reference prints, and, when one value can be
wrong on its own, a check. `check_section` runs a section's checks, so each section's
`validate_*` keeps only what spans several keys. A check returns what is wrong with a
value (the message after `KEY: `) or None; the messages are part of the interface (tests
and operators read them), so each factory takes its wording.

This module is the bottom layer: it imports nothing of the service.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

T = TypeVar("T")
Check = Callable[[Any], str | None]

AT_LEAST = "must be at least {low} (got {value})"
GREATER_THAN_0 = "must be greater than 0 (got {value})"
BETWEEN = "must be between {low} and {high}, got {value}"
SECONDS = "must be between {low} and {high} (seconds), got {value}"


def setting(
    default: T,
    help: str,
    /,
    *,
    shown: str | None = None,
    secret: bool = False,
    check: Check | None = None,
) -> T:
    """A settings field. `shown`: the default as the reference prints it, where the value
    needs words; `secret`: kept out of the settings' repr; a list default is copied for
    each instance."""
    metadata: dict[str, Any] = {"help": help}
    if shown is not None:
        metadata["default"] = shown
    if check is not None:
        metadata["check"] = check
    if isinstance(default, list):
        items = list(default)
        made = dataclasses.field(
            default_factory=lambda: list(items), repr=not secret, metadata=metadata
        )
        return cast(T, made)
    return dataclasses.field(default=default, repr=not secret, metadata=metadata)


def rule(ok: Callable[[Any], bool], says: str) -> Check:
    """A check from a test of the value and the message when it fails (`{value}` in
    `says` is replaced by the value)."""

    def check(value: Any) -> str | None:
        return None if ok(value) else says.format(value=value)

    return check


def at_least(low: float, says: str = AT_LEAST) -> Check:
    return rule(lambda value: value >= low, says.replace("{low}", f"{low}"))


def greater_than_0(says: str = GREATER_THAN_0) -> Check:
    return rule(lambda value: value > 0, says)


def between(low: float, high: float, says: str = BETWEEN) -> Check:
    """Inclusive at both ends."""
    text = says.replace("{low}", f"{low}").replace("{high}", f"{high}")
    return rule(lambda value: low <= value <= high, text)


def port(hint: str, low: int = 0) -> Check:
    """A TCP port from `low` (0 picks a free port, -1 where that turns the listener off)."""
    return between(low, 65535, "{value} is not a port number (" + hint + ")")


def one_of(choices: Iterable[str], listed: str = "") -> Check:
    """One of `choices`; `listed` is how the message names them (default: `one of a, b`)."""
    allowed = tuple(choices)
    named = listed or "one of " + ", ".join(allowed)
    return rule(lambda value: value in allowed, "expected " + named + ", got {value!r}")


def own_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields `cls` declares itself, not those of the sections it is composed of."""
    own = inspect.get_annotations(cls)
    return [f for f in dataclasses.fields(cls) if f.name in own]


def check_section(section: object, cls: type) -> None:
    """Run the checks of the keys `cls` declares on `section` (an instance of it, or of a
    composition of sections); ValueError `KEY: problem` for the first that fails."""
    for f in own_fields(cls):
        check: Check | None = f.metadata.get("check")
        if check is not None:
            problem = check(getattr(section, f.name))
            if problem is not None:
                raise ValueError(f"{f.name}: {problem}")
