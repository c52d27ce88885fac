"""The early size scan (service.inputs.early): it finds a part too large for any media type
in a send's bytes, and leaves everything else to the decoder."""

from __future__ import annotations

import json

from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service.inputs.early import PartLimits, json_oversized, json_rpc_send, proto_oversized

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
