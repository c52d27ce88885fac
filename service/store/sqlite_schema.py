"""The SQLite store's file: its tables and indexes, their migrations, and how each
connection to it is set up (WAL, synchronous=NORMAL, no checkpoint inside a commit)."""

from __future__ import annotations

import logging
import os
import sqlite3

from gen import a2a_pb2 as pb
from service.protocol.states import TERMINAL

log = logging.getLogger("service.store.sqlite")

SCHEMA_VERSION = 4
# Schema 4: a streaming task's snapshot is written once every SNAPSHOT_EVERY artifact
# events (service.store.sqlite `save`); `tasks.snapshot_seq` is the last event it holds.
SNAPSHOT_EVERY = 32

UNSETTLED_SQL = f"state IN ({int(pb.TASK_STATE_SUBMITTED)}, {int(pb.TASK_STATE_WORKING)})"
FINISHED_SQL = "state IN ({})".format(", ".join(str(int(s)) for s in sorted(TERMINAL)))
# Schema 3: finished tasks by age, for retention (purge_finished); small, partial.
_FINISHED_INDEX = (
    f"CREATE INDEX IF NOT EXISTS tasks_finished ON tasks (status_us) WHERE {FINISHED_SQL}"
)

BUSY_TIMEOUT_S = 10.0  # how long writes wait for another process's write lock
_MMAP_BYTES = 256 * 1024 * 1024  # readers read database pages through mmap (fewer syscalls)
_READER_CACHE_KIB = 32000
_WRITER_CACHE_KIB = 4000
# When the WAL starts over its file is cut back to this size, below the checkpoint
# mark (else the file's size would keep calling for checkpoints).
_WAL_SIZE_LIMIT = 4 * 1024 * 1024

_SCHEMA = (
    # One row per task: the whole snapshot plus the columns ListTasks filters on.
    """CREATE TABLE IF NOT EXISTS tasks (
        tenant     TEXT    NOT NULL,
        owner      TEXT    NOT NULL,
        id         TEXT    NOT NULL,
        context_id TEXT    NOT NULL,
        state      INTEGER NOT NULL,
        status_us  INTEGER NOT NULL,
        snapshot   BLOB    NOT NULL,
        PRIMARY KEY (tenant, owner, id)
    )""",
    # One index per ListTasks filter combination; each ends in (status_us, id)
    # so the page is an ordered range scan with no sort and no filtering.
    "CREATE INDEX IF NOT EXISTS tasks_by_time ON tasks (tenant, owner, status_us, id)",
    "CREATE INDEX IF NOT EXISTS tasks_by_context"
    " ON tasks (tenant, owner, context_id, status_us, id)",
    "CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (tenant, owner, state, status_us, id)",
    "CREATE INDEX IF NOT EXISTS tasks_by_context_state"
    " ON tasks (tenant, owner, context_id, state, status_us, id)",
    # Small partial index: only running tasks, read at startup by unsettled().
    f"CREATE INDEX IF NOT EXISTS tasks_unsettled ON tasks (state) WHERE {UNSETTLED_SQL}",
    # Row counts for total_size, kept by the writer in the same transaction as the
    # rows (sqlite_writes). context_id '' = any context, state 0 = any state.
    """CREATE TABLE IF NOT EXISTS task_counts (
        tenant     TEXT    NOT NULL,
        owner      TEXT    NOT NULL,
        context_id TEXT    NOT NULL,
        state      INTEGER NOT NULL,
        n          INTEGER NOT NULL,
        PRIMARY KEY (tenant, owner, context_id, state)
    ) WITHOUT ROWID""",
    # Events in runs: one row per task per commit holds every event that commit
    # added (a turn's events usually share one), framed by event_blob. A row is
    # keyed by its last sequence number; a re-used last number is rejected.
    """CREATE TABLE IF NOT EXISTS events (
        tenant    TEXT    NOT NULL,
        owner     TEXT    NOT NULL,
        task_id   TEXT    NOT NULL,
        last_seq  INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        payload   BLOB    NOT NULL,
        PRIMARY KEY (tenant, owner, task_id, last_seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS push_configs (
        tenant  TEXT NOT NULL,
        owner   TEXT NOT NULL,
        task_id TEXT NOT NULL,
        id      TEXT NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (tenant, owner, task_id, id)
    )""",
)

