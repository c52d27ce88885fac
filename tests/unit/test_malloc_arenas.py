"""service/app/memory.py: glibc's arenas capped unless the environment chose; the heap's free
memory trimmed."""

from __future__ import annotations

import platform

import pytest

from service.app import memory


def test_the_environment_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert memory.limit_malloc_arenas() is False


@pytest.mark.skipif(platform.system() != "Linux", reason="glibc's mallopt")
def test_capped_on_linux(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert memory.limit_malloc_arenas() is True


@pytest.mark.skipif(platform.system() != "Linux", reason="glibc's mallinfo2 and malloc_trim")
async def test_the_heaps_free_memory_goes_back_to_the_system_past_the_threshold():
    """Blocks freed in the middle of the heap (every 16th kept, as a few survivors of many
    streams are) stay resident until the trim; below the threshold nothing is done."""
    trim = memory.HeapTrim.load()
    assert trim is not None
    blocks = [bytes(4000) + bytes([i % 256]) for i in range(20_000)]  # ~80 MiB from malloc
    kept = blocks[::16]
    del blocks
    assert trim.free_bytes() >= 64 * 2**20
    await trim(at_least=2**62)
    assert trim.trims == 0
    released = trim.trim()
    assert trim.trims == 1
    assert released >= 32 * 2**20, released
    assert trim.free_bytes() >= 64 * 2**20  # free still, only no longer resident
    await trim()  # past the default threshold: the job trims
    assert trim.trims == 2
    assert len(kept) == 1250


def test_the_trim_is_a_setting_that_can_be_turned_off():
    assert memory.MemorySettings().heap_trim_seconds == memory.HEAP_TRIM_SECONDS
    memory.validate_memory(memory.MemorySettings(heap_trim_seconds=0))
    with pytest.raises(ValueError, match="heap_trim_seconds: must be between 0"):
        memory.validate_memory(memory.MemorySettings(heap_trim_seconds=-1))
