"""Task stores behind one seam (`TaskStore`), chosen by URL with `open_store`."""

from __future__ import annotations

import re

from service.store.base import (
    PushConfigStore,
    Scope,
    Store,
    StoredEvent,
    TaskPage,
    TaskQuery,
    TaskStore,
    WriteConflict,
    snapshot_with_seq,
)

__all__ = [
    "PushConfigStore",
    "Scope",
    "Store",
    "StoredEvent",
    "TaskPage",
    "TaskQuery",
    "TaskStore",
    "WriteConflict",
    "open_store",
    "snapshot_with_seq",
]


def open_store(url: str, commit_interval_ms: float | None = None) -> Store:
    """`memory:`, `sqlite:///path/to/file.db` (relative paths allowed: `sqlite:data/a2a.db`),
    or `postgresql://user@host:5432/db` (shared by several processes; see service.store.postgres).

    `commit_interval_ms`: the group commit's slot of SQLite and PostgreSQL (None: the
    default; see service.store.pacing)."""
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
    if url.startswith(POSTGRES_SCHEMES):
        from service.store.postgres import PostgresTaskStore

        if commit_interval_ms is None:
            return PostgresTaskStore(url)
        return PostgresTaskStore(url, commit_interval=commit_interval_ms / 1000)
    raise ValueError(
        f"unknown store URL {redact_url(url)!r}: expected memory:, sqlite:PATH"
        " or postgresql://user@host/db"
    )


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_shared(url: str) -> bool:
    """Whether several processes (on one host or many) may use the store at once."""
    return url.startswith(POSTGRES_SCHEMES)


def redact_url(url: str) -> str:
    """A store or bus URL without its credentials (also a `password=` query parameter),
    for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        url = f"{scheme}://***@{rest.split('@', 1)[1]}"
    return re.sub(r"([?&]password=)[^&]*", r"\1***", url, flags=re.IGNORECASE)
