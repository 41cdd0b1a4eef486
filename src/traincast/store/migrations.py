"""Versioned migrations of the traincast schema, for SQLite and PostgreSQL alike.

The database holds its version in ``traincast_schema`` (one row per migration
applied: ``version``, ``description``, ``applied_s``). :func:`upgrade` applies,
in order and in one transaction under a lock (``BEGIN IMMEDIATE`` on SQLite, an
advisory lock on PostgreSQL), every migration above the database's version, so
two processes opening a new database at once do not race.

Rules for a schema change: edit the table in its ``schema_*`` module (the head
definition used by queries) AND append a :class:`Migration` that brings an
older database there. Migration 1 creates missing tables from the head
definitions (``checkfirst``: it also adopts databases written before this
table existed), so every later migration must be idempotent (``IF NOT
EXISTS``, or check the column with :func:`has_column` first).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Column, Double, Integer, MetaData, Table, Text, inspect, select, text
from sqlalchemy.engine import Connection

from traincast.errors import DataError

_version_md = MetaData()
schema_table = Table(
    "traincast_schema", _version_md,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("description", Text, nullable=False),
    Column("applied_s", Double, nullable=False),
)

# any 64-bit constant: the PostgreSQL advisory lock that serialises migrations
_PG_LOCK_KEY = 0x7472616E63617374  # "trancast"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    upgrade: Callable[[Connection], None]


def has_column(conn: Connection, table: str, column: str) -> bool:
    return any(c["name"] == column for c in inspect(conn).get_columns(table))


def _v1(conn: Connection) -> None:
    from traincast.store.db import load_schema_modules
    from traincast.store.schema import metadata

    load_schema_modules()
    metadata.create_all(conn, checkfirst=True)


def _v2(conn: Connection) -> None:
    # a recorder resends a batch whose answer it lost; the same event must be stored once
    conn.execute(text(
        "DELETE FROM online_events WHERE id NOT IN "
        "(SELECT MIN(id) FROM online_events GROUP BY job_id, kind, step, time_s)"
    ))
    conn.execute(text(
        "CREATE UNIQUE INDEX IF NOT EXISTS online_events_once ON online_events(job_id, kind, step, time_s)"
    ))


def _v3(conn: Connection) -> None:
    # the learning rate of each step, so that converge knows the schedule from the recorder's rows
    if not has_column(conn, "online_steps", "learning_rate"):
        kind = "DOUBLE PRECISION" if conn.dialect.name == "postgresql" else "REAL"
        conn.execute(text(f"ALTER TABLE online_steps ADD COLUMN learning_rate {kind}"))


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "tables of the data, measure and online packages", _v1),
    Migration(2, "online_events: one row per (job, kind, step, time) so that resent events are stored once", _v2),
    Migration(3, "online_steps: the learning rate of each step", _v3),
)
HEAD = MIGRATIONS[-1].version


def current_version(conn: Connection) -> int:
    """The database's schema version (0: none applied)."""
    if not inspect(conn).has_table("traincast_schema"):
        return 0
    v = conn.execute(select(schema_table.c.version).order_by(schema_table.c.version.desc()).limit(1)).scalar()
    return int(v or 0)


def upgrade(conn: Connection, target: int = HEAD) -> list[int]:
    """Apply the migrations above the database's version up to ``target``, inside the caller's
    (write) transaction; return the versions applied."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
    _version_md.create_all(conn, checkfirst=True)
    have = current_version(conn)
    if have > HEAD:
        raise DataError(f"the database's schema is version {have}, newer than this traincast's {HEAD}; "
                        "upgrade traincast to open it")
    done = []
    for m in MIGRATIONS:
        if have < m.version <= target:
            m.upgrade(conn)
            conn.execute(schema_table.insert().values(version=m.version, description=m.description,
                                                      applied_s=time.time()))
            done.append(m.version)
    return done
