"""The PostgreSQL store's schema: every version, in order, and how a database is brought up to date.

One place for the whole schema. A change is a new entry at the end of
`MIGRATIONS` (never an edit of an applied one): `migrate` applies, in one
transaction, the entries a database has not seen yet and records each
version in `a2a_schema_migrations`. The transaction first takes a
transaction-scoped advisory lock, so when several processes start at once
one migrates and the others wait for it, then find nothing left to do.

Text columns use the "C" collation: ids and cursors compare by code point, as
in the other stores, whatever the database's locale.
"""

from __future__ import annotations

import asyncpg

from gen import a2a_pb2 as pb

# pg_advisory_xact_lock key: "a2a-schema" as a number, shared by every process on the database.
MIGRATION_LOCK_KEY = 0x6132615F736368

UNSETTLED_STATES = (int(pb.TASK_STATE_SUBMITTED), int(pb.TASK_STATE_WORKING))
_UNSETTLED_SQL = "state IN ({}, {})".format(*UNSETTLED_STATES)
FINISHED_STATES = tuple(
    int(s)
    for s in (
        pb.TASK_STATE_COMPLETED,
        pb.TASK_STATE_FAILED,
        pb.TASK_STATE_CANCELED,
        pb.TASK_STATE_REJECTED,
    )
)
_FINISHED_SQL = "state IN ({}, {}, {}, {})".format(*FINISHED_STATES)

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            # One row per task: the whole snapshot plus the columns ListTasks filters on.
            """CREATE TABLE a2a_tasks (
                tenant     TEXT COLLATE "C" NOT NULL,
                owner      TEXT COLLATE "C" NOT NULL,
                id         TEXT COLLATE "C" NOT NULL,
                context_id TEXT COLLATE "C" NOT NULL,
                state      INTEGER NOT NULL,
                status_us  BIGINT  NOT NULL,
                last_seq   BIGINT  NOT NULL DEFAULT 0,
                snapshot   BYTEA   NOT NULL,
                PRIMARY KEY (tenant, owner, id)
            )""",
            # One index per ListTasks filter combination, each ending in (status_us, id):
            # a page is one ordered index range, read backwards, with no sort.
            "CREATE INDEX a2a_tasks_by_time ON a2a_tasks (tenant, owner, status_us, id)",
            "CREATE INDEX a2a_tasks_by_context"
            " ON a2a_tasks (tenant, owner, context_id, status_us, id)",
            "CREATE INDEX a2a_tasks_by_state ON a2a_tasks (tenant, owner, state, status_us, id)",
            "CREATE INDEX a2a_tasks_by_context_state"
            " ON a2a_tasks (tenant, owner, context_id, state, status_us, id)",
            f"CREATE INDEX a2a_tasks_unsettled ON a2a_tasks (state) WHERE {_UNSETTLED_SQL}",
            # One row per event; the key is also the fence: two writers that both
            # append sequence n to a task cannot both commit.
            """CREATE TABLE a2a_events (
                tenant  TEXT COLLATE "C" NOT NULL,
                owner   TEXT COLLATE "C" NOT NULL,
                task_id TEXT COLLATE "C" NOT NULL,
                seq     BIGINT NOT NULL,
                payload BYTEA  NOT NULL,
                PRIMARY KEY (tenant, owner, task_id, seq)
            )""",
            """CREATE TABLE a2a_push_configs (
                tenant  TEXT COLLATE "C" NOT NULL,
                owner   TEXT COLLATE "C" NOT NULL,
                task_id TEXT COLLATE "C" NOT NULL,
                id      TEXT COLLATE "C" NOT NULL,
                payload BYTEA NOT NULL,
                PRIMARY KEY (tenant, owner, task_id, id)
            )""",
            # Secrets every process on the store shares (the ListTasks page-token key).
            """CREATE TABLE a2a_secrets (
                name  TEXT PRIMARY KEY,
                value BYTEA NOT NULL
            )""",
        ),
    ),
    (
        2,
        (
            # Retention (purge_finished): the oldest finished tasks, in status order.
            f"CREATE INDEX a2a_tasks_finished ON a2a_tasks (status_us) WHERE {_FINISHED_SQL}",
        ),
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1][0]


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer server than this one."""


async def migrate(conn: asyncpg.Connection) -> int:
    """Bring the database (the connection's schema) to SCHEMA_VERSION; returns how many
    versions were applied. Safe when several processes call it at once."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS a2a_schema_migrations ("
            " version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        current = await conn.fetchval("SELECT coalesce(max(version), 0) FROM a2a_schema_migrations")
        if current > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"the database schema is version {current}, newer than this server's"
                f" {SCHEMA_VERSION}: upgrade the server"
            )
        applied = 0
        for version, statements in MIGRATIONS:
            if version <= current:
                continue
            for statement in statements:
                await conn.execute(statement)
            await conn.execute("INSERT INTO a2a_schema_migrations (version) VALUES ($1)", version)
            applied += 1
        return applied
