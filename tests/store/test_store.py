import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traincast.errors import ConfigError, DataError
from traincast.store import Store, default_db_path, schema_modules

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_open_creates_folders_tables_and_wal(tmp_path):
    path = tmp_path / "a" / "b" / "t.db"
    with Store(path) as s:
        assert path.exists()
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert s.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
        tables = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"schema_versions", "online_jobs", "online_steps", "online_events"} <= tables
        assert s.schema_versions()["schema_online"] == 1


def test_every_schema_module_in_the_package_is_discovered(tmp_path):
    pkg = Path(__import__("traincast.store", fromlist=["x"]).__file__).parent
    on_disk = {p.stem for p in pkg.glob("schema_*.py")}
    assert {m.__name__.rsplit(".", 1)[1] for m in schema_modules()} == on_disk
    with Store(tmp_path / "t.db") as s:
        assert set(s.schema_versions()) == on_disk
        for m in schema_modules():
            assert hasattr(m, "SCHEMA") and isinstance(m.VERSION, int)


def test_reopen_is_idempotent(tmp_path):
    p = tmp_path / "t.db"
    Store(p).close()
    with Store(p) as s:
        assert s.schema_versions()["schema_online"] == 1


def test_default_path_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINCAST_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"
    monkeypatch.delenv("TRAINCAST_DB")
    monkeypatch.setenv("TRAINCAST_HOME", str(tmp_path / "home"))  # where profiles and adaptations go
    assert default_db_path() == tmp_path / "home" / "traincast.db"
    monkeypatch.delenv("TRAINCAST_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "traincast" / "traincast.db"
    with Store() as s:
        assert Path(s.path).exists()


def test_a_reader_does_not_create_a_missing_database(tmp_path):
    with pytest.raises(DataError, match="no traincast database at"):
        Store(tmp_path / "typo.db", must_exist=True)
    assert not (tmp_path / "typo.db").exists()
    Store(tmp_path / "real.db").close()
    with Store(tmp_path / "real.db", must_exist=True) as s:
        assert s.schema_versions()


def test_bad_paths_are_user_errors(tmp_path):
    with pytest.raises(ConfigError, match="folder"):
        Store(tmp_path)
    bad = tmp_path / "junk.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(DataError, match="cannot open"):
        Store(bad)


def test_transaction_rolls_back(tmp_path):
    with Store(tmp_path / "t.db") as s:
        s.conn.execute("INSERT INTO online_jobs(name, created_s, updated_s) VALUES ('a', 0, 0)")
        with pytest.raises(RuntimeError):
            with s.transaction() as c:
                c.execute("INSERT INTO online_jobs(name, created_s, updated_s) VALUES ('b', 0, 0)")
                raise RuntimeError
        assert [r[0] for r in s.conn.execute("SELECT name FROM online_jobs")] == ["a"]


WRITER = r"""
import sys, time
from traincast.online import track
with track(job="killme", total_steps=10**9, store=sys.argv[1]) as t:
    i = 0
    while True:
        i = t.step(loss=1.0 / (i + 1))
        print(i, flush=True)   # printed after the row was committed
"""


def test_writer_killed_mid_stream_loses_at_most_one_row(tmp_path):
    db = tmp_path / "t.db"
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True, env=env)
    acked = 0
    reads = 0
    deadline = time.time() + 30
    reader = None
    try:
        while acked < 300 and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
            if acked >= 20 and reader is None:
                reader = sqlite3.connect(str(db), timeout=5)
            if reader is not None and acked % 20 == 0:  # a reader while the writer writes (WAL)
                n = reader.execute("SELECT COUNT(*) FROM online_steps").fetchone()[0]
                assert n >= acked  # committed rows are visible
                reads += 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    for line in proc.stdout:  # acknowledgements still in the pipe
        if line.strip():
            acked = int(line)
    assert acked >= 300 and reads > 5
    with Store(db) as s:
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        n_steps = s.conn.execute("SELECT MAX(step) FROM online_steps").fetchone()[0]
    # every acknowledged step is there; at most the one in flight beyond it
    assert acked <= n_steps <= acked + 1
