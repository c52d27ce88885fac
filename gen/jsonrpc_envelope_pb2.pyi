from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ("payload", "final", "event_id")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    final: bool
    event_id: str
    def __init__(self, payload: _Optional[bytes] = ..., final: _Optional[bool] = ..., event_id: _Optional[str] = ...) -> None: ...
