"""Oversized parts refused before the request is decoded: a cost proportional to what was
read, not to building a message (or a JSON document) of every byte first.

`InputPolicy.check` stays the judge of every message; this only finds, in the request's
own bytes, a part that check would refuse for its size anyway, so a 10 MiB data part does
not first become a hundred MiB of objects. Two readers of the same rule:

- `proto_oversized`: the wire bytes of a `SendMessageRequest` (gRPC, either version's),
  walked field by field without decoding: a part's `text`, `raw` or `data` length is on
  the wire.
- `SendScan`: the JSON body of a send (REST, JSON-RPC; 1.0 and v0.3 shapes) scanned as it
  arrives, chunk by chunk, for `message.parts[i]` (under `params` too); a `data` value is
  measured as JSON text without whitespace, each escape counted as one byte, and the scan
  stops as soon as it is past the limit, before the rest of the body is read.
  `json_oversized` is the same scan of a whole body.

Anything unexpected (not the shape of a send, not valid bytes) is left to the decoder.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

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
        return self.fits_length(len(body))

    def fits_length(self, length: int) -> bool:
        """`fits` for a request of `length` bytes."""
        return length <= min(self.text, self.inline)

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


@dataclass(frozen=True, slots=True)
class WireShape:
    """Where a version's `SendMessageRequest` keeps its parts' contents, by field number:
    the message, its parts, a part's content fields and the kind each holds, and a
    part's fields whose message holds a content (v0.3's `file` and `data`)."""

    message: int
    parts: int
    kinds: dict[int, str]
    nested: dict[int, dict[int, str]]


WIRE = WireShape(message=2, parts=5, kinds={1: "text", 2: "raw", 4: "data"}, nested={})
# a2a_v0_3.proto: request = 1, content = 5; Part: text = 1, file = 2 (FilePart:
# file_with_bytes = 2), data = 3 (DataPart: data = 1)
WIRE_V03 = WireShape(message=1, parts=5, kinds={1: "text"}, nested={2: {2: "raw"}, 3: {1: "data"}})


def proto_oversized(data: bytes, limits: PartLimits, shape: WireShape = WIRE) -> A2AError | None:
    """A `SendMessageRequest`'s first part too large for any media type (None: none, or
    bytes the decoder should judge)."""
    if limits.fits(data):
        return None
    try:
        message = [f for f in _fields(data, 0, len(data)) if f[0] == shape.message]
        if not message:
            return None
        _, start, end = message[-1]
        parts = [f for f in _fields(data, start, end) if f[0] == shape.parts]
        for index, (_, p_start, p_end) in enumerate(parts):
            for number, f_start, f_end in _fields(data, p_start, p_end):
                contents = [(number, f_start, f_end)]
                inner = shape.nested.get(number)
                if inner is not None:
                    contents = [f for f in _fields(data, f_start, f_end) if f[0] in inner]
                for field, c_start, c_end in contents:
                    kind = (inner or shape.kinds).get(field)
                    if kind is not None:
                        refused = limits.refusal(index, kind, c_end - c_start, exact=True)
                        if refused is not None:
                            return refused
    except (IndexError, ValueError):
        return None
    return None


# ------------------------------------------------------------------------------ JSON
#
# One scanner serves the whole body and a body as it arrives: `SendScan` keeps the bytes
# read so far and a generator that walks them, suspended (`yield`) where it needs a byte
# not read yet, and resumed where it stopped when more arrive. Each step costs what the new
# bytes cost: a string is searched for its closing quote from where the last search ended,
# an object or array is judged 64 KiB at a time with C-speed bytes operations (the
# brackets outside strings, matched pairs removed, the depth carried over), never a Python
# loop per token.


_WS = re.compile(rb"[ \t\r\n]*")
_SCALAR = re.compile(rb"[^,:\]}\s\"\[{]*")
# Everything up to the next bracket outside a string, and that bracket.
_TO_BRACKET = re.compile(rb'[^"\[\]{}]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^"\[\]{}]*)*([\[\]{}])', re.S)
_QUOTED = re.compile(rb'"[^"]*"')
_NOT_QUOTE_OR_BRACKET = bytes(b for b in range(256) if b not in b'"[]{}')
_ONE_BRACKET = bytes.maketrans(b"[]", b"{}")  # their kind is the decoder's business
_STEPS = bytes.maketrans(b"{}", b"\x01\xff")  # +1, -1 as signed bytes
_SEGMENT = 64 * 1024  # bytes of an object or array judged at once
_KEY_BYTES = 64  # longer member names are none of those looked for
_QUOTE, _BACKSLASH, _COLON, _COMMA = 0x22, 0x5C, 0x3A, 0x2C
_OPEN_OBJECT, _CLOSE_OBJECT, _OPEN_ARRAY = 0x7B, 0x7D, 0x5B


class _Over(Exception):
    """The value being measured is past its budget."""


class _Odd(Exception):
    """Not the shape this scan knows, or nothing more to find: the decoder decides."""


class _Found(Exception):
    def __init__(self, error: A2AError) -> None:
        self.error = error


@dataclass(frozen=True, slots=True)
class PartShape:
    """Where a binding's send keeps its parts' contents, as quoted JSON member names: the
    send's message, the message's parts, a part's members holding a content and its kind,
    and a part's members whose object holds a content (v0.3's `file`, REST v0.3's `data`)."""

    message: frozenset[bytes]
    parts: frozenset[bytes]
    kinds: dict[bytes, str]
    nested: dict[bytes, dict[bytes, str]]


