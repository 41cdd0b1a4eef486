"""Tables of the online package: running jobs, their steps and events."""

VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS online_jobs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    model TEXT,
    hardware TEXT,
    batch_size INTEGER,
    total_steps INTEGER,
    total_epochs INTEGER,
    steps_per_epoch INTEGER,
    price_usd_per_hour REAL,
    source TEXT,
    created_s REAL NOT NULL,
    updated_s REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS online_steps (
    job_id INTEGER NOT NULL REFERENCES online_jobs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    time_s REAL,
    loss REAL,
    metric REAL,
    epoch REAL,
    PRIMARY KEY (job_id, step)
);
CREATE TABLE IF NOT EXISTS online_events (
    id INTEGER PRIMARY KEY,
    job_id INTEGER NOT NULL REFERENCES online_jobs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    step INTEGER NOT NULL,
    time_s REAL,
    value REAL
);
CREATE INDEX IF NOT EXISTS online_events_job ON online_events(job_id, step);
"""
