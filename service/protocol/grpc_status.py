"""An A2AError as a gRPC status, and the reverse as a gRPC client reads one (the
gateway's proxy mode, the tests): the google.rpc details every gRPC answer of ours carries.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from service.protocol.errors import A2AError, error_details


def error_status(err: A2AError, message: str | None = None) -> grpc.Status:
    """A2AError -> gRPC status with google.rpc.ErrorInfo (and BadRequest) details; `message`
    replaces the error's own (the v0.3 binding names the error in it)."""
    details = []
    for detail in error_details(err):
        packed = any_pb2.Any()
        packed.Pack(detail)
        details.append(packed)
    code = grpc.StatusCode[err.grpc_status]
    return rpc_status.to_status(
        status_pb2.Status(
            code=code.value[0],
            message=err.message if message is None else message,
            details=details,
        )
    )


def status_details(
    err: grpc.aio.AioRpcError,
) -> tuple[error_details_pb2.ErrorInfo | None, list[tuple[str, str]]]:
    """The reverse of error_status, as a gRPC client sees it: the first ErrorInfo and
    the BadRequest field violations (field, description) in the status details."""
    status = rpc_status.from_call(err)
    info: error_details_pb2.ErrorInfo | None = None
    violations: list[tuple[str, str]] = []
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and info is None:
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend((v.field, v.description) for v in bad.field_violations)
    return info, violations


def retry_delay(err: grpc.aio.AioRpcError) -> float | None:
    """The google.rpc.RetryInfo delay of a status, in seconds (None when it has none)."""
    status = rpc_status.from_call(err)
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            nanos: int = retry.retry_delay.ToNanoseconds()
            return nanos / 1e9
    return None