PROTO_JSON = PartShape(  # 1.0: REST's body, JSON-RPC's params
    message=frozenset({b'"message"'}),
    parts=frozenset({b'"parts"'}),
    kinds={b'"text"': "text", b'"raw"': "raw", b'"data"': "data"},
    nested={},
)
V03_JSONRPC = PartShape(  # {"kind": "file", "file": {"bytes": ...}}
    message=frozenset({b'"message"'}),
    parts=frozenset({b'"parts"'}),
    kinds={b'"text"': "text", b'"data"': "data"},
    nested={b'"file"': {b'"bytes"': "raw"}},
)
V03_REST = PartShape(  # the v0.3 proto's ProtoJSON: content, file.fileWithBytes, data.data
    message=frozenset({b'"message"', b'"request"'}),
    parts=frozenset({b'"content"'}),
    kinds={b'"text"': "text"},
    nested={
        b'"file"': {b'"fileWithBytes"': "raw", b'"file_with_bytes"': "raw"},
        b'"data"': {b'"data"': "data"},
    },
)
SENDS = frozenset({"SendMessage", "SendStreamingMessage"})
V03_SENDS = frozenset({"message/send", "message/stream"})
JSONRPC_SENDS = dict.fromkeys(SENDS, PROTO_JSON)


def _compact(buf: bytes | bytearray, start: int, end: int) -> int:
    """Bytes of buf[start:end] less whitespace, each escape sequence counted as one."""
    kept = len(buf[start:end].translate(None, b" \t\r\n\\"))  # one pass, not five counts
    if buf.find(b"\\", start, end) < 0:
        return kept
    return kept - 4 * buf.count(b"\\", start, end)


def _escaped(buf: bytes | bytearray, quote: int) -> bool:
    """Whether the quote at `quote` follows an odd number of backslashes."""
    back = quote
    while buf[back - 1] == _BACKSLASH:
        back -= 1
    return (quote - back) % 2 == 1


def _balance(brackets: bytes) -> tuple[int, int]:
    """(closers, openers) left of a run of `{` and `}` once matched pairs are removed: the
    depth it goes below where it began, and how many it leaves open."""
    for _ in range(8):
        shorter = brackets.replace(b"{}", b"")
        if len(shorter) == len(brackets):
            return brackets.count(b"}"), brackets.count(b"{")
        brackets = shorter
    steps = memoryview(brackets.translate(_STEPS)).cast("b")  # deeply nested: prefix sums
    closers = -min(accumulate(steps, initial=0))
    return closers, sum(steps) + closers


Steps = Generator[None, None, Any]


