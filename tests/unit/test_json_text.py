"""Answers' JSON text (service/protocol/json_text.py, and gateway.transcode.dumps_str on it):
compact UTF-8 meaning what `json.dumps` meant, its text where orjson writes the same."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.transcode import dumps_str
from service.protocol.json_text import dumps


@pytest.mark.parametrize(
    "value",
    [
        {"jsonrpc": "2.0", "id": "grüße ✓", "result": {"text": 'line\nbreak "q" 😀', "n": [1, -2]}},
        {"id": 2**70, "result": None},  # a request id past 64 bits: orjson refuses, json writes it
        {1: "a", "b": True},  # a key that is not a string: json's conversion
        {"f": [0.1, 1e22, -0.0, 123456.789]},
    ],
)
def test_answers_json_means_what_json_dumps_means(value: Any) -> None:
    written = dumps(value)
    assert json.loads(written) == json.loads(
        json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    )
    assert dumps_str(value) == written.decode("utf-8")


def test_answers_json_is_compact_utf8() -> None:
    assert dumps({"a": [1, 2], "b": "grüße ✓"}) == '{"a":[1,2],"b":"grüße ✓"}'.encode()


@pytest.mark.parametrize(
    "value",
    [
        {"jsonrpc": "2.0", "id": 7, "result": {"task": {"id": "t", "history": []}}},
        {"text": 'ünïcødé ✓ \u2028 \n\t"\\ \x00 \U0001f600', "n": [1, 2.5, -0.0, 10**30]},
        {"none": None, "bool": True},  # (NaN is no JSON: orjson writes null, json NaN)
        [],
        "plain",
    ],
)
def test_answers_json_text_is_json_dumps_text(value):
    assert dumps_str(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
