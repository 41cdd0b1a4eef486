import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traincast.errors import ConfigError, DataError
from traincast.store import Store, default_db, default_db_path, schema_modules
from traincast.store.migrations import HEAD, MIGRATIONS
from traincast.store.schema import metadata

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_open_creates_folders_tables_and_wal(tmp_path):
    path = tmp_path / "a" / "b" / "t.db"
    with Store(path) as s:
        assert path.exists()
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert s.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
        tables = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"traincast_schema", "online_jobs", "online_steps", "online_events"} <= tables
        assert s.schema_version() == HEAD


def test_every_table_of_every_schema_module_is_created(tmp_path):
    pkg = Path(__import__("traincast.store", fromlist=["x"]).__file__).parent
    on_disk = {p.stem for p in pkg.glob("schema_*.py")}
    mods = schema_modules()
    assert {m.__name__.rsplit(".", 1)[1] for m in mods} == on_disk
    with Store(tmp_path / "t.db") as s:
        tables = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert set(metadata.tables) <= tables
    assert {"data_op_timings", "measure_layer_samples", "measure_ddp_timings", "online_steps"} <= set(metadata.tables)


def test_reopen_is_idempotent(tmp_path):
    p = tmp_path / "t.db"
    Store(p).close()
    with Store(p) as s:
        assert s.schema_version() == HEAD
        assert [r[0] for r in s.conn.execute("SELECT version FROM traincast_schema ORDER BY version")] == \
            [m.version for m in MIGRATIONS]


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
        assert s.schema_version() == HEAD


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


# --- migrations -----------------------------------------------------------------------------------
# the online tables as traincast wrote them before versioned migrations (schema_online VERSION 1)
LEGACY = """
CREATE TABLE schema_versions (module TEXT PRIMARY KEY, version INTEGER NOT NULL, applied_s REAL NOT NULL);
INSERT INTO schema_versions VALUES ('schema_online', 1, 0);
CREATE TABLE online_jobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, model TEXT, hardware TEXT,
    batch_size INTEGER, total_steps INTEGER, total_epochs INTEGER, steps_per_epoch INTEGER,
    price_usd_per_hour REAL, source TEXT, created_s REAL NOT NULL, updated_s REAL NOT NULL);
CREATE TABLE online_steps (job_id INTEGER NOT NULL REFERENCES online_jobs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL, time_s REAL, loss REAL, metric REAL, epoch REAL, PRIMARY KEY (job_id, step));
CREATE TABLE online_events (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES online_jobs(id)
    ON DELETE CASCADE, kind TEXT NOT NULL, step INTEGER NOT NULL, time_s REAL, value REAL);
INSERT INTO online_jobs VALUES (1, 'old', 'resnet50', NULL, 64, 100, NULL, NULL, 3.0, 'track', 0, 0);
INSERT INTO online_steps VALUES (1, 0, 10.0, NULL, NULL, 0), (1, 1, 11.0, 2.5, NULL, 0);
INSERT INTO online_events(job_id, kind, step, time_s, value) VALUES (1, 'epoch_end', 1, 11.5, NULL),
    (1, 'epoch_end', 1, 11.5, NULL), (1, 'eval_end', 1, 12.0, 0.9);
"""


def test_a_database_from_before_migrations_is_adopted_and_upgraded(tmp_path):
    from traincast.online import get_job, load_series

    db = tmp_path / "old.db"
    c = sqlite3.connect(db)
    c.executescript(LEGACY)
    c.close()
    with Store(db) as s:
        assert s.schema_version() == HEAD
        s_ = load_series(s, "old")
        assert list(s_.steps) == [0, 1] and s_.loss[1] == 2.5
        # migration 2 removed the duplicated event and now refuses a second copy
        assert [e.kind for e in s_.events] == ["epoch_end", "eval_end"]
        assert get_job(s, "old").price_usd_per_hour == 3.0
        with pytest.raises(sqlite3.IntegrityError):
            s.conn.execute("INSERT INTO online_events(job_id, kind, step, time_s) VALUES (1, 'epoch_end', 1, 11.5)")
        tables = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "measure_model_timings" in tables  # tables the old file lacked are created
        # migration 3 gave the old steps a learning-rate column (unknown for them)
        assert "learning_rate" in {r[1] for r in s.conn.execute("PRAGMA table_info(online_steps)")}
        assert s_.lr is None


