"""service/app/memory.py: glibc's arenas capped unless the environment chose."""

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
