"""Records of the online package: steps, events, jobs, parsed logs, series."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

EVENT_KINDS = ("epoch_end", "eval_start", "eval_end", "resume", "checkpoint")


@dataclass(frozen=True)
class StepRecord:
    """One logged training step: index, wall time (s), loss, eval metric and learning rate if known."""

    step: int
    time_s: float | None = None
    loss: float | None = None
    metric: float | None = None
    epoch: float | None = None
    learning_rate: float | None = None


@dataclass(frozen=True)
class Event:
    """Something that is not a step: an epoch boundary, an evaluation, a restart."""

    kind: str
    step: int
    time_s: float | None = None
    value: float | None = None


@dataclass(frozen=True)
class JobInfo:
    """Metadata of a job in the store."""

    name: str
    model: str | None = None
    hardware: str | None = None
    batch_size: int | None = None
    total_steps: int | None = None
    total_epochs: int | None = None
    steps_per_epoch: int | None = None
    price_usd_per_hour: float | None = None
    source: str | None = None
    created_s: float | None = None
    updated_s: float | None = None

    @property
    def planned_steps(self) -> int | None:
        """Total steps, or epochs × steps per epoch when only those are known."""
        if self.total_steps:
            return self.total_steps
        if self.total_epochs and self.steps_per_epoch:
            return self.total_epochs * self.steps_per_epoch
        return None


@dataclass(frozen=True, eq=False)
class JobSeries:
    """A job's steps as arrays (NaN where a value is missing), with its events."""

    steps: np.ndarray
    time_s: np.ndarray
    loss: np.ndarray
    metric: np.ndarray
    events: tuple[Event, ...] = ()
    total_steps: int | None = None
    steps_per_epoch: int | None = None
    name: str = ""
    lr: np.ndarray | None = None  # learning rate per record (NaN where not logged); None: no column

    def __len__(self) -> int:
        return len(self.steps)

    @staticmethod
    def from_records(
        records, events=(), total_steps: int | None = None, steps_per_epoch: int | None = None, name: str = ""
    ) -> JobSeries:
        """Records in log order -> a series sorted by step.

        A restart in the log (the step goes back: a resume from a checkpoint
        replays steps; or the clock goes back: a new process's elapsed time)
        starts a new segment: later records of a step replace earlier ones,
        the new segment's times are shifted to follow the old ones, and a
        ``resume`` event marks the interval across the restart, which no
        estimate of the pace uses.
        """
        records, resumes = resolve_restarts(list(records))
        by_step: dict[int, StepRecord] = {}
        for r in records:
            by_step[int(r.step)] = r
        rows = [by_step[k] for k in sorted(by_step)]

        def col(attr):
            return np.array([_f(getattr(r, attr, None)) for r in rows], dtype=float)

        lr = col("learning_rate")
        return JobSeries(
            steps=np.array([r.step for r in rows], dtype=np.int64),
            time_s=col("time_s"),
            loss=col("loss"),
            metric=col("metric"),
            events=tuple(sorted((*events, *resumes), key=lambda e: (e.step, e.time_s if e.time_s is not None else 0.0))),
            total_steps=total_steps,
            steps_per_epoch=steps_per_epoch,
            name=name,
            lr=lr if np.isfinite(lr).any() else None,
        )

    def timed(self) -> JobSeries:
        """Only the records with a time, times made non-decreasing."""
        ok = np.isfinite(self.time_s)
        return _subset(self, ok)

    def upto(self, step: int) -> JobSeries:
        """What was known when ``step`` was logged."""
        s = _subset(self, self.steps <= step)
        evs = tuple(e for e in self.events if e.step <= step)
        return JobSeries(s.steps, s.time_s, s.loss, s.metric, evs, self.total_steps, self.steps_per_epoch, self.name, s.lr)


def _subset(s: JobSeries, mask) -> JobSeries:
    return JobSeries(
        s.steps[mask], s.time_s[mask], s.loss[mask], s.metric[mask], s.events, s.total_steps, s.steps_per_epoch, s.name,
        None if s.lr is None else s.lr[mask],
    )


def resolve_restarts(records: list[StepRecord]) -> tuple[list[StepRecord], list[Event]]:
    """Find restarts in records given in log order; shift clocks that start again; mark resumes.

    A restart is a record whose step is below the last one (a resume from an
    earlier checkpoint) or whose time is below the last time (a new process's
    clock). The times of the records after it are shifted by the clock's jump
    back (0 when the clock went on), and a ``resume`` event is put at the last
    step kept before it.
    """
    out: list[StepRecord] = []
    resumes: list[Event] = []
    last_step: int | None = None
    last_t: float | None = None
    shift = 0.0
    for r in records:
        t = r.time_s
        if last_step is not None:
            went_back = r.step < last_step
            clock_back = t is not None and last_t is not None and t + shift < last_t - 1e-9
            if went_back or clock_back:
                if clock_back:
                    shift = last_t - t  # the new clock starts where the old one ended
                prev = [x.step for x in out if x.step < r.step]
                resumes.append(Event("resume", max(prev) if prev else max(int(r.step) - 1, 0), last_t))
                # records of the old segment at or after this step are superseded
                out = [x for x in out if x.step < r.step]
        if t is not None and shift:
            r = StepRecord(r.step, t + shift, r.loss, r.metric, r.epoch, r.learning_rate)
        out.append(r)
        last_step = int(r.step)
        if r.time_s is not None:
            last_t = float(r.time_s) if last_t is None else max(last_t, float(r.time_s))
    return out, resumes


def _f(v) -> float:
    if v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class ParsedLog:
    """What a log parser read: records, events, and how many lines it skipped."""

    format: str
    records: tuple[StepRecord, ...]
    events: tuple[Event, ...] = ()
    lines_read: int = 0
    lines_skipped: int = 0
    total_steps: int | None = None
    steps_per_epoch: int | None = None
    skipped_examples: tuple[str, ...] = field(default=())

    def to_series(self, total_steps: int | None = None, name: str = "") -> JobSeries:
        return JobSeries.from_records(
            self.records, self.events, total_steps or self.total_steps, self.steps_per_epoch, name=name
        )
