"""Tables of the online package: running jobs, their steps and events.

One definition for SQLite and PostgreSQL (SQLAlchemy Core). Times are seconds
(``*_s``: wall clock, Unix epoch for the recorder), prices USD per hour.
"""

from sqlalchemy import Column, Double, ForeignKey, Index, Integer, Table, Text

from traincast.store.schema import metadata

online_jobs = Table(
    "online_jobs", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("model", Text),
    Column("hardware", Text),
    Column("batch_size", Integer),
    Column("total_steps", Integer),
    Column("total_epochs", Integer),
    Column("steps_per_epoch", Integer),
    Column("price_usd_per_hour", Double),
    Column("source", Text),
    Column("created_s", Double, nullable=False),
    Column("updated_s", Double, nullable=False),
)

online_steps = Table(
    "online_steps", metadata,
    Column("job_id", Integer, ForeignKey("online_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("step", Integer, primary_key=True, autoincrement=False),
    Column("time_s", Double),
    Column("loss", Double),
    Column("metric", Double),
    Column("epoch", Double),
    Column("learning_rate", Double),
)

online_events = Table(
    "online_events", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("online_jobs.id", ondelete="CASCADE"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("step", Integer, nullable=False),
    Column("time_s", Double),
    Column("value", Double),
    Index("online_events_job", "job_id", "step"),
)
