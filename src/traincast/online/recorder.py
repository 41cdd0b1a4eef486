"""A framework-free recorder for training loops.

    from traincast.online import track
    with track(job="mnist-run1", total_steps=10_000) as t:
        for batch in loader:
            loss = train_step(batch)
            t.step(loss=float(loss))
        t.epoch_end()

Every step is written to the store and committed at once (WAL mode), so a job
killed at any moment loses at most the row in flight, and ``traincast eta``
can read the job while it runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from traincast.errors import ConfigError
from traincast.online import jobs as _jobs
from traincast.online.records import Event, StepRecord
from traincast.store import Store


def _num(name: str, v) -> float | None:
    if v is None:
        return None
    try:
        if hasattr(v, "item"):
            v = v.item()
        f = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number (or a 0-d tensor), got {type(v).__name__}") from None
    return f if math.isfinite(f) else None


class Tracker:
    """Records steps, epoch ends and evaluations of one job into the store.

    Use :func:`track` to make one. ``step()`` counts steps itself unless given
    ``step=``; the first call records the wall time at which step 0 ended.
    """

    def __init__(
        self,
        job: str,
        total_steps: int | None = None,
        *,
        store: Store | str | None = None,
        total_epochs: int | None = None,
        steps_per_epoch: int | None = None,
        model: str | None = None,
        hardware: str | None = None,
        batch_size: int | None = None,
        price_usd_per_hour: float | None = None,
        record_every: int = 1,
        resume: bool = True,
        clock: Callable[[], float] = time.time,
    ):
        for nm, v in (("total_steps", total_steps), ("total_epochs", total_epochs), ("steps_per_epoch", steps_per_epoch)):
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise ConfigError(f"{nm} must be a positive integer, got {v!r}")
        if not isinstance(record_every, int) or record_every < 1:
            raise ConfigError(f"record_every must be an integer >= 1, got {record_every!r}")
        self._own_store = not isinstance(store, Store)
        self.store = store if isinstance(store, Store) else Store(store)
        self.job = job
        self.clock = clock
        self.record_every = record_every
        existed = job in _jobs.list_job_names(self.store)
        if existed and not resume:
            _jobs.delete_job(self.store, job)
            existed = False
        self.job_id = _jobs.upsert_job(
            self.store,
            job,
            total_steps=total_steps,
            total_epochs=total_epochs,
            steps_per_epoch=steps_per_epoch,
            model=model,
            hardware=hardware,
            batch_size=batch_size,
            price_usd_per_hour=price_usd_per_hour,
            source="track",
        )
        last = self.store.conn.execute(
            "SELECT MAX(step) FROM online_steps WHERE job_id=?", (self.job_id,)
        ).fetchone()[0]
        self.current_step = int(last) if last is not None else -1
        self.epoch = 0
        self._in_eval = False
        if existed and last is not None:
            self._event("resume")
        self.start_s = clock()
        if last is None:
            # an origin row (step 0 = the start) so that the first step's duration is known
            _jobs.add_step(self.store, self.job_id, StepRecord(0, self.start_s))
            self.current_step = 0
        self.closed = False

    # ----------------------------------------------------------------- records
    def step(self, loss=None, metric=None, *, step: int | None = None, n: int = 1) -> int:
        """Record the end of a training step (or of ``n`` steps); return the step index."""
        if self.closed:
            raise ConfigError(f"tracker of job {self.job!r} is closed; open a new one with track(...)")
        if step is None:
            step = self.current_step + n
        if step <= self.current_step:
            raise ConfigError(f"step {step} is not after the last recorded step {self.current_step}")
        self.current_step = int(step)
        if step % self.record_every == 0:
            _jobs.add_step(
                self.store,
                self.job_id,
                StepRecord(self.current_step, self.clock(), _num("loss", loss), _num("metric", metric), float(self.epoch)),
            )
        return self.current_step

    def update(self, step: int, loss=None, metric=None) -> None:
        """Attach a loss or metric to step ``step`` after the fact (frameworks log after the step)."""
        loss, metric = _num("loss", loss), _num("metric", metric)
        cur = self.store.conn.execute(
            "UPDATE online_steps SET loss=COALESCE(?, loss), metric=COALESCE(?, metric) WHERE job_id=? AND step=?",
            (loss, metric, self.job_id, int(step)),
        )
        if cur.rowcount == 0:  # a step not recorded (record_every > 1): keep the value, without a time
            _jobs.add_step(self.store, self.job_id, StepRecord(int(step), None, loss, metric, float(self.epoch)))

    def _event(self, kind: str, value=None) -> None:
        _jobs.add_event(self.store, self.job_id, Event(kind, max(self.current_step, 0), self.clock(), _num("value", value)))

    def epoch_end(self, metric=None) -> None:
        """Mark the end of an epoch (a pause may follow: shuffling, eval, checkpoint)."""
        self.epoch += 1
        self._event("epoch_end", metric)

    def eval_start(self) -> None:
        self._in_eval = True
        self._event("eval_start")

    def eval_end(self, metric=None) -> None:
        """Mark the end of an evaluation, with its metric (e.g. accuracy or eval loss)."""
        self._in_eval = False
        self._event("eval_end", metric)

    def checkpoint(self) -> None:
        self._event("checkpoint")

    # ---------------------------------------------------------------- forecasts
    def series(self):
        return _jobs.load_series(self.store, self.job)

    def eta(self, estimator: str | None = None):
        """The remaining-time estimate now (see :func:`traincast.online.estimate_remaining`)."""
        from traincast.online.estimate import estimate_remaining

        return estimate_remaining(self.series(), estimator=estimator)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._own_store:
                self.store.close()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def track(job: str, total_steps: int | None = None, store: Store | str | None = None, **kwargs) -> Tracker:
    """Start (or resume) recording job ``job``; use as a context manager.

    Keyword arguments: ``total_epochs``, ``steps_per_epoch``, ``model``,
    ``hardware``, ``batch_size``, ``price_usd_per_hour``, ``record_every``
    (record one step in N), ``resume`` (False: start the job afresh),
    ``clock`` (a function returning seconds; ``time.time`` by default).
    """
    return Tracker(job, total_steps, store=store, **kwargs)