class _Reader:
    """The bytes of a JSON document read so far and how to walk them: each walk is a
    generator that yields while it needs bytes not read yet (or raises _Odd once the
    document has ended without them)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.ended = False

    def _more(self) -> Steps:
        if self.ended:
            raise _Odd
        yield

    def _need(self, pos: int) -> Steps:
        while pos >= len(self.buf):
            yield from self._more()

    def _ws(self, pos: int) -> Steps:
        """The first byte after the whitespace at `pos`, once it is read."""
        while True:
            match = _WS.match(self.buf, pos)
            assert match is not None  # matches the empty string
            pos = match.end()
            if pos < len(self.buf):
                return pos
            yield from self._more()

    def _value(self, pos: int, budget: int | None = None) -> Steps:
        """(end, size) of the value at `pos` (its size as JSON text without whitespace,
        each escape as one byte); _Over as soon as that size is known past `budget`."""
        yield from self._need(pos)
        first = self.buf[pos]
        if first == _QUOTE:
            return (yield from self._string(pos, budget))
        if first in (_OPEN_OBJECT, _OPEN_ARRAY):
            return (yield from self._nested(pos, budget))
        return (yield from self._scalar(pos, budget))

    def _string(self, pos: int, budget: int | None) -> Steps:
        buf = self.buf
        scan, escapes = pos + 1, 0
        while True:
            quote = buf.find(b'"', scan)
            end = len(buf) if quote < 0 else quote
            escapes += buf.count(b"\\", scan, end)
            size = end - pos - 1 - 5 * escapes  # \uXXXX: 6 bytes for one
            if budget is not None and size > budget:
                raise _Over(size)
            if quote >= 0 and not _escaped(buf, quote):
                return quote + 1, size
            scan = end + 1 if quote >= 0 else end
            if quote < 0:
                yield from self._more()

    def _scalar(self, pos: int, budget: int | None) -> Steps:
        end = pos
        while True:
            match = _SCALAR.match(self.buf, end)
            assert match is not None  # matches the empty string
            end = match.end()
            if budget is not None and end - pos > budget:
                raise _Over(end - pos)
            if end < len(self.buf) or self.ended:
                if end == pos:
                    raise _Odd
                return end, end - pos
            yield

    def _nested(self, pos: int, budget: int | None) -> Steps:
        """The object or array at `pos`, judged a segment at a time: its brackets outside
        strings (escapes removed first, then strings), matched pairs removed; where a
        segment closes it, the exact end is found in that segment alone."""
        buf = self.buf
        depth, in_string, scan, size, step = 1, False, pos + 1, 1, 256
        while True:
            end = min(len(buf), scan + step)
            while end > scan and buf[end - 1] == _BACKSLASH and (end < len(buf) or not self.ended):
                end -= 1  # an escape is judged whole
            if end == scan:
                if scan + step <= len(buf):
                    raise _Odd  # a run of backslashes longer than a segment
                yield from self._more()
                continue
            step = min(step * 4, _SEGMENT)  # small values cost little, large ones 64 KiB a time
            if in_string and buf.find(b'"', scan, end) < 0:  # inside one string throughout
                size += _compact(buf, scan, end)
                scan = end
                if budget is not None and size > budget:
                    raise _Over(size)
                continue
            seg = buf[scan:end]
            if seg.find(b"\\") >= 0:
                seg = seg.replace(b"\\\\", b"").replace(b'\\"', b"")
            marks = bytes(seg.translate(None, _NOT_QUOTE_OR_BRACKET))
            if in_string:
                marks = b'"' + marks
            marks = _QUOTED.sub(b"", marks.replace(b'""', b""))
            opened = marks.find(b'"')  # a string still open at the segment's end
            if opened >= 0:
                marks = marks[:opened]
            closers, openers = _balance(marks.translate(_ONE_BRACKET))
            if closers >= depth:
                close = _close(buf, scan, depth, in_string)
                size += _compact(buf, scan, close)
                if budget is not None and size > budget:
                    raise _Over(size)
                return close, size
            depth += openers - closers
            in_string = opened >= 0
            size += _compact(buf, scan, end)
            scan = end
            if budget is not None and size > budget:
                raise _Over(size)

    def _members(self, pos: int, visit: Callable[[bytes, int], Steps]) -> Steps:
        """The end of the object at `pos`; `visit(name, value)` walks each member's value
        (the name quoted, empty when long) and returns its end."""
        buf = self.buf
        yield from self._need(pos)
        if buf[pos] != _OPEN_OBJECT:
            raise _Odd
        pos = yield from self._ws(pos + 1)
        if buf[pos] == _CLOSE_OBJECT:
            return pos + 1
        while True:
            if buf[pos] != _QUOTE:
                raise _Odd
            end, _ = yield from self._string(pos, None)
            name = bytes(buf[pos:end]) if end - pos <= _KEY_BYTES else b""
            pos = yield from self._ws(end)
            if buf[pos] != _COLON:
                raise _Odd
            value = yield from self._ws(pos + 1)
            pos = yield from self._ws((yield from visit(name, value)))
            if buf[pos] == _CLOSE_OBJECT:
                return pos + 1
            if buf[pos] != _COMMA:
                raise _Odd
            pos = yield from self._ws(pos + 1)

    def _skip(self, _name: bytes, pos: int) -> Steps:
        end, _ = yield from self._value(pos)
        return end

    def head(self, pos: int, until: bytes, head: dict[bytes, object]) -> Steps:
        """The JSON-RPC members `id` and `method` (plain values only) read into `head`, up
        to the member `until`; returns where its value starts."""

        def visit(name: bytes, value: int) -> Steps:
            if name == until:
                raise _Until(value)
            end = yield from self._skip(name, value)
            if name in (b'"id"', b'"method"') and self.buf[value] not in b"[{":
                head[name] = json.loads(self.buf[value:end])
            return end

        try:
            yield from self._members(pos, visit)
        except _Until as reached:
            return reached.args[0]
        raise _Odd


class _Until(Exception):
    """The member looked for begins here."""


def _close(buf: bytes | bytearray, scan: int, depth: int, in_string: bool) -> int:
    """The end of the object or array open `depth` deep at `scan` (inside a string when
    `in_string`), known to close in the bytes read: found bracket by bracket."""
    pos = scan
    if in_string:
        pos = buf.find(b'"', pos)
        while pos >= 0 and _escaped(buf, pos):
            pos = buf.find(b'"', pos + 1)
        if pos < 0:
            raise _Odd
        pos += 1
    while True:
        match = _TO_BRACKET.match(buf, pos)
        if match is None:
            raise _Odd
        pos = match.end()
        depth += 1 if match.group(1) in (b"{", b"[") else -1
        if depth == 0:
            return pos


class SendScan(_Reader):
    """A send's JSON body scanned for a part too large for any media type as its bytes
    arrive (`feed`, then `finish`): `found` is that part's refusal as soon as it is known,
    before the rest is read. `shape` is where the body keeps its parts; for a JSON-RPC
    request, `methods` maps each send method to the shape of its params instead, and the
    request's `rid` and `method` are read on the way. `buf` holds every byte fed."""

    def __init__(
        self,
        limits: PartLimits,
        shape: PartShape | None = None,
        methods: dict[str, PartShape] | None = None,
    ) -> None:
        super().__init__()
        self.limits = limits
        self.found: A2AError | None = None
        self.rid: object = None
        self.method: object = None
        self._live = True
        self._steps = self._envelope(methods) if methods is not None else self._body(shape)

    def feed(self, chunk: bytes) -> A2AError | None:
        """Take the next bytes; the refusal once one is found."""
        self.buf += chunk
        if self._live and not self.limits.fits_length(len(self.buf)):
            self._run()
        return self.found

    def body(self) -> bytes:
        """Every byte fed, without a copy (bytes' interface: json, re and the scans read
        it alike)."""
        return self.buf  # type: ignore[return-value]

    def finish(self) -> A2AError | None:
        """The body has ended: the refusal, if one is found in it."""
        self.ended = True
        if self._live and not self.limits.fits_length(len(self.buf)):
            self._run()
        return self.found

    def _run(self) -> None:
        try:
            next(self._steps)
            return
        except _Found as found:
            self.found = found.error
        except (StopIteration, _Odd, IndexError, ValueError, RecursionError):
            pass
        self._live = False  # found, or nothing to find: the rest is only read

    def _body(self, shape: PartShape | None) -> Steps:
        assert shape is not None
        yield from self._send((yield from self._ws(0)), shape)

    def _envelope(self, methods: dict[str, PartShape]) -> Steps:
        head: dict[bytes, object] = {}
        params = yield from self.head((yield from self._ws(0)), b'"params"', head)
        rid = head.get(b'"id"')
        self.rid = rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None
        self.method = method = head.get(b'"method"')
        shape = methods.get(method) if isinstance(method, str) else None
        if shape is None:
            raise _Odd
        yield from self._send(params, shape)

    def _send(self, pos: int, shape: PartShape) -> Steps:
        """The send object at `pos`: its message's parts, then nothing more to find."""

        def message(name: bytes, value: int) -> Steps:
            if name in shape.message:
                yield from self._members(value, parts)
                raise _Odd  # the first message member is the one scanned
            return (yield from self._skip(name, value))

        def parts(name: bytes, value: int) -> Steps:
            if name in shape.parts:
                yield from self._parts(value, shape)
            return (yield from self._skip(name, value))

        yield from self._members(pos, message)

    def _parts(self, pos: int, shape: PartShape) -> Steps:
        buf = self.buf
        yield from self._need(pos)
        if buf[pos] != _OPEN_ARRAY:
            raise _Odd
        pos = yield from self._ws(pos + 1)
        index = 0
        while buf[pos] == _OPEN_OBJECT:

            def member(name: bytes, value: int, index: int = index) -> Steps:
                kind = shape.kinds.get(name)
                if kind is not None:
                    return (yield from self._content(value, index, kind))
                inner = shape.nested.get(name)
                yield from self._need(value)
                if inner is not None and buf[value] == _OPEN_OBJECT:

                    def content(name: bytes, value: int) -> Steps:
                        kind = inner.get(name)
                        if kind is None:
                            return (yield from self._skip(name, value))
                        return (yield from self._content(value, index, kind))

                    return (yield from self._members(value, content))
                return (yield from self._skip(name, value))

            pos = yield from self._ws((yield from self._members(pos, member)))
            if buf[pos] != _COMMA:
                raise _Odd
            pos = yield from self._ws(pos + 1)
            index += 1
        raise _Odd

    def _content(self, pos: int, index: int, kind: str) -> Steps:
        """The end of part `index`'s `kind` content at `pos`; _Found when it is too large."""
        limits = self.limits
        budget = limits.text if kind == "text" else limits.inline
        if kind == "raw":  # base64: 4 characters for 3 bytes
            budget = (budget + 2) // 3 * 4
        try:
            end, _ = yield from self._value(pos, budget)
        except _Over as over:
            size = over.args[0]
            if kind == "raw":
                size = size * 3 // 4
            refused = limits.refusal(index, kind, size)
            if refused is None:
                raise _Odd from None
            raise _Found(refused) from None
        return end


