"""Task stores behind one seam (`TaskStore`), chosen by URL with `open_store`."""

from __future__ import annotations

from service.store.base import (
    PushConfigStore,
    Scope,
    Store,
    StoredEvent,
    TaskPage,
    TaskQuery,
    TaskStore,
)

__all__ = [
    "PushConfigStore",
    "Scope",
    "Store",
    "StoredEvent",
    "TaskPage",
    "TaskQuery",
    "TaskStore",
    "open_store",
]


def open_store(url: str, commit_interval_ms: float | None = None) -> Store:
    """`memory:` or `sqlite:///path/to/file.db` (relative paths allowed: `sqlite:data/a2a.db`).

    `commit_interval_ms`: SQLite's group commit (None: the store's default; see
    service.store.sqlite)."""
    if url in ("memory:", "memory://"):
        from service.store.memory import MemoryTaskStore

        return MemoryTaskStore()
    if url.startswith("sqlite:"):
        from service.store.sqlite import SqliteTaskStore

        path = url[len("sqlite:") :]
        if path.startswith("///"):
            path = path[2:]
        elif path.startswith("//"):
            raise ValueError(
                f"store URL {url!r}: use sqlite:///absolute/path or sqlite:relative/path"
            )
        if commit_interval_ms is None:
            return SqliteTaskStore(path)
        return SqliteTaskStore(path, commit_interval=commit_interval_ms / 1000)
    raise ValueError(f"unknown store URL {url!r}: expected memory: or sqlite:PATH")