def test_a_database_newer_than_this_traincast_is_refused(tmp_path):
    db = tmp_path / "new.db"
    Store(db).close()
    c = sqlite3.connect(db)
    c.execute("INSERT INTO traincast_schema VALUES (?, 'from the future', 0)", (HEAD + 1,))
    c.commit()
    c.close()
    with pytest.raises(DataError, match=f"version {HEAD + 1}, newer"):
        Store(db)


def test_two_processes_creating_one_database_at_once(tmp_path):
    db = tmp_path / "race.db"
    # each process imports first and then waits for one shared instant, so that all open the new
    # file together: SQLite refuses a concurrent switch to WAL at once, whatever the busy timeout
    code = ("import sys, time; from traincast.store import Store\n"
            "while time.time() < float(sys.argv[2]): time.sleep(0.001)\n"
            "Store(sys.argv[1]).close()")
    env = {**os.environ, "PYTHONPATH": SRC}
    start = time.time() + 4
    procs = [subprocess.Popen([sys.executable, "-c", code, str(db), str(start)], env=env, stderr=subprocess.PIPE,
                              text=True) for _ in range(6)]
    errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errs
    with Store(db) as s:
        assert [r[0] for r in s.conn.execute("SELECT version FROM traincast_schema ORDER BY version")] == \
            [m.version for m in MIGRATIONS]


def test_urls_and_the_default_database(tmp_path, monkeypatch):
    with Store(f"sqlite:///{tmp_path / 'u.db'}") as s:
        assert s.dialect == "sqlite" and s.path == tmp_path / "u.db"
    monkeypatch.setenv("TRAINCAST_DB", "postgresql://someone@127.0.0.1:1/x")
    assert default_db() == "postgresql://someone@127.0.0.1:1/x"
    with pytest.raises(DataError, match="cannot open the database 'postgresql://someone@127.0.0.1:1/x'"):
        Store()
    with pytest.raises(ConfigError, match="database URL"):
        Store("postgresql://host:notaport/x")


# --- PostgreSQL: one schema, the same code -------------------------------------------------------
def test_postgres_gets_the_same_tables_and_versions(pg_url):
    from sqlalchemy import inspect

    with Store(pg_url) as s:
        assert s.dialect == "postgresql" and s.schema_version() == HEAD
        with s.read() as c:
            tables = set(inspect(c).get_table_names())
            cols = {c_["name"]: c_["type"] for c_ in inspect(c).get_columns("online_steps")}
        assert set(metadata.tables) <= tables
        assert str(cols["time_s"]) == "DOUBLE PRECISION"  # not float4: Unix times keep their milliseconds
    with Store(pg_url, must_exist=True) as s:  # reopening applies nothing
        assert s.conn.execute("SELECT COUNT(*) FROM traincast_schema").fetchone()[0] == len(MIGRATIONS)


def test_a_postgres_database_without_traincast_tables_is_refused_to_readers(pg_url):
    with pytest.raises(DataError, match="no traincast tables"):
        Store(pg_url, must_exist=True)


