"""Oversized parts refused before the request is decoded: a cost proportional to what was
read, not to building a message (or a JSON document) of every byte first.

`InputPolicy.check` stays the judge of every message; this only finds, in the request's
own bytes, a part that check would refuse for its size anyway, so a 10 MiB data part does
not first become a hundred MiB of objects. Two readers of the same rule:

- `proto_oversized`: the wire bytes of a `SendMessageRequest` (gRPC), walked field by
  field without decoding: a part's `text`, `raw` or `data` length is on the wire.
- `json_oversized`: the ProtoJSON body of a send (REST, JSON-RPC), scanned for
  `message.parts[i]` (under `params` too) with regular expressions; a `data` value is
  measured as JSON text without whitespace, each escape counted as one byte, and the
  scan stops as soon as it is past the limit.

Anything unexpected (not the shape of a send, not valid bytes) is left to the decoder.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from service.protocol.errors import A2AError, invalid_field

MiB = 1024 * 1024


def size_text(n: int) -> str:
    """A size as the input limits' messages say it."""
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} bytes"


@dataclass(frozen=True, slots=True)
class PartLimits:
    """The largest inline part of each kind that any media type may have: text, and
    raw/data (whichever of the text and binary limits is larger)."""

    text: int
    inline: int

    def fits(self, body: bytes) -> bool:
        """Whether a request of `body`'s size cannot hold a part past either limit (no
        part's content, as measured here, is longer than the whole request): the common
        small send skips the scan."""
        return len(body) <= min(self.text, self.inline)

    def refusal(self, index: int, kind: str, size: int, exact: bool = False) -> A2AError | None:
        """The refusal of part `index` whose `kind` content is `size` bytes (`exact`, or at
        least that many), as InputPolicy says it; None when it may fit."""
        limit = self.text if kind == "text" else self.inline
        if size <= limit:
            return None
        what = "inline text" if kind == "text" else f"inline {kind} parts"
        return invalid_field(
            f"message.parts[{index}].{kind}",
            f"is {'' if exact else 'at least '}{size_text(size)}; {what} may be at most "
            f"{size_text(limit)}",
        )


