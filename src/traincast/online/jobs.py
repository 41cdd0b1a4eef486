"""Jobs, steps and events in the store (tables of ``traincast.store.schema_online``).

SQLAlchemy Core on ``store.write()`` / ``store.read()``, so the same code runs on the
embedded SQLite file and on a team's PostgreSQL, from many threads of the server.
A step written twice is merged: a value given replaces the stored one, a value left
out (None) keeps it; so a loss attached after the step (``Tracker.update``) and a
batch resent after a lost answer are both safe. An event is stored once per
(job, kind, step, time).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection

from traincast.errors import ConfigError, UnknownNameError
from traincast.online.records import EVENT_KINDS, Event, JobInfo, JobSeries, StepRecord
from traincast.store import Store
from traincast.store.schema_online import online_events, online_jobs, online_steps

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
STEP_FIELDS = ("time_s", "loss", "metric", "epoch", "learning_rate")


def _insert(conn: Connection, table):
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def _job_from_row(row) -> JobInfo:
    m = row._mapping
    return JobInfo(name=m["name"], **{k: m[k] for k in _JOB_FIELDS}, created_s=m["created_s"], updated_s=m["updated_s"])


def _check_meta(name: str, meta: dict) -> dict:
    if not name or not str(name).strip():
        raise ConfigError("a job needs a non-empty name, e.g. job='resnet50-run1'")
    bad = set(meta) - set(_JOB_FIELDS)
    if bad:
        raise ConfigError(f"unknown job field(s) {sorted(bad)}; known: {', '.join(_JOB_FIELDS)}")
    return {k: v for k, v in meta.items() if v is not None}


def ensure_job(conn: Connection, name: str, **meta) -> int:
    """Inside a write transaction: create job ``name`` or update the metadata given; return its id."""
    given = _check_meta(name, meta)
    now = time.time()
    conn.execute(_insert(conn, online_jobs).values(name=name, created_s=now, updated_s=now, **given)
                 .on_conflict_do_nothing(index_elements=["name"]))
    jid = conn.execute(select(online_jobs.c.id).where(online_jobs.c.name == name)).scalar_one()
    if given:
        conn.execute(update(online_jobs).where(online_jobs.c.id == jid).values(**given, updated_s=now))
    return int(jid)


def upsert_job(store: Store, name: str, **meta) -> int:
    """Create job ``name`` or update the metadata given (None leaves a field as is); return its id."""
    _check_meta(name, meta)
    with store.write() as c:
        return ensure_job(c, name, **meta)


def _job_id(conn: Connection, name: str) -> int | None:
    return conn.execute(select(online_jobs.c.id).where(online_jobs.c.name == name)).scalar()


def stamp(store: Store, name: str) -> tuple | None:
    """(updated_s, last step, step rows) of job ``name``, None when there is no such job: it changes whenever
    the job gets a step (a cheap key for caches of what is computed from its steps)."""
    j, st = online_jobs, online_steps
    with store.read() as c:
        row = c.execute(select(j.c.updated_s, func.max(st.c.step), func.count(st.c.step))
                        .select_from(j.outerjoin(st, st.c.job_id == j.c.id)).where(j.c.name == name)
                        .group_by(j.c.id)).first()
    return None if row is None else tuple(row)


def job_id(store: Store, name: str) -> int:
    with store.read() as c:
        jid = _job_id(c, name)
    if jid is None:
        raise UnknownNameError("job", name, list_job_names(store))
    return int(jid)


def list_job_names(store: Store) -> list[str]:
    with store.read() as c:
        return [r[0] for r in c.execute(select(online_jobs.c.name).order_by(online_jobs.c.name))]


def get_job(store: Store, name: str) -> JobInfo:
    with store.read() as c:
        row = c.execute(select(online_jobs).where(online_jobs.c.name == name)).first()
    if row is None:
        raise UnknownNameError("job", name, list_job_names(store))
    return _job_from_row(row)


def list_jobs(store: Store) -> list[tuple[JobInfo, int, int | None]]:
    """Each job with its number of step records and last step (most recently updated first)."""
    s = online_steps
    n_rows = select(func.count()).where(s.c.job_id == online_jobs.c.id).scalar_subquery()
    last = select(func.max(s.c.step)).where(s.c.job_id == online_jobs.c.id).scalar_subquery()
    with store.read() as c:
        rows = c.execute(select(online_jobs, n_rows.label("n_rows"), last.label("last_step"))
                         .order_by(online_jobs.c.updated_s.desc())).all()
    return [(_job_from_row(r), int(r.n_rows), r.last_step) for r in rows]


def last_step(store: Store, jid: int) -> int | None:
    with store.read() as c:
        v = c.execute(select(func.max(online_steps.c.step)).where(online_steps.c.job_id == jid)).scalar()
    return None if v is None else int(v)


def delete_job(store: Store, name: str) -> None:
    jid = job_id(store, name)
    with store.write() as c:  # steps and events explicitly: PostgreSQL cascades, SQLite only with foreign_keys on
        c.execute(delete(online_steps).where(online_steps.c.job_id == jid))
        c.execute(delete(online_events).where(online_events.c.job_id == jid))
        c.execute(delete(online_jobs).where(online_jobs.c.id == jid))


def _merged(rows: Iterable[dict]) -> list[dict]:
    """Rows of one batch merged by step (a later value wins over an earlier one; None keeps it)."""
    by: dict[int, dict] = {}
    for r in rows:
        d = by.setdefault(int(r["step"]), {"step": int(r["step"]), **dict.fromkeys(STEP_FIELDS)})
        for k in STEP_FIELDS:
            if r.get(k) is not None:
                d[k] = r[k]
    return list(by.values())


def write_steps(conn: Connection, jid: int, rows: Iterable[dict]) -> int:
    """Inside a write transaction: upsert step rows (dicts with ``step`` and any of time_s, loss, metric,
    epoch, learning_rate), merging with what is stored; return how many distinct steps."""
    rows = _merged(rows)
    if not rows:
        return 0
    stmt = _insert(conn, online_steps)
    ex = stmt.excluded
    stmt = stmt.on_conflict_do_update(
        index_elements=["job_id", "step"],
        set_={k: func.coalesce(ex[k], online_steps.c[k]) for k in STEP_FIELDS},
    )
    conn.execute(stmt, [{"job_id": jid, **r} for r in rows])
    return len(rows)


def write_events(conn: Connection, jid: int, events: Iterable[Event]) -> int:
    rows = []
    for e in events:
        if e.kind not in EVENT_KINDS:
            raise ConfigError(f"unknown event kind {e.kind!r}; known: {', '.join(EVENT_KINDS)}")
        rows.append({"job_id": jid, "kind": e.kind, "step": int(e.step), "time_s": e.time_s, "value": e.value})
    if rows:
        conn.execute(_insert(conn, online_events).on_conflict_do_nothing(), rows)
    return len(rows)


def touch(conn: Connection, jid: int) -> None:
    conn.execute(update(online_jobs).where(online_jobs.c.id == jid).values(updated_s=time.time()))


def _step_dict(r: StepRecord) -> dict:
    return {"step": int(r.step), "time_s": r.time_s, "loss": r.loss, "metric": r.metric, "epoch": r.epoch,
            "learning_rate": r.learning_rate}


# the recorder's hot path on SQLite: one autocommit statement on the store's sqlite3 connection
# (about 15 us, against 300 us through a pooled SQLAlchemy transaction); the same merge as write_steps
_SQLITE_STEP = (
    "INSERT INTO online_steps(job_id, step, time_s, loss, metric, epoch, learning_rate) VALUES (?,?,?,?,?,?,?) "
    "ON CONFLICT(job_id, step) DO UPDATE SET "
    + ", ".join(f"{k}=COALESCE(excluded.{k}, {k})" for k in STEP_FIELDS)
)


def add_step(store: Store, jid: int, record: StepRecord) -> None:
    """Insert (or merge) one step and commit it."""
    if store.dialect == "sqlite":
        store.conn.execute(_SQLITE_STEP, (jid, int(record.step), record.time_s, record.loss, record.metric,
                                          record.epoch, record.learning_rate))
        return
    with store.write() as c:
        write_steps(c, jid, [_step_dict(record)])


def add_steps(store: Store, jid: int, records: Iterable[StepRecord], batch: int = 500) -> int:
    """Insert many steps, committing every ``batch`` rows; return how many."""
    n = 0
    buf: list[dict] = []
    for r in records:
        buf.append(_step_dict(r))
        if len(buf) >= batch:
            with store.write() as c:
                n += write_steps(c, jid, buf)
            buf = []
    with store.write() as c:
        n += write_steps(c, jid, buf)
        touch(c, jid)
    return n


def add_event(store: Store, jid: int, event: Event) -> None:
    with store.write() as c:
        write_events(c, jid, [event])


def add_events(store: Store, jid: int, events: Iterable[Event]) -> None:
    with store.write() as c:
        write_events(c, jid, events)


def record_batch(store: Store, name: str, steps: Iterable[dict] = (), events: Iterable[Event] = (),
                 meta: dict | None = None) -> tuple[int, int, int]:
    """One transaction: create/update job ``name`` with ``meta``, merge its ``steps`` (dicts) and add its
    ``events``. Returns (job id, steps written, events given). What the server runs for a POST of metrics."""
    with store.write() as c:
        jid = ensure_job(c, name, **(meta or {}))
        n = write_steps(c, jid, steps)
        m = write_events(c, jid, events)
        if not meta:
            touch(c, jid)
    return jid, n, m


def load_series(store: Store, name: str) -> JobSeries:
    """A job's steps and events as a :class:`JobSeries`."""
    with store.read() as c:
        row = c.execute(select(online_jobs).where(online_jobs.c.name == name)).first()
        if row is None:
            jid = None
        else:
            info, jid = _job_from_row(row), row.id
            s, e = online_steps.c, online_events.c
            recs = [StepRecord(*r) for r in c.execute(
                select(s.step, s.time_s, s.loss, s.metric, s.epoch, s.learning_rate).where(s.job_id == jid)
                .order_by(s.step))]
            evs = [Event(*r) for r in c.execute(
                select(e.kind, e.step, e.time_s, e.value).where(e.job_id == jid).order_by(e.step, e.id))]
    if jid is None:
        raise UnknownNameError("job", name, list_job_names(store))
    return JobSeries.from_records(recs, evs, info.planned_steps, info.steps_per_epoch, name=name)


def save_parsed(store: Store, name: str, parsed, replace: bool = True, **meta) -> int:
    """Store a parsed log as job ``name`` (replacing its steps when ``replace``)."""
    if meta.get("total_steps") is None:
        meta["total_steps"] = parsed.total_steps
    if meta.get("steps_per_epoch") is None:
        meta["steps_per_epoch"] = parsed.steps_per_epoch
    _check_meta(name, meta)
    with store.write() as c:
        jid = ensure_job(c, name, **meta)
        if replace:
            c.execute(delete(online_steps).where(online_steps.c.job_id == jid))
            c.execute(delete(online_events).where(online_events.c.job_id == jid))
    add_steps(store, jid, parsed.records)
    add_events(store, jid, parsed.events)
    return jid