def test_online_jobs_roundtrip_on_postgres_and_sqlite_agree(pg_url, tmp_path):
    from traincast.online import get_job, list_jobs, load_series, track

    class Clock:
        t = 1.7e9  # a Unix time: float4 would round it to 128 s

        def __call__(self):
            return self.t

    out = {}
    for name, target in (("pg", pg_url), ("sqlite", tmp_path / "t.db")):
        clock = Clock()
        with Store(target) as store:
            with track("job-1", 50, store=store, clock=clock, model="resnet18", price_usd_per_hour=2.5) as t:
                for i in range(1, 51):
                    clock.t += 0.25
                    t.step(loss=1.0 / i)
                    if i == 25:
                        t.epoch_end()
                t.update(50, metric=0.75)
            s = load_series(store, "job-1")
            (info, n_rows, last), = list_jobs(store)
            def nan_free(a):
                return [None if x != x else float(x) for x in a]

            out[name] = (nan_free(s.steps), nan_free(s.time_s), nan_free(s.loss), [e.kind for e in s.events], n_rows,
                         last, get_job(store, "job-1").price_usd_per_hour, s.metric[-1])
    assert out["pg"] == out["sqlite"]
    steps, times, *_ = out["pg"]
    assert steps == list(range(51)) and times[1] - times[0] == 0.25


def test_measure_code_written_for_sqlite3_runs_on_postgres(pg_url):
    """measure/ calls store.conn with sqlite's SQL (INSERT OR REPLACE/IGNORE, ORDER BY rowid, lastrowid)."""
    from traincast.measure import CampaignConfig, load_samples, run_campaign
    from traincast.measure.timing import TimingPolicy

    fast = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, budget_s=0.1)
    cfg = CampaignConfig(ops=("relu", "add"), n_samples=4, seed=3, policy=fast, threads=1)
    with Store(pg_url) as s:
        first = run_campaign(s.conn, cfg, max_new=2)
        again = run_campaign(s.conn, cfg)  # resumes: the INSERT OR REPLACE upsert and the done-rows read
        assert (first.n_new, again.n_before, again.n_new, again.n_total) == (2, 2, 2, 4)
        rows = load_samples(s.conn, again.campaign_id)
        assert [r["idx"] for r in rows] == [0, 1, 2, 3] and all(r["median_ms"] > 0 for r in rows)
        n_fp = s.conn.execute("SELECT COUNT(*) FROM measure_fingerprints").fetchone()[0]
        assert n_fp == 1  # INSERT OR IGNORE: the second campaign run did not add a copy
        cur = s.conn.execute("INSERT INTO online_jobs(name, created_s, updated_s) VALUES (?, ?, ?)", ("x", 0, 0))
        assert cur.lastrowid == s.conn.execute("SELECT id FROM online_jobs WHERE name='x'").fetchone()["id"]
        with pytest.raises(Exception):
            with s.transaction() as c:
                c.execute("INSERT INTO online_jobs(name, created_s, updated_s) VALUES ('y', 0, 0)")
                raise RuntimeError
        assert s.conn.execute("SELECT COUNT(*) FROM online_jobs WHERE name='y'").fetchone()[0] == 0


def test_the_sqlite_to_postgres_rewrites():
    from traincast.store.compat import translate

    assert translate("SELECT * FROM t WHERE a = ? AND b LIKE '%?%'") == \
        ("SELECT * FROM t WHERE a = %s AND b LIKE '%%?%%'", False)
    q, ret = translate("INSERT OR IGNORE INTO measure_fingerprints (id, device, created_s) VALUES (?, ?, ?)")
    assert q.endswith("VALUES (%s, %s, %s) ON CONFLICT DO NOTHING") and not ret
    q, _ = translate("INSERT OR REPLACE INTO data_imports(file, source, gpu) VALUES (?,?,?)")
    assert q.endswith("ON CONFLICT (file) DO UPDATE SET source=EXCLUDED.source, gpu=EXCLUDED.gpu")
    q, ret = translate("INSERT INTO measure_model_timings (model) VALUES (?)")
    assert q.endswith("RETURNING id") and ret
    assert translate("SELECT * FROM measure_layer_samples WHERE op = ? ORDER BY rowid")[0].endswith(
        "ORDER BY campaign_id, idx")
