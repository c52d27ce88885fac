"""Server-generated ids are RFC 9562 version-7 UUIDs: unique, and ordered by creation time."""

import time
import uuid

from service.protocol.ids import uuid7


def test_uuid7_format_and_order():
    ids = []
    for _ in range(50):
        ids.append(uuid7())
        time.sleep(0.002)
    for value in ids:
        parsed = uuid.UUID(value)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122 and str(parsed) == value
    assert ids == sorted(ids)
    assert len(set(uuid7() for _ in range(10000))) == 10000
