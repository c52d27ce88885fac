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


def test_a_forked_child_draws_its_own_random_bits():
    """The random bits come from a pool: a child forked with the parent's pool must not
    hand out the ids the parent hands out next."""
    import os

    uuid7()  # the pool is filled
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then out at once
        os.write(write, uuid7().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 100).decode()
    os.close(read)
    parent = uuid7()
    assert child[15:] != parent[15:]  # the random part (after the time and version)
