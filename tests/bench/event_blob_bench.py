"""The SQLite store's event blob against the same events as a protobuf message.

`python tests/bench/event_blob_bench.py`: encode and decode time and bytes per event
for runs of 1, 3 and 10 status-update events (a commit usually holds a turn's few).
The protobuf message (`EventRun { repeated Event events = 1; }`, `Event { uint64 seq = 1;
bytes payload = 2; }`) is built at run time, so no generated code is needed.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from gen import a2a_pb2 as pb
from service.store.event_blob import pack_events, unpack_events


def _event_run_class() -> type:
    proto = descriptor_pb2.FileDescriptorProto(name="event_run_bench.proto", package="bench")
    event = proto.message_type.add(name="Event")
    label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    event.field.add(
        name="seq", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_UINT64, label=label
    )
    event.field.add(
        name="payload", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES, label=label
    )
    run = proto.message_type.add(name="EventRun")
    run.field.add(
        name="events",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".bench.Event",
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.EventRun"))


def _events(n: int) -> list[tuple[int, bytes]]:
    out = []
    for seq in range(1, n + 1):
        update = pb.TaskStatusUpdateEvent(
            task_id="0190f3c2-7a4e-7d1c-9a2b-3c4d5e6f7a8b", context_id="ctx-1"
        )
        update.status.state = pb.TASK_STATE_WORKING
        update.status.timestamp.seconds = 1_760_000_000 + seq
        out.append((seq, pb.StreamResponse(status_update=update).SerializeToString()))
    return out


def _per_call(fn: Callable[[], object], loops: int = 20_000) -> float:
    """Microseconds per call, the best of five rounds."""
    return min(timeit.repeat(fn, number=loops, repeat=5)) / loops * 1e6


def _row(n: int, event_run: type) -> tuple[str, bytes]:
    events = _events(n)

    def proto_encode() -> bytes:
        run = event_run()
        for seq, payload in events:
            run.events.add(seq=seq, payload=payload)
        return bytes(run.SerializeToString())

    def proto_decode(blob: bytes) -> list[tuple[int, bytes]]:
        return [(e.seq, e.payload) for e in event_run.FromString(blob).events]

    custom, proto = pack_events(events), proto_encode()
    assert unpack_events(custom) == events == proto_decode(proto)
    line = (
        f"{n:6}  {_per_call(lambda: pack_events(events)):13.2f}"
        f"  {_per_call(proto_encode):12.2f}"
        f"  {_per_call(lambda: unpack_events(custom)):13.2f}"
        f"  {_per_call(lambda: proto_decode(proto)):12.2f}"
        f"  {len(custom) / n:11.1f}  {len(proto) / n:10.1f}"
    )
    return line, proto


def main() -> None:
    event_run = _event_run_class()
    print(
        "events  custom enc µs  proto enc µs  custom dec µs  proto dec µs  custom B/ev  proto B/ev"
    )
    for n in (1, 3, 10):
        line, proto = _row(n, event_run)
        print(line)
    print(f"first byte of a protobuf blob: {proto[0]:#04x} (an old blob whose first seq is 10)")


if __name__ == "__main__":
    main()
