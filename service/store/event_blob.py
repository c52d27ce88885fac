"""The SQLite store's event blob: one row holds the events one commit added to a task.

Each event is framed as varint seq, varint length, then the serialized StreamResponse.
A protobuf message (`repeated {seq, payload}`) would hold the same, but measured on
this machine it encoded 2.6-2.9x slower and took 4 bytes more per event (its own
tags and the nested message's length; docs/benchmarks.md, "Event blob format"), and
every stored database already holds this framing, so it stays.
"""

from __future__ import annotations

_ONE_BYTE = [bytes((v,)) for v in range(0x80)]


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def pack_events(events: list[tuple[int, bytes]]) -> bytes:
    """(seq, serialized StreamResponse) pairs as varint seq, varint length, bytes."""
    return b"".join(_varint(seq) + _varint(len(payload)) + payload for seq, payload in events)


def unpack_events(blob: bytes) -> list[tuple[int, bytes]]:
    """The pairs `pack_events` framed, in order."""
    out, pos = [], 0
    while pos < len(blob):
        numbers = []
        for _ in range(2):
            value = shift = 0
            while True:
                byte = blob[pos]
                pos += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
            numbers.append(value)
        seq, length = numbers
        out.append((seq, blob[pos : pos + length]))
        pos += length
    return out
