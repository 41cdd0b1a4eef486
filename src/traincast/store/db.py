"""The traincast database: SQLite embedded by default, PostgreSQL for a team.

``Store(target)`` opens a SQLite file (the default: ``traincast.db`` under
``$TRAINCAST_HOME``), ``":memory:"``, or a database URL (``postgresql://user@host/db``,
``sqlite:///path``), and brings its schema to the head version
(:mod:`traincast.store.migrations`). The tables are SQLAlchemy Core tables in
the ``schema_*`` modules of this package, one definition for both databases.

Two ways in:

- ``store.read()`` / ``store.write()``: SQLAlchemy connections from a pool, for
  code that must run on both databases and from many threads (the server,
  ``traincast.online.jobs``). ``write()`` is one transaction (``BEGIN
  IMMEDIATE`` on SQLite, where in-process writers also take a lock so that they
  queue instead of spinning on SQLite's busy handler).
- ``store.conn``: a ``sqlite3.Connection`` in autocommit mode on SQLite (each
  statement outside ``store.transaction()`` commits on its own, so a writer
  killed with SIGKILL loses at most the row in flight), and a sqlite3-like
  wrapper on PostgreSQL (:mod:`traincast.store.compat`), for code written
  against sqlite3.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from sqlalchemy import create_engine, event, inspect
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.pool import StaticPool

from traincast.errors import ConfigError, DataError
from traincast.store import migrations

BUSY_TIMEOUT_MS = 30_000
URL_SCHEMES = ("postgresql", "postgres", "sqlite")


def default_db_path() -> Path:
    """``$TRAINCAST_DB``, else ``traincast.db`` in ``$TRAINCAST_HOME``, else in
    ``$XDG_DATA_HOME/traincast`` (``~/.local/share/traincast``): the folder of saved profiles and adaptations."""
    env = os.environ.get("TRAINCAST_DB")
    if env and not is_url(env):
        return Path(env).expanduser()
    home = os.environ.get("TRAINCAST_HOME")
    if home:
        return Path(home).expanduser() / "traincast.db"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "traincast" / "traincast.db"


def default_db() -> str | Path:
    """The default database: ``$TRAINCAST_DB`` when it is a URL, else :func:`default_db_path`."""
    env = os.environ.get("TRAINCAST_DB")
    return env if env and is_url(env) else default_db_path()


def is_url(target) -> bool:
    s = str(target)
    return "://" in s and s.split("://", 1)[0].split("+", 1)[0].lower() in URL_SCHEMES


_loaded = False


def schema_modules() -> list[ModuleType]:
    """All ``traincast.store.schema_*`` modules, sorted by name (each adds its tables to ``schema.metadata``)."""
    import traincast.store as pkg

    mods = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("schema_"):
            mods.append(importlib.import_module(f"traincast.store.{info.name}"))
    return mods


def load_schema_modules() -> None:
    global _loaded
    if not _loaded:
        schema_modules()
        _loaded = True


def _sqlite_connect(path: str, row_factory: bool) -> sqlite3.Connection:
    c = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    if row_factory:
        c.row_factory = sqlite3.Row
    c.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    if path != ":memory:":
        _set_wal(c)
    c.execute("PRAGMA synchronous=NORMAL")
    c.execute("PRAGMA foreign_keys=ON")
    return c


def _set_wal(c: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode=WAL``, retried while another connection holds the lock it needs.

    SQLite answers this pragma "database is locked" at once, without its busy handler, when
    another process is switching the same new file to WAL (several writers creating one
    database together); so it is retried here, with backoff, for up to the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    wait = 0.005
    while True:
        try:
            c.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + wait > deadline:
                raise
        time.sleep(wait)
        wait = min(wait * 2, 0.25)


def _mask(url) -> str:
    return url.render_as_string(hide_password=True)


class Store:
    """An open traincast database.

    ``Store(target)``: a SQLite file path (parent folders are created), ``":memory:"``, or a URL
    (``postgresql://user:password@host:port/db``; ``sqlite:///path``). Default from :func:`default_db`.
    ``must_exist``: for commands that only read, a missing database is a DataError instead of a new,
    empty one.
    """

    def __init__(self, path: str | Path | None = None, must_exist: bool = False, pool_size: int = 5):
        if path is None:
            path = default_db()
        self.url = None
        if is_url(path):
            try:
                url = make_url(str(path))
            except (ArgumentError, ValueError):
                raise ConfigError(f"cannot read the database URL {str(path)!r}; e.g. postgresql://user@localhost/traincast") from None
            if url.get_backend_name() == "sqlite":
                path = url.database or ":memory:"
            else:
                self.url = url
        self._write_lock = threading.RLock()
        self._conn = None
        if self.url is not None:
            self._open_postgres(must_exist, pool_size)
        else:
            self._open_sqlite(path, must_exist, pool_size)

    # ----------------------------------------------------------------- opening
    def _open_sqlite(self, path, must_exist: bool, pool_size: int) -> None:
        self.dialect = "sqlite"
        self.path = path if str(path) == ":memory:" else Path(path).expanduser()
        if must_exist and isinstance(self.path, Path) and not self.path.exists():
            raise DataError(f"no traincast database at {str(self.path)!r} (give --db, or set $TRAINCAST_DB); "
                            "`traincast data import`, `bench` and `ingest` write one")
        if isinstance(self.path, Path):
            if self.path.exists() and self.path.is_dir():
                raise ConfigError(f"database path {str(self.path)!r} is a folder; give a file path such as {str(self.path / 'traincast.db')!r}")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot create the folder for the database {str(self.path)!r}: {exc.strerror}") from None
        where = str(self.path)
        try:
            self._conn = _sqlite_connect(where, row_factory=True)
            if where == ":memory:":  # one connection, shared by the engine
                self.engine = create_engine("sqlite://", creator=lambda: self._conn, poolclass=StaticPool)
            else:
                self.engine = create_engine(f"sqlite:///{where}", creator=lambda: _sqlite_connect(where, False),
                                            pool_size=pool_size, max_overflow=2 * pool_size)

            @event.listens_for(self.engine, "begin")
            def _begin(conn):  # sqlite3 in autocommit mode: SQLAlchemy's transactions begin here
                conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("traincast_write")
                                     else "BEGIN")

            self._migrate()
        except (sqlite3.DatabaseError, DBAPIError) as exc:
            msg = getattr(exc, "orig", exc)
            raise DataError(f"cannot open the database {where!r}: {msg}; give a traincast SQLite file or a new path") from None

    def _open_postgres(self, must_exist: bool, pool_size: int) -> None:
        self.dialect = "postgresql"
        url = self.url.set(drivername="postgresql+psycopg")
        self.path = _mask(url.set(drivername="postgresql"))
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise ConfigError("a PostgreSQL store needs psycopg: pip install 'traincast[serve]'") from None
        self.engine = create_engine(url, pool_size=pool_size, max_overflow=2 * pool_size, pool_pre_ping=True)
        try:
            if must_exist:
                with self.engine.connect() as c:
                    if not inspect(c).has_table("traincast_schema"):
                        raise DataError(f"no traincast database at {self.path!r}: it has no traincast tables "
                                        "(a writer such as `traincast serve` creates them)")
            self._migrate()
        except OperationalError as exc:
            first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise DataError(f"cannot open the database {self.path!r}: {first}") from None

    def _migrate(self) -> None:
        with self.engine.connect() as c:
            if migrations.current_version(c) == migrations.HEAD:
                return
        with self.write() as c:
            migrations.upgrade(c)

    # ----------------------------------------------------------------- access
    @property
    def conn(self):
        """A sqlite3 connection (SQLite) or a sqlite3-like one (PostgreSQL), autocommit."""
        if self._conn is None:
            from traincast.store.compat import PgConnection

            self._conn = PgConnection(self._conninfo)
        return self._conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A SQLAlchemy connection for reading (one transaction, so one consistent snapshot)."""
        with self.engine.connect() as c, c.begin():
            yield c

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A SQLAlchemy connection in one write transaction, committed at the end (rolled back on an exception)."""
        if self.dialect == "sqlite":
            with self._write_lock, self.engine.connect() as c:
                c = c.execution_options(traincast_write=True)
                with c.begin():
                    yield c
        else:
            with self.engine.begin() as c:
                yield c

    def schema_version(self) -> int:
        with self.engine.connect() as c:
            return migrations.current_version(c)

    def schema_versions(self) -> dict[str, int]:
        """``{"traincast": version}`` (kept for callers of the old per-module versions)."""
        return {"traincast": self.schema_version()}

    @contextmanager
    def transaction(self) -> Iterator:
        """``BEGIN`` ... ``COMMIT`` on :attr:`conn` (rolled back on an exception)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE" if self.dialect == "sqlite" else "BEGIN")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"
