"""Helpers for asserting on gRPC errors the way a client sees them."""

from __future__ import annotations

import grpc

from service.protocol.grpc_status import status_details as error_details  # noqa: F401 - used by tests


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
