"""Media type syntax (RFC 6838 names), for incoming parts and outgoing files alike."""

from __future__ import annotations

import re

_TOKEN = r"[A-Za-z0-9!#$&^_.+-]{1,127}"
_MEDIA_TYPE = re.compile(rf"({_TOKEN})/({_TOKEN})(\s*;.*)?", re.DOTALL)


def essence(raw: str) -> str | None:
    """`type/subtype` in lower case (parameters dropped), or None when `raw` is not one."""
    m = _MEDIA_TYPE.fullmatch(raw.strip()) if len(raw) <= 255 else None
    return f"{m.group(1)}/{m.group(2)}".lower() if m is not None else None
