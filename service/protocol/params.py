"""Service parameters: what a call carries besides its request message, in one place —
the metadata keys (the version key spelled once), the versions this service speaks, and
the transport-neutral `CallContext` every binding builds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SUPPORTED_VERSIONS = ("1.0",)  # any 1.x is accepted: minor versions are compatible
V03_VERSION = "0.3"  # served by the v0.3 layer (compat_v03), on its own methods and routes
V03_BINDING_SUFFIX = "-v0.3"  # a v0.3 codec's call record: jsonrpc-v0.3, rest-v0.3, grpc-v0.3
VERSION_KEY = "a2a-version"
# Credentials: checked by the bindings, never passed on to the API or the agent.
CREDENTIAL_KEYS = frozenset({"authorization", "proxy-authorization", "x-api-key", "cookie"})
EXTENSIONS_KEY = "a2a-extensions"
LEGACY_EXTENSIONS_KEY = "x-a2a-extensions"  # v0.3's name of it, honoured on v0.3 calls


def is_supported_version(version: str) -> bool:
    major, _, rest = version.partition(".")
    return major == "1" and (not rest or all(p.isdigit() for p in rest.split(".")))


def is_v03_version(version: str) -> bool:
    """0.3 or a 0.3 patch version (0.3.0): what the v0.3 layer serves."""
    major, _, rest = version.partition(".")
    minor, _, patch = rest.partition(".")
    return major == "0" and minor == "3" and (not patch or patch.isdigit())


def supported_versions(compat_v03: bool) -> tuple[str, ...]:
    """The versions this server speaks, as listed in errors and the card."""
    return (*SUPPORTED_VERSIONS, V03_VERSION) if compat_v03 else SUPPORTED_VERSIONS


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
    def sent_version(self) -> str:
        """The version the caller sent ('' when none)."""
        value = self.metadata.get(VERSION_KEY)
        return value.strip() if value is not None else ""

    @property
    def version(self) -> str:
        value = self.metadata.get(VERSION_KEY)
        return value.strip() if value is not None and value.strip() else self.default_version

    @property
    def extensions(self) -> tuple[str, ...]:
        raw = self.metadata.get(EXTENSIONS_KEY, "")
        # dict.fromkeys: once each (a v0.3 client may send both header names)
        return tuple(dict.fromkeys(u for u in (part.strip() for part in raw.split(",")) if u))
