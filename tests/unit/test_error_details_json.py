"""The HTTP error details written directly are exactly what json_format writes."""

from __future__ import annotations

import pytest
from google.protobuf import any_pb2, json_format
from google.rpc import error_details_pb2

from gateway.errors import _detail_json, details_json
from service.engine.limits import refuse
from service.protocol.errors import (
    InternalError,
    TaskNotFoundError,
    UnavailableError,
    error_details,
    invalid_field,
)

ERRORS = [
    TaskNotFoundError("Task x not found."),
    invalid_field("message.messageId", "must be 1-128 characters"),
    InternalError("Internal error (ref abc).", metadata={"ref": "abc"}),
    UnavailableError("draining", retry_after=1),
    refuse("rate_limit_per_principal", 2.5, "Too many requests", retry_after=0.37),
    refuse("max_concurrent_turns", 10, "busy", retry_after=1.5),
    InternalError("two", field_violations=[("a", "x"), ("", "only a description")]),
]


def reference(detail) -> dict:
    packed = any_pb2.Any()
    packed.Pack(detail)
    return json_format.MessageToDict(packed)


@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__)
def test_details_match_json_format(err):
    assert details_json(err) == [reference(d) for d in error_details(err)]


def test_other_details_and_extra_fields_take_the_general_path():
    info = error_details_pb2.ErrorInfo()  # nothing set
    assert _detail_json(info) == reference(info)
    bad = error_details_pb2.BadRequest()
    bad.field_violations.add(field="f", description="d", reason="R")
    assert _detail_json(bad) == reference(bad)
    help_ = error_details_pb2.Help()
    help_.links.add(description="docs", url="https://example.com")
    assert _detail_json(help_) == reference(help_)
    assert _detail_json(error_details_pb2.RetryInfo()) == reference(error_details_pb2.RetryInfo())
