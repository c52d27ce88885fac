"""Timestamps as the store and the engine use them: integer microseconds, UTC."""

from __future__ import annotations

import time

from google.protobuf import timestamp_pb2

from gen import a2a_pb2 as pb


def now_micros() -> int:
    return time.time_ns() // 1000


def micros_to_timestamp(
    us: int, into: timestamp_pb2.Timestamp | None = None
) -> timestamp_pb2.Timestamp:
    ts = into if into is not None else timestamp_pb2.Timestamp()
    ts.seconds, rest = divmod(us, 1_000_000)
    ts.nanos = rest * 1000
    return ts


def timestamp_micros(ts: timestamp_pb2.Timestamp) -> int:
    micros: int = ts.seconds * 1_000_000 + ts.nanos // 1000  # protobuf is untyped here
    return micros


def status_micros(task: pb.Task) -> int:
    return timestamp_micros(task.status.timestamp)
