"""Service parameters: what an HTTP request carries besides the request message.

Headers become call metadata the way grpc-gateway forwards them: a fixed set of
A2A and credential headers under their own (lower-case) names, and any
`Grpc-Metadata-<name>` header as `<name>`. `A2A-Version` may also come as a
query parameter. With no version at all, HTTP bindings assume 0.3, as the spec
says for a missing header; the API answers that with VersionNotSupportedError
explaining how to send the header.

Who calls (`Caller`: the principal and the headers call metadata may come from)
is resolved once per request, before the endpoint runs, by gateway.auth's
guard, and handed to the endpoint as an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from service.api import CallContext
from service.protocol.event_ids import RESUME_KEY, resume_point
from service.protocol.params import EXTENSIONS_KEY, LEGACY_EXTENSIONS_KEY, VERSION_KEY

HTTP_DEFAULT_VERSION = "0.3"
FORWARDED_HEADERS = frozenset({VERSION_KEY, EXTENSIONS_KEY, "authorization", "x-api-key"})
GRPC_METADATA_PREFIX = "grpc-metadata-"


@dataclass(frozen=True, slots=True)
class Caller:
    """The caller of one request: its principal ("" when anonymous) and the raw headers
    its call metadata may come from (credentials already removed, unless forwarded)."""

    principal: str
    headers: list[tuple[bytes, bytes]]


def forwarded_metadata(
    headers: list[tuple[bytes, bytes]], query: Mapping[str, str], *, v03: bool = False
) -> dict[str, str]:
    """Call metadata from raw ASGI headers (and the A2A-Version query parameter). `v03`: a
    v0.3 call, whose extensions may also come in v0.3's `X-A2A-Extensions`."""
    metadata: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if name in FORWARDED_HEADERS:
            key = name
        elif v03 and name == LEGACY_EXTENSIONS_KEY:
            key = EXTENSIONS_KEY
        elif name.startswith(GRPC_METADATA_PREFIX) and len(name) > len(GRPC_METADATA_PREFIX):
            key = name[len(GRPC_METADATA_PREFIX) :]
        else:
            continue
        value = raw_value.decode("latin-1")
        metadata[key] = f"{metadata[key]},{value}" if key in metadata else value
    if VERSION_KEY not in metadata:
        for qkey in ("A2A-Version", VERSION_KEY):
            if qkey in query:
                metadata[VERSION_KEY] = query[qkey]
                break
    return metadata


def sent_version(caller: Caller, query: Mapping[str, str]) -> str:
    """The A2A-Version the request names (header, else query parameter), '' if none: read
    before the body, so a binding can pick its codec by version and check it first."""
    key = VERSION_KEY.encode("latin-1")
    for raw_name, raw_value in caller.headers:
        if raw_name.lower() == key:
            return raw_value.decode("latin-1").strip()
    for qkey in ("A2A-Version", VERSION_KEY):
        if qkey in query:
            return query[qkey].strip()
    return ""


def last_event_id(headers: Mapping[str, str]) -> int | None:
    """The SSE `Last-Event-ID` (an event sequence number) or None."""
    return resume_point(headers.get(RESUME_KEY), "Last-Event-ID")


def call_context(
    caller: Caller, headers: Mapping[str, str], query: Mapping[str, str], *, v03: bool = False
) -> CallContext:
    metadata = forwarded_metadata(caller.headers, query, v03=v03)
    return CallContext(
        metadata=metadata,
        principal=caller.principal,
        default_version=HTTP_DEFAULT_VERSION,
        resume_after=last_event_id(headers),
    )
