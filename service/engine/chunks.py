"""Appended artifact chunks of a live task, kept serialized.

A streaming agent appends a chunk to an artifact with every event. Held as protobuf
parts in the run's snapshot, each chunk costs ~100 bytes of arena memory (a `Part`, the
repeated field's regrowth) for as long as the task runs, and every commit re-encodes
all of them; as wire bytes it costs its encoded size (a few bytes for a short chunk) and a
commit copies it. `Chunks` holds what was appended to each artifact since the snapshot
last held it whole: the snapshot's bytes are composed from the head's encoding and these
tails, and `merge_into` puts them back into the message when someone reads the task.
"""

from __future__ import annotations

from gen import a2a_pb2 as pb

_TASK_ARTIFACTS = pb.Task.DESCRIPTOR.fields_by_name["artifacts"].number
_ARTIFACT_PARTS = pb.Artifact.DESCRIPTOR.fields_by_name["parts"].number
_LEN = 2  # wire type: length-delimited
_ARTIFACT_TAG = (_TASK_ARTIFACTS << 3) | _LEN
_PART_TAG = bytes(((_ARTIFACT_PARTS << 3) | _LEN,))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _skip(buf: bytes, pos: int, wire_type: int) -> int:
    """The position after a field's value of `wire_type` starting at `pos`."""
    if wire_type == 0:
        return _read_varint(buf, pos)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 5:
        return pos + 4
    if wire_type == _LEN:
        length, pos = _read_varint(buf, pos)
        return pos + length
    raise ValueError(f"unexpected wire type {wire_type} in a task snapshot")


class Chunks:
    """Per artifact (by its position in the task), the parts appended to it, encoded."""

    __slots__ = ("_tails",)

    def __init__(self) -> None:
        self._tails: dict[int, bytearray] = {}

    def __bool__(self) -> bool:
        return bool(self._tails)

    def append(self, index: int, parts: pb.Artifact) -> None:
        """Add the parts of `parts` (an artifact chunk) to artifact `index`."""
        tail = self._tails.get(index)
        if tail is None:
            tail = self._tails[index] = bytearray()
        for part in parts.parts:
            raw = part.SerializeToString()
            tail += _PART_TAG
            tail += _varint(len(raw))
            tail += raw

    def drop(self, index: int) -> None:
        """Artifact `index` was replaced: what was appended to it before is gone."""
        self._tails.pop(index, None)

    def clear(self) -> None:
        self._tails.clear()

    def merge_into(self, task: pb.Task) -> None:
        """Put every appended part into `task`'s artifacts (then nothing is held here)."""
        for index, tail in sorted(self._tails.items()):
            task.artifacts[index].MergeFromString(bytes(tail))
        self._tails.clear()

    def serialize(self, task: pb.Task) -> bytes:
        """`task` with the appended parts, encoded: its own encoding with each artifact
        entry that has a tail re-framed to hold it (a parser takes the parts in order)."""
        head: bytes = task.SerializeToString()
        if not self._tails:
            return head
        # Pieces joined once: one allocation of the snapshot's size per commit, not a
        # buffer regrown piece by piece (with many runs committing in turn, the heap keeps
        # the holes such regrowth leaves).
        view = memoryview(head)
        pieces: list[bytes | bytearray | memoryview] = []
        pos = index = copied = 0
        while pos < len(head):
            start = pos
            tag, pos = _read_varint(head, pos)
            if tag == _ARTIFACT_TAG:
                length, pos = _read_varint(head, pos)
                tail = self._tails.get(index)
                index += 1
                if tail is not None:
                    pieces.append(view[copied:start])
                    pieces.append(_varint(tag))
                    pieces.append(_varint(length + len(tail)))
                    pieces.append(view[pos : pos + length])
                    pieces.append(tail)
                    pos += length
                    copied = pos
                    continue
                pos += length
            else:
                pos = _skip(head, pos, tag & 7)
        pieces.append(view[copied:])
        return b"".join(pieces)
