"""Service parameters: what a call carries besides its request message, in one place —
the metadata keys (the version key spelled once), the versions this service speaks, and
the transport-neutral `CallContext` every binding builds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SUPPORTED_VERSIONS = ("1.0",)  # any 1.x is accepted: minor versions are compatible
VERSION_KEY = "a2a-version"
# Credentials: checked by the bindings, never passed on to the API or the agent.
CREDENTIAL_KEYS = frozenset({"authorization", "proxy-authorization", "x-api-key", "cookie"})
EXTENSIONS_KEY = "a2a-extensions"


def is_supported_version(version: str) -> bool:
    major, _, rest = version.partition(".")
    return major == "1" and (not rest or all(p.isdigit() for p in rest.split(".")))


@dataclass
class CallContext:
    """What a transport knows about one call, in transport-neutral form."""

    metadata: Mapping[str, str] = field(default_factory=dict)  # lower-case keys
    principal: str = ""  # authenticated caller ('' = anonymous)
    # Version assumed when the caller sends none: 1.0 on gRPC (the package names
    # it), 0.3 on HTTP bindings (as the spec says for a missing header).
    default_version: str = "1.0"
    resume_after: int | None = None  # stream resume point (HTTP Last-Event-ID)

    @property
    def version(self) -> str:
        value = self.metadata.get(VERSION_KEY)
        return value.strip() if value is not None and value.strip() else self.default_version

    @property
    def extensions(self) -> tuple[str, ...]:
        raw = self.metadata.get(EXTENSIONS_KEY, "")
        return tuple(u for u in (part.strip() for part in raw.split(",")) if u)