def json_oversized(body: bytes, limits: PartLimits, *, enveloped: bool = False) -> A2AError | None:
    """The first part of a send's ProtoJSON body (`enveloped`: a JSON-RPC request, the
    send under `params`) too large for any media type; None when there is none or the
    body is not the shape of a send (the decoder judges it)."""
    if limits.fits(body):
        return None
    if enveloped:
        scan = SendScan(limits, methods=JSONRPC_SENDS)
    else:
        scan = SendScan(limits, PROTO_JSON)
    scan.feed(body)
    return scan.finish()


def json_rpc_send(body: bytes) -> tuple[bool, object]:
    """Whether a JSON-RPC body names a send before its `params` (1.0 method names), and
    its id (None when absent or not a plain one): read without parsing the params."""
    reader = _Reader()
    reader.buf += body
    reader.ended = True  # an ended reader never waits: the walk runs to its end at once
    head: dict[bytes, object] = {}
    match = _WS.match(body)
    assert match is not None  # matches the empty string
    with contextlib.suppress(_Odd, IndexError, ValueError, RecursionError):
        for _ in reader.head(match.end(), b'"params"', head):
            pass
    rid = head.get(b'"id"')
    if not isinstance(rid, (str, int)) or isinstance(rid, bool):
        rid = None
    return head.get(b'"method"') in SENDS, rid
