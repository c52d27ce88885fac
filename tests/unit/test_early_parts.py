"""The early size scan (service.inputs.early): it finds a part too large for any media type
in a send's bytes, and leaves everything else to the decoder."""

from __future__ import annotations

import json

from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service.inputs.early import (
    JSONRPC_SENDS,
    PROTO_JSON,
    V03_JSONRPC,
    V03_REST,
    V03_SENDS,
    PartLimits,
    SendScan,
    json_oversized,
    json_rpc_send,
    proto_oversized,
)

LIMITS = PartLimits(text=100, inline=200)


def body(*parts: dict) -> dict:
    return {"message": {"messageId": "m", "role": "ROLE_USER", "parts": list(parts)}}


def found(doc: dict, indent: int | None = None) -> str | None:
    raw = json.dumps(doc, indent=indent).encode()
    refused = json_oversized(raw, LIMITS)
    rpc = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": doc}).encode()
    assert json_rpc_send(rpc) == (True, 7)
    enveloped = json_oversized(rpc, LIMITS, enveloped=True)
    assert (refused is None) == (enveloped is None)
    wire = json_format.ParseDict(doc, pb.SendMessageRequest()).SerializeToString()
    on_wire = proto_oversized(wire, LIMITS)
    if refused is not None:
        assert on_wire is not None  # the wire is never smaller than the compact JSON here
    return None if refused is None else refused.field_violations[0][0]


def test_parts_too_large_are_found_by_kind_and_index():
    assert found(body({"text": "a" * 101})) == "message.parts[0].text"
    assert found(body({"text": "hi"}, {"data": {"k": "v" * 300}})) == "message.parts[1].data"
    assert found(body({"text": "hi"}, {"data": [[1, 2, 3]] * 100})) == "message.parts[1].data"


def test_parts_within_the_limits_pass_whatever_they_hold():
    assert found(body({"text": "a" * 100})) is None
    tricky = {"note": 'brackets [ { in a string \\" and a quote', "list": [{"a": []}]}
    assert found(body({"data": tricky}, {"text": "x"})) is None
    assert found(body({"data": tricky}), indent=8) is None  # whitespace is not content


def test_other_shapes_are_left_to_the_decoder():
    for raw in (b"", b"[]", b"{", b'{"message": 3}', b'{"message": {"parts": "no"}}', b"\xff"):
        assert json_oversized(raw, LIMITS) is None
        assert proto_oversized(raw, LIMITS) is None
    assert json_rpc_send(b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}') == (False, 1)


# ------------------------------------------------------------------ as the bytes arrive

SHAPES = {
    "rest": (PROTO_JSON, None),
    "jsonrpc": (None, {**JSONRPC_SENDS, **dict.fromkeys(V03_SENDS, V03_JSONRPC)}),
    "rest v0.3": (V03_REST, None),
}
TRICKY = 'a \\" quote, a \\\\ backslash, \\n, [ { ] } "in" strings, \\u00e9'


def nested(depth: int, leaf: object) -> object:
    for i in range(depth):
        leaf = {"k": [leaf]} if i % 2 else [leaf]
    return leaf


def documents() -> list[tuple[str, bytes]]:
    """Small sends of every shape, some with a part past LIMITS, with escapes, nesting,
    brackets inside strings and whitespace where a chunk may end."""
    tricky = {"note": TRICKY, "list": [{"a": [[], {}]}, "]}", 1.5e3, None, True]}
    v1 = [
        body({"text": "hi"}, {"data": tricky}),
        body({"data": tricky}, {"text": TRICKY + "t" * 120}),
        body({"mediaType": "a/b", "data": [[1, [2, [3]]]] * 30}),
        body({"text": "x"}, {"raw": "QUJD" * 70}),
        body({"text": "x", "metadata": {"k": ["v"] * 50}}, {"data": {"deep": [[[["x" * 250]]]]}}),
        body({"data": nested(20, "x" * 100)}, {"text": "y"}),  # deeper than pairs removed at once
        body({"data": [nested(12, "z"), nested(12, "z" * 200)]}),
    ]
    out = []
    for doc in v1:
        for indent in (None, 2):
            out.append(("rest", json.dumps(doc, indent=indent).encode()))
            rpc = {"jsonrpc": "2.0", "id": "r1", "method": "SendMessage", "params": doc}
            out.append(("jsonrpc", json.dumps(rpc, indent=indent).encode()))
    v03 = [
        {"kind": "text", "text": "hi"},
        {"kind": "data", "data": tricky},
        {"kind": "file", "file": {"mimeType": "a/b", "bytes": "QUJD" * 70}},
    ]
    message = {"kind": "message", "messageId": "m", "role": "user", "parts": v03}
    rpc03 = {"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": {"message": message}}
    out.append(("jsonrpc", json.dumps(rpc03).encode()))
    rest03 = {
        "request": {
            "messageId": "m",
            "content": [
                {"text": TRICKY},
                {"data": {"data": tricky}},
                {"file": {"fileWithBytes": "QUJD" * 70}},
            ],
        }
    }
    out.append(("rest v0.3", json.dumps(rest03, indent=1).encode()))
    return out


def scanned(kind: str, chunks: list[bytes]) -> tuple[str | None, int]:
    """The field refused (None: none) and how many bytes had been fed when it was known."""
    shape, methods = SHAPES[kind]
    scan = SendScan(LIMITS, shape, methods)
    fed = 0
    for chunk in chunks:
        fed += len(chunk)
        if scan.feed(chunk) is not None:
            break
    else:
        scan.finish()
    found = scan.found
    return (None if found is None else found.field_violations[0][0]), fed


def test_every_chunk_boundary_gives_the_verdict_of_the_whole_document():
    verdicts = []
    for kind, raw in documents():
        whole, _ = scanned(kind, [raw])
        verdicts.append(whole)
        for cut in range(1, len(raw)):
            assert scanned(kind, [raw[:cut], raw[cut:]])[0] == whole, (kind, cut, raw[:cut])
        assert scanned(kind, [raw[i : i + 1] for i in range(len(raw))])[0] == whole
    # the documents cover both verdicts, on every shape
    assert verdicts.count(None) >= 4
    assert {v for v in verdicts if v} >= {
        "message.parts[1].text",
        "message.parts[0].data",
        "message.parts[1].raw",
        "message.parts[1].data",
        "message.parts[2].raw",
    }


def test_a_refusal_is_known_before_the_rest_arrives():
    doc = body({"text": "hi"}, {"data": {"rows": [{"name": "item", "value": 1}] * 100}})
    raw = json.dumps(doc).encode()
    found, fed = scanned("rest", [raw[i : i + 7] for i in range(0, len(raw), 7)])
    assert found == "message.parts[1].data"
    assert fed < 200 + 200  # the part's start, its 200 allowed bytes and one chunk
