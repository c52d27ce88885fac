"""Helpers for asserting on gRPC errors the way a client sees them."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


def error_details(err: grpc.aio.AioRpcError) -> tuple[error_details_pb2.ErrorInfo | None, list]:
    """(ErrorInfo, BadRequest field violations) from the status details."""
    status = rpc_status.from_call(err)
    info, violations = None, []
    if status is None:
        return None, []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend((v.field, v.description) for v in bad.field_violations)
    return info, violations


async def expect_error(coro, code: grpc.StatusCode, reason: str) -> grpc.aio.AioRpcError:
    try:
        await coro
    except grpc.aio.AioRpcError as err:
        assert err.code() == code, (err.code(), err.details())
        info, _ = error_details(err)
        assert info is not None, "no google.rpc.ErrorInfo in the status details"
        assert info.reason == reason, (info.reason, err.details())
        assert info.domain == "a2a-protocol.org"
        return err
    raise AssertionError(f"expected {code.name}/{reason}, the call succeeded")


async def drain(stream) -> list:
    return [event async for event in stream]
