"""Saving measure records in the store (tables of ``traincast.store.schema_measure``)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from traincast.measure.fingerprint import Fingerprint


def open_store(path: str | Path | None = None):
    """The traincast ``Store`` at ``path`` (default: ``traincast.store.default_db_path()``)."""
    from traincast.store import Store

    return Store(path)


def save_fingerprint(conn: sqlite3.Connection, fp: Fingerprint) -> str:
    """Insert ``fp`` if new; return its id."""
    d = fp.as_dict()
    cols = [k for k in d if k != "id"]
    conn.execute(
        f"INSERT OR IGNORE INTO measure_fingerprints (id, {', '.join(cols)}, created_s) "
        f"VALUES (?, {', '.join('?' for _ in cols)}, ?)",
        [d["id"], *(d[c] for c in cols), time.time()],
    )
    return d["id"]


def select_rows(conn: sqlite3.Connection, table: str, **equal) -> list[dict]:
    """``SELECT *`` from one of the measure tables, filtered on the non-None ``equal`` columns."""
    if not table.startswith("measure_") or not table.replace("_", "").isalnum():
        raise ValueError(f"not a measure table: {table!r}")
    where = [(k, v) for k, v in equal.items() if v is not None]
    sql = f"SELECT * FROM {table}"
    if where:
        sql += " WHERE " + " AND ".join(f"{k} = ?" for k, _ in where)
    cur = conn.execute(sql + " ORDER BY rowid", [v for _, v in where])
    names = [c[0] for c in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]
