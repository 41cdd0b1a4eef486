"""Jobs, steps and events in the store (tables of ``schema_online``)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from traincast.errors import ConfigError, UnknownNameError
from traincast.online.records import EVENT_KINDS, Event, JobInfo, JobSeries, StepRecord
from traincast.store import Store

_JOB_FIELDS = (
    "model",
    "hardware",
    "batch_size",
    "total_steps",
    "total_epochs",
    "steps_per_epoch",
    "price_usd_per_hour",
    "source",
)


def _job_from_row(row) -> JobInfo:
    return JobInfo(
        name=row["name"],
        **{k: row[k] for k in _JOB_FIELDS},
        created_s=row["created_s"],
        updated_s=row["updated_s"],
    )


def upsert_job(store: Store, name: str, **meta) -> int:
    """Create job ``name`` or update the metadata given (None leaves a field as is); return its id."""
    if not name or not str(name).strip():
        raise ConfigError("a job needs a non-empty name, e.g. job='resnet50-run1'")
    bad = set(meta) - set(_JOB_FIELDS)
    if bad:
        raise ConfigError(f"unknown job field(s) {sorted(bad)}; known: {', '.join(_JOB_FIELDS)}")
    now = time.time()
    row = store.conn.execute("SELECT id FROM online_jobs WHERE name=?", (name,)).fetchone()
    given = {k: v for k, v in meta.items() if v is not None}
    if row is None:
        cols = ["name", "created_s", "updated_s", *given]
        cur = store.conn.execute(
            f"INSERT INTO online_jobs({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            (name, now, now, *given.values()),
        )
        return int(cur.lastrowid)
    if given:
        sets = ", ".join(f"{k}=?" for k in given)
        store.conn.execute(f"UPDATE online_jobs SET {sets}, updated_s=? WHERE id=?", (*given.values(), now, row["id"]))
    return int(row["id"])


def job_id(store: Store, name: str) -> int:
    row = store.conn.execute("SELECT id FROM online_jobs WHERE name=?", (name,)).fetchone()
    if row is None:
        raise UnknownNameError("job", name, list_job_names(store))
    return int(row["id"])


def list_job_names(store: Store) -> list[str]:
    return [r[0] for r in store.conn.execute("SELECT name FROM online_jobs ORDER BY name")]


def get_job(store: Store, name: str) -> JobInfo:
    row = store.conn.execute("SELECT * FROM online_jobs WHERE name=?", (name,)).fetchone()
    if row is None:
        raise UnknownNameError("job", name, list_job_names(store))
    return _job_from_row(row)


def list_jobs(store: Store) -> list[tuple[JobInfo, int, int | None]]:
    """Each job with its number of step records and last step."""
    rows = store.conn.execute(
        "SELECT j.*, (SELECT COUNT(*) FROM online_steps s WHERE s.job_id=j.id) AS n_rows, "
        "(SELECT MAX(step) FROM online_steps s WHERE s.job_id=j.id) AS last_step "
        "FROM online_jobs j ORDER BY j.updated_s DESC"
    ).fetchall()
    return [(_job_from_row(r), int(r["n_rows"]), r["last_step"]) for r in rows]


def delete_job(store: Store, name: str) -> None:
    jid = job_id(store, name)
    store.conn.execute("DELETE FROM online_jobs WHERE id=?", (jid,))


_STEP_SQL = (
    "INSERT INTO online_steps(job_id, step, time_s, loss, metric, epoch) VALUES (?,?,?,?,?,?) "
    "ON CONFLICT(job_id, step) DO UPDATE SET time_s=excluded.time_s, loss=excluded.loss, "
    "metric=excluded.metric, epoch=excluded.epoch"
)


def _step_row(jid: int, r: StepRecord):
    return (jid, int(r.step), r.time_s, r.loss, r.metric, r.epoch)


def add_step(store: Store, jid: int, record: StepRecord) -> None:
    """Insert one step and commit it (autocommit)."""
    store.conn.execute(_STEP_SQL, _step_row(jid, record))


def add_steps(store: Store, jid: int, records: Iterable[StepRecord], batch: int = 500) -> int:
    """Insert many steps, committing every ``batch`` rows; return how many."""
    n = 0
    buf = []
    for r in records:
        buf.append(_step_row(jid, r))
        if len(buf) >= batch:
            with store.transaction() as c:
                c.executemany(_STEP_SQL, buf)
            n += len(buf)
            buf = []
    if buf:
        with store.transaction() as c:
            c.executemany(_STEP_SQL, buf)
        n += len(buf)
    store.conn.execute("UPDATE online_jobs SET updated_s=? WHERE id=?", (time.time(), jid))
    return n


def add_event(store: Store, jid: int, event: Event) -> None:
    if event.kind not in EVENT_KINDS:
        raise ConfigError(f"unknown event kind {event.kind!r}; known: {', '.join(EVENT_KINDS)}")
    store.conn.execute(
        "INSERT INTO online_events(job_id, kind, step, time_s, value) VALUES (?,?,?,?,?)",
        (jid, event.kind, int(event.step), event.time_s, event.value),
    )


def add_events(store: Store, jid: int, events: Iterable[Event]) -> None:
    for e in events:
        add_event(store, jid, e)


def load_series(store: Store, name: str) -> JobSeries:
    """A job's steps and events as a :class:`JobSeries`."""
    info = get_job(store, name)
    jid = job_id(store, name)
    recs = [
        StepRecord(r["step"], r["time_s"], r["loss"], r["metric"], r["epoch"])
        for r in store.conn.execute(
            "SELECT step, time_s, loss, metric, epoch FROM online_steps WHERE job_id=? ORDER BY step", (jid,)
        )
    ]
    evs = [
        Event(r["kind"], r["step"], r["time_s"], r["value"])
        for r in store.conn.execute(
            "SELECT kind, step, time_s, value FROM online_events WHERE job_id=? ORDER BY step, id", (jid,)
        )
    ]
    return JobSeries.from_records(recs, evs, info.planned_steps, info.steps_per_epoch, name=name)


def save_parsed(store: Store, name: str, parsed, replace: bool = True, **meta) -> int:
    """Store a parsed log as job ``name`` (replacing its steps when ``replace``)."""
    if meta.get("total_steps") is None:
        meta["total_steps"] = parsed.total_steps
    if meta.get("steps_per_epoch") is None:
        meta["steps_per_epoch"] = parsed.steps_per_epoch
    jid = upsert_job(store, name, **meta)
    if replace:
        with store.transaction() as c:
            c.execute("DELETE FROM online_steps WHERE job_id=?", (jid,))
            c.execute("DELETE FROM online_events WHERE job_id=?", (jid,))
    add_steps(store, jid, parsed.records)
    with store.transaction():
        add_events(store, jid, parsed.events)
    return jid
