"""A sqlite3-like connection over PostgreSQL, for code written against ``Store.conn``.

Code in ``measure``, ``fit`` and ``online`` calls ``store.conn.execute(sql, params)``
with SQLite's ``?`` placeholders and reads rows by name or index. On SQLite,
``Store.conn`` is a real ``sqlite3.Connection``. On PostgreSQL it is
:class:`PgConnection`, which runs the same statements through psycopg in
autocommit mode (as the SQLite connection is) after these rewrites:

- ``?`` placeholders become ``%s`` (and a literal ``%`` becomes ``%%``);
- ``INSERT OR IGNORE INTO t`` becomes ``INSERT INTO t ... ON CONFLICT DO NOTHING``;
- ``INSERT OR REPLACE INTO t (cols)`` becomes an upsert on ``t``'s primary key;
- ``ORDER BY rowid`` orders by the table's primary key;
- a column named with a word PostgreSQL reserves (``inner``) is quoted;
- an ``INSERT`` into a table whose primary key is an integer ``id`` returns it,
  so ``cursor.lastrowid`` works.

New code should use SQLAlchemy Core on ``Store.engine`` (``Store.read()`` /
``Store.write()``), which needs none of this; see ``traincast.online.jobs``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from traincast.store.schema import metadata


class Row(tuple):
    """A result row readable by index and by column name, as ``sqlite3.Row``."""

    _index: dict[str, int]

    def __new__(cls, values, index: dict[str, int]):
        r = super().__new__(cls, values)
        r._index = index
        return r

    def __getitem__(self, key):
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def _outside_quotes(sql: str) -> Iterable[tuple[bool, str]]:
    """Split ``sql`` into (is_code, text) pieces; quoted strings and identifiers are not code."""
    i, start, n = 0, 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in ("'", '"'):
            if i > start:
                yield True, sql[start:i]
            j = i + 1
            while j < n:
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:  # doubled quote
                        j += 2
                        continue
                    break
                j += 1
            yield False, sql[i:j + 1]
            i = start = j + 1
            continue
        i += 1
    if start < n:
        yield True, sql[start:]


_reserved_re: re.Pattern | None = None


def _reserved_columns() -> re.Pattern:
    """Our column names that PostgreSQL reserves (measure_layer_samples.inner), not followed by JOIN."""
    global _reserved_re
    if _reserved_re is None:
        from sqlalchemy.dialects.postgresql.base import RESERVED_WORDS

        from traincast.store.db import load_schema_modules

        load_schema_modules()
        names = sorted({c.name for t in metadata.tables.values() for c in t.columns if c.name in RESERVED_WORDS})
        _reserved_re = re.compile(r"\b(" + "|".join(names) + r")\b(?!\s+JOIN)", re.I) if names else re.compile(r"(?!)")
    return _reserved_re


def _placeholders(sql: str) -> str:
    out = []
    words = _reserved_columns()
    for code, piece in _outside_quotes(sql):
        if code:
            piece = words.sub(lambda m: f'"{m.group(1).lower()}"', piece.replace("%", "%%").replace("?", "%s"))
            out.append(piece)
        else:
            out.append(piece.replace("%", "%%"))
    return "".join(out)


_INSERT = re.compile(r"^\s*INSERT\s+(?:OR\s+(IGNORE|REPLACE)\s+)?INTO\s+(\w+)\s*(\(([^)]*)\))?", re.I | re.S)
_ROWID = re.compile(r"ORDER\s+BY\s+rowid\b", re.I)
_FROM = re.compile(r"\bFROM\s+(\w+)", re.I)


def _pk(table: str) -> list[str]:
    from traincast.store.db import load_schema_modules

    load_schema_modules()
    t = metadata.tables.get(table)
    return [c.name for c in t.primary_key.columns] if t is not None else []


def translate(sql: str) -> tuple[str, bool]:
    """SQLite-flavoured ``sql`` as PostgreSQL; and whether it returns the new row's ``id``."""
    returns_id = False
    m = _INSERT.match(sql)
    if m:
        verb, table, cols = (m.group(1) or "").upper(), m.group(2), m.group(4)
        body = sql[: m.start()] + "INSERT INTO " + table + (f" ({cols})" if cols else "") + sql[m.end():]
        body = body.rstrip().rstrip(";")
        pk = _pk(table)
        if verb == "IGNORE":
            body += " ON CONFLICT DO NOTHING"
        elif verb == "REPLACE":
            names = [c.strip() for c in (cols or "").split(",") if c.strip()]
            rest = [c for c in names if c not in pk]
            sets = ", ".join(f"{c}=EXCLUDED.{c}" for c in rest)
            body += f" ON CONFLICT ({', '.join(pk)}) " + (f"DO UPDATE SET {sets}" if sets else "DO NOTHING")
        if pk == ["id"] and "RETURNING" not in body.upper():
            t = metadata.tables[table]
            if t.c.id.autoincrement in (True, "auto") and t.c.id.type.python_type is int:
                body += " RETURNING id"
                returns_id = True
        sql = body
    if _ROWID.search(sql):
        fm = _FROM.search(sql)
        pk = _pk(fm.group(1)) if fm else []
        sql = _ROWID.sub("ORDER BY " + (", ".join(pk) if pk else "ctid"), sql)
    return _placeholders(sql), returns_id