# ------------------------------------------------------------------------- protobuf wire


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field in buf[start:end]."""
    out = []
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 2:
            length, pos = _varint(buf, pos)
            out.append((key >> 3, pos, pos + length))
            pos += length
        elif wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError("unexpected wire type")
    if pos != end:
        raise ValueError("truncated")
    return out


_PART_KINDS = {1: "text", 2: "raw", 4: "data"}  # a2a.proto Part fields


def proto_oversized(data: bytes, limits: PartLimits) -> A2AError | None:
    """A `SendMessageRequest`'s first part too large for any media type (None: none, or
    bytes the decoder should judge)."""
    if limits.fits(data):
        return None
    try:
        message = [f for f in _fields(data, 0, len(data)) if f[0] == 2]  # .message
        if not message:
            return None
        _, start, end = message[-1]
        parts = [f for f in _fields(data, start, end) if f[0] == 5]  # .parts
        for index, (_, p_start, p_end) in enumerate(parts):
            for number, f_start, f_end in _fields(data, p_start, p_end):
                kind = _PART_KINDS.get(number)
                if kind is not None:
                    refused = limits.refusal(index, kind, f_end - f_start, exact=True)
                    if refused is not None:
                        return refused
    except (IndexError, ValueError):
        return None
    return None


# ------------------------------------------------------------------------------ JSON


_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR = re.compile(rb"[^,:\]}\s]+")
# Everything up to the next bracket outside a string, and that bracket.
_TO_BRACKET = re.compile(rb'[^"\[\]{}]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^"\[\]{}]*)*([\[\]{}])', re.S)
_WHITESPACE = (b" ", b"\t", b"\r", b"\n")


class _Over(Exception):
    """The value being measured is past its budget."""


class _Odd(Exception):
    """Not the shape this scan knows: the decoder decides."""


def _ws(buf: bytes, pos: int) -> int:
    match = _WS.match(buf, pos)
    assert match is not None  # matches the empty string
    return match.end()


def _measure(buf: bytes, pos: int, budget: int | None) -> tuple[int, int]:
    """(end of the value at `pos`, its size as JSON text without whitespace and with each
    escape as one byte); _Over as soon as that size is past `budget`."""
    first = buf[pos : pos + 1]
    if first == b'"':
        end = _string_end(buf, pos)
        size = end - pos - 2 - 5 * buf.count(b"\\", pos, end)  # \uXXXX: 6 bytes for one
    elif first in (b"{", b"["):
        if budget is not None:
            _over_budget(buf, pos, budget)  # _Over if still open past its budget
        depth, end = 0, pos
        while True:
            match = _TO_BRACKET.match(buf, end)
            if match is None:
                raise _Odd
            end = match.end()
            depth += 1 if match.group(1) in (b"{", b"[") else -1
            if depth == 0:
                break
        size = _compact(buf, pos, end)
    else:
        match = _SCALAR.match(buf, pos)
        if match is None:
            raise _Odd
        end = match.end()
        size = end - pos
    if budget is not None and size > budget:
        raise _Over(size)
    return end, size


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"\\[]{}')
_QUOTED = re.compile(rb'"[^"]*"')
_MAX_NESTING = 64  # deeper values are measured bracket by bracket


def _over_budget(buf: bytes, pos: int, budget: int) -> None:
    """_Over when the object or array at `pos` is more than `budget` bytes (compact) and
    still open there: judged from its first bytes with C-speed bytes operations (the
    brackets outside strings, matched pairs removed), never a loop per token."""
    window, size = budget + 1, 0
    for _ in range(8):  # widen past its whitespace and escapes
        size = _compact(buf, pos, pos + window)
        if size > budget or pos + window >= len(buf):
            break
        window += 2 * (budget - size + 1)
    if size <= budget:
        return
    seq = buf[pos : pos + window].translate(None, _NOT_STRUCTURE)
    seq = seq.replace(b"\\\\", b"").replace(b'\\"', b"").replace(b"\\", b"")
    seq = _QUOTED.sub(b"", seq.replace(b'""', b""))  # strings, most of them empty by now
    if seq.count(b'"'):  # the window ends inside a string
        seq = seq[: seq.index(b'"')]
    for _ in range(_MAX_NESTING):
        shorter = seq.replace(b"{}", b"").replace(b"[]", b"")
        if len(shorter) == len(seq):
            break
        seq = shorter
    else:
        return
    if seq[:1] in (b"{", b"[") and not (b"}" in seq or b"]" in seq):
        raise _Over(size)


def _string_end(buf: bytes, pos: int) -> int:
    """End of the JSON string at `pos` (its closing quote found with `bytes.find`)."""
    end = pos + 1
    while True:
        quote = buf.find(b'"', end)
        if quote < 0:
            raise _Odd
        back = quote
        while buf[back - 1] == 0x5C:  # a quote after an odd number of backslashes is escaped
            back -= 1
        if (quote - back) % 2 == 0:
            return quote + 1
        end = quote + 1


def _compact(buf: bytes, start: int, end: int) -> int:
    """Bytes of buf[start:end] less whitespace, each escape sequence counted as one."""
    spaces = sum(buf.count(c, start, end) for c in _WHITESPACE)
    return end - start - spaces - 5 * buf.count(b"\\", start, end)


def _member(buf: bytes, pos: int, name: bytes) -> int | None:
    """Where the value of `name` starts in the object at `pos` (None: not there)."""
    for key, value in _members_until(buf, pos, name):
        if key == name:
            return value
    return None


def _members_until(buf: bytes, pos: int, name: bytes) -> list[tuple[bytes, int]]:
    """Members of the object at `pos`, up to and including `name` (its value not skipped)."""
    if buf[pos : pos + 1] != b"{":
        raise _Odd
    out: list[tuple[bytes, int]] = []
    pos = _ws(buf, pos + 1)
    if buf[pos : pos + 1] == b"}":
        return out
    while True:
        key = _STRING.match(buf, pos)
        if key is None:
            raise _Odd
        pos = _ws(buf, key.end())
        if buf[pos : pos + 1] != b":":
            raise _Odd
        value = _ws(buf, pos + 1)
        out.append((key.group(), value))
        if key.group() == name:
            return out
        pos = _ws(buf, _measure(buf, value, None)[0])
        sep = buf[pos : pos + 1]
        if sep == b"}":
            return out
        if sep != b",":
            raise _Odd
        pos = _ws(buf, pos + 1)


_JSON_KINDS = {b'"text"': "text", b'"raw"': "raw", b'"data"': "data"}


def json_oversized(body: bytes, limits: PartLimits, *, enveloped: bool = False) -> A2AError | None:
    """The first part of a send's ProtoJSON body (`enveloped`: a JSON-RPC request, the
    send under `params`) too large for any media type; None when there is none or the
    body is not the shape of a send (the decoder judges it)."""
    if limits.fits(body):
        return None
    try:
        pos = _ws(body, 0)
        if enveloped:
            params = _member(body, pos, b'"params"')
            if params is None:
                return None
            pos = params
        message = _member(body, pos, b'"message"')
        if message is None:
            return None
        parts = _member(body, message, b'"parts"')
        if parts is None or body[parts : parts + 1] != b"[":
            return None
        pos = _ws(body, parts + 1)
        index = 0
        while body[pos : pos + 1] == b"{":
            end = _part(body, pos, index, limits)
            pos = _ws(body, end)
            if body[pos : pos + 1] != b",":
                return None
            pos = _ws(body, pos + 1)
            index += 1
    except _Found as found:
        return found.error
    except (_Odd, IndexError):
        return None
    return None


class _Found(Exception):
    def __init__(self, error: A2AError) -> None:
        self.error = error


def _part(buf: bytes, pos: int, index: int, limits: PartLimits) -> int:
    """End of the part object at `pos`; _Found when one of its contents is too large."""
    pos = _ws(buf, pos + 1)
    if buf[pos : pos + 1] == b"}":
        return pos + 1
    while True:
        key = _STRING.match(buf, pos)
        if key is None:
            raise _Odd
        pos = _ws(buf, key.end())
        if buf[pos : pos + 1] != b":":
            raise _Odd
        value = _ws(buf, pos + 1)
        kind = _JSON_KINDS.get(key.group())
        budget = None
        if kind is not None:
            budget = limits.text if kind == "text" else limits.inline
            if kind == "raw":  # base64: 4 characters for 3 bytes
                budget = (budget + 2) // 3 * 4
        try:
            end, _ = _measure(buf, value, budget)
        except _Over as over:
            assert kind is not None
            size = over.args[0]
            if kind == "raw":
                size = size * 3 // 4
            refused = limits.refusal(index, kind, size)
            if refused is None:
                raise _Odd from None
            raise _Found(refused) from None
        pos = _ws(buf, end)
        sep = buf[pos : pos + 1]
        if sep == b"}":
            return pos + 1
        if sep != b",":
            raise _Odd
        pos = _ws(buf, pos + 1)


SENDS = frozenset({"SendMessage", "SendStreamingMessage"})


def json_rpc_send(body: bytes) -> tuple[bool, object]:
    """Whether a JSON-RPC body names a send before its `params` (1.0 method names), and
    its id (None when absent or not a plain one): read without parsing the params."""
    try:
        pos = _ws(body, 0)
        head = {}
        for key, value in _members_until(body, pos, b'"params"'):
            if key in (b'"id"', b'"method"') and body[value : value + 1] not in (b"[", b"{"):
                end, _ = _measure(body, value, None)  # a string or a scalar: no nesting
                head[key] = json.loads(body[value:end])
    except (_Odd, IndexError, ValueError, RecursionError):
        return False, None
    rid = head.get(b'"id"')
    if not isinstance(rid, (str, int)) or isinstance(rid, bool):
        rid = None
    return head.get(b'"method"') in SENDS, rid