_V1_TRIGGERS = ("tasks_count_insert", "tasks_count_update", "tasks_count_delete")


def connect(path: str, *, writer: bool) -> sqlite3.Connection:
    """A connection with the store's settings; `writer` ones also set the journal."""
    busy_ms = int(BUSY_TIMEOUT_S * 1000)  # the store sets the writer's to 0 once it is open
    conn = sqlite3.connect(
        path,
        isolation_level=None,  # autocommit; transactions are explicit
        check_same_thread=False,  # opened on a helper thread, used by one thread at a time
        timeout=busy_ms / 1000,
        cached_statements=384,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        # Pages in the connection's own cache. A reader's (32 MiB) serves GetTask/ListTasks;
        # the writer touches the tables' right edges and interior pages, which a small
        # cache holds, and a large one would keep every page a commit ever wrote (RSS
        # growing with the database while streams write it, as the mapping below would).
        conn.execute(f"PRAGMA cache_size = -{_WRITER_CACHE_KIB if writer else _READER_CACHE_KIB}")
        conn.execute("PRAGMA temp_store = MEMORY")
        # Readers map the file; the writer does not (see its cache above).
        conn.execute(f"PRAGMA mmap_size = {0 if writer else _MMAP_BYTES}")
        if writer:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("task store: journal_mode is %s, not WAL", mode)
            conn.execute("PRAGMA synchronous = NORMAL")
            # No checkpoint inside COMMIT (it would fsync on the event loop): the store
            # runs them on a helper thread (service.store.sqlite_checkpoint).
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute(f"PRAGMA journal_size_limit = {_WAL_SIZE_LIMIT}")
        else:
            conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def page_token_key(conn: sqlite3.Connection) -> bytes:
    """This database's secret for ListTasks page tokens: made once, kept in the file, so
    tokens stay valid across restarts (and for every process on the same file)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS store_secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL)"
    )
    conn.execute(
        "INSERT OR IGNORE INTO store_secrets VALUES ('page_token_key', ?)", (os.urandom(32),)
    )
    conn.commit()
    return bytes(
        conn.execute("SELECT value FROM store_secrets WHERE name = 'page_token_key'").fetchone()[0]
    )


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the file to SCHEMA_VERSION (one process at a time: BEGIN IMMEDIATE)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process?
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {version} is newer than this code ({SCHEMA_VERSION})"
            )
        if version < 1:
            for stmt in _SCHEMA:
                conn.execute(stmt)
        if version < 2:
            # Version 1 kept task_counts with triggers (exact, so the counts carry over);
            # the writer now does it once per batch, which costs less.
            for trigger in _V1_TRIGGERS:
                conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        if version < 3:
            conn.execute(_FINISHED_INDEX)
        if version < 4:
            # Snapshots written before hold every event of their task: running tasks get
            # their last event's sequence (what later steady saves are counted from), the
            # others NULL (nothing to apply).
            conn.execute("ALTER TABLE tasks ADD COLUMN snapshot_seq INTEGER")
            conn.execute(
                "UPDATE tasks SET snapshot_seq = (SELECT MAX(e.last_seq) FROM events AS e"
                " WHERE e.tenant = tasks.tenant AND e.owner = tasks.owner"
                f" AND e.task_id = tasks.id) WHERE {UNSETTLED_SQL}"
            )
        # Later versions: `if version < 5: ...` here.
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def restart_wal(conn: sqlite3.Connection) -> None:
    """Write one frame now (on a helper thread), so that the first write into a fresh
    WAL, which syncs the WAL header and trims the file, is not a commit on the loop."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:  # e.g. another process writes: its commit restarts the WAL
        log.debug("task store: WAL restart skipped: %s", exc)
        if conn.in_transaction:
            conn.execute("ROLLBACK")