class Cursor:
    def __init__(self, conn: PgConnection):
        self._conn = conn
        self._cur = conn.raw.cursor()
        self.lastrowid: int | None = None
        self._returns_id = False
        self._index: dict[str, int] | None = None

    @property
    def description(self):
        return self._cur.description

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    def _row(self, values) -> Row | None:
        if values is None:
            return None
        if self._index is None:
            self._index = {d.name: i for i, d in enumerate(self._cur.description or ())}
        return Row(values, self._index)

    def execute(self, sql: str, params: Sequence | dict = ()) -> Cursor:
        q, self._returns_id = translate(sql)
        self._index = None
        self._cur.execute(q, tuple(params) if not isinstance(params, dict) else params)
        self.lastrowid = None
        if self._returns_id:
            row = self._cur.fetchone()
            self.lastrowid = int(row[0]) if row else None
        return self

    def executemany(self, sql: str, seq: Iterable[Sequence]) -> Cursor:
        q, _ = translate(sql)
        q = re.sub(r"\s+RETURNING id$", "", q)
        self._index = None
        self._cur.executemany(q, [tuple(p) for p in seq])
        return self

    def fetchone(self) -> Row | None:
        if self._returns_id or self._cur.description is None:
            return None
        return self._row(self._cur.fetchone())

    def fetchmany(self, size: int = 100) -> list[Row]:
        if self._returns_id or self._cur.description is None:
            return []
        return [self._row(r) for r in self._cur.fetchmany(size)]

    def fetchall(self) -> list[Row]:
        if self._returns_id or self._cur.description is None:
            return []
        return [self._row(r) for r in self._cur.fetchall()]

    def __iter__(self):
        return iter(self.fetchall())

    def close(self) -> None:
        self._cur.close()


class PgConnection:
    """What ``Store.conn`` is on PostgreSQL (see the module's docstring)."""

    def __init__(self, conninfo: str):
        import psycopg

        self.raw = psycopg.connect(conninfo, autocommit=True)
        self.row_factory = None  # accepted and ignored: rows are always readable by name

    def cursor(self) -> Cursor:
        return Cursor(self)

    def execute(self, sql: str, params: Sequence | dict = ()) -> Cursor:
        return Cursor(self).execute(sql, params)

    def executemany(self, sql: str, seq) -> Cursor:
        return Cursor(self).executemany(sql, seq)

    def executescript(self, script: str) -> None:
        self.raw.execute(script)

    @property
    def in_transaction(self) -> bool:
        import psycopg

        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def commit(self) -> None:
        if self.in_transaction:
            self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if self.in_transaction:
            self.raw.execute("ROLLBACK")

    def close(self) -> None:
        self.raw.close()
