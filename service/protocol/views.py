"""How tasks and pages are shown to a caller: history and artifact shaping, the page-size
rule every paged RPC follows, opaque page tokens, and the timestamp filter."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct

from gen import a2a_pb2 as pb
from service.protocol.errors import invalid_field
from service.protocol.timeutil import timestamp_micros

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100


def check_page_size(requested: int | None, field: str = "pageSize") -> int:
    """The page size of a paged RPC: DEFAULT_PAGE_SIZE when not given, else 1..MAX_PAGE_SIZE."""
    size = DEFAULT_PAGE_SIZE if requested is None else requested
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise invalid_field(field, f"must be between 1 and {MAX_PAGE_SIZE} (got {size})")
    return size


def shape_task(
    task: pb.Task, history_length: int | None, include_artifacts: bool = True
) -> pb.Task:
    """The task as a client asked to see it (a copy only when something is cut)."""
    if (history_length is None or len(task.history) <= history_length) and (
        include_artifacts or not task.artifacts
    ):
        return task
    out = pb.Task()
    out.CopyFrom(task)
    if history_length is not None and len(out.history) > history_length:
        keep = list(out.history)[len(out.history) - history_length :] if history_length else []
        del out.history[:]
        out.history.extend(keep)
    if not include_artifacts:
        del out.artifacts[:]
    return out


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_TOKEN_MAC_BYTES = 16
_BAD_TOKEN = "not a token returned by a previous ListTasks call of this caller"


def _token_mac(key: bytes, scope: tuple[str, str], payload: bytes) -> bytes:
    tenant, owner = scope
    signed = b"\x00".join((tenant.encode(), owner.encode(), payload))
    return hmac.new(key, signed, hashlib.sha256).digest()[:_TOKEN_MAC_BYTES]


def encode_cursor(key: bytes, scope: tuple[str, str], cursor: tuple[int, str]) -> str:
    """An opaque page token: the cursor and an HMAC (the store's key, bound to the caller's
    scope), so a forged or altered token is refused instead of being followed."""
    payload = struct.pack(">q", cursor[0]) + cursor[1].encode()
    return base64.urlsafe_b64encode(payload + _token_mac(key, scope, payload)).decode().rstrip("=")


def decode_cursor(key: bytes, scope: tuple[str, str], token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload, mac = raw[:-_TOKEN_MAC_BYTES], raw[-_TOKEN_MAC_BYTES:]
        if len(payload) < 9 or not hmac.compare_digest(mac, _token_mac(key, scope, payload)):
            raise ValueError
        return struct.unpack(">q", payload[:8])[0], payload[8:].decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise invalid_field("pageToken", _BAD_TOKEN) from None


def status_after(request: pb.ListTasksRequest) -> int | None:
    if not request.HasField("status_timestamp_after"):
        return None
    micros = timestamp_micros(request.status_timestamp_after)
    if (
        not INT64_MIN <= micros <= INT64_MAX
        or not 0 <= request.status_timestamp_after.nanos < 10**9
    ):
        raise invalid_field("statusTimestampAfter", "is not a valid timestamp")
    return micros
