"""SQLite store: one file, WAL mode, safe for one writer and many readers.

Every module ``traincast.store.schema_<name>`` exposes ``SCHEMA`` (DDL made of
``CREATE ... IF NOT EXISTS`` statements) and ``VERSION``; ``Store`` discovers
them with pkgutil and applies them on open, recording the versions in
``schema_versions``. The connection is in autocommit mode: each statement
outside ``Store.transaction()`` commits on its own, so a writer killed with
SIGKILL loses at most the row (or small batch) in flight.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from traincast.errors import ConfigError, DataError

BUSY_TIMEOUT_MS = 30_000

_VERSIONS_DDL = """
CREATE TABLE IF NOT EXISTS schema_versions (
    module TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    applied_s REAL NOT NULL
);
"""


def default_db_path() -> Path:
    """``$TRAINCAST_DB``, else ``traincast.db`` in ``$TRAINCAST_HOME``, else in
    ``$XDG_DATA_HOME/traincast`` (``~/.local/share/traincast``): the folder of saved profiles and adaptations."""
    env = os.environ.get("TRAINCAST_DB")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("TRAINCAST_HOME")
    if home:
        return Path(home).expanduser() / "traincast.db"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "traincast" / "traincast.db"


def schema_modules() -> list[ModuleType]:
    """All ``traincast.store.schema_*`` modules, sorted by name."""
    import traincast.store as pkg

    mods = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("schema_"):
            mods.append(importlib.import_module(f"traincast.store.{info.name}"))
    return mods


class Store:
    """An open traincast database.

    ``Store(path)`` opens ``path`` (``":memory:"`` for a throw-away one; default
    from :func:`default_db_path`), creating parent folders and all tables. ``must_exist``: for commands that
    only read, a missing file is a DataError instead of a new, empty database.
    """

    def __init__(self, path: str | Path | None = None, must_exist: bool = False):
        if path is None:
            path = default_db_path()
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
        try:
            self.conn = sqlite3.connect(
                str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            if self.path != ":memory:":
                self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self._apply_schemas()
        except sqlite3.DatabaseError as exc:
            raise DataError(f"cannot open the database {str(self.path)!r}: {exc}; give a traincast SQLite file or a new path") from None

    def _apply_schemas(self) -> None:
        self.conn.executescript(_VERSIONS_DDL)
        for mod in schema_modules():
            name = mod.__name__.rsplit(".", 1)[-1]
            version = int(getattr(mod, "VERSION", 1))
            # the DDL is idempotent (IF NOT EXISTS): apply it every time, so that a table added to a
            # module without a version bump still appears in older databases
            self.conn.executescript(mod.SCHEMA)
            row = self.conn.execute("SELECT version FROM schema_versions WHERE module=?", (name,)).fetchone()
            if row is not None and row[0] == version:
                continue
            self.conn.execute(
                "INSERT INTO schema_versions(module, version, applied_s) VALUES (?,?,?) "
                "ON CONFLICT(module) DO UPDATE SET version=excluded.version, applied_s=excluded.applied_s",
                (name, version, time.time()),
            )

    def schema_versions(self) -> dict[str, int]:
        return {r["module"]: r["version"] for r in self.conn.execute("SELECT module, version FROM schema_versions")}

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on an exception)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"
