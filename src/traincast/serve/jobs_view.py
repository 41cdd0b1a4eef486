"""What the jobs dashboard shows, computed from the store and cached until a job gets new rows."""

from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np

from traincast.errors import TraincastError
from traincast.online import api, estimate
from traincast.online import jobs as J


class JobsView:
    def __init__(self, store):
        self.store = store
        self.cache: dict = {}
        self.lock = threading.Lock()

    def _cached(self, key, fn):
        with self.lock:
            hit = self.cache.get(key)
        if hit is None:
            hit = fn()
            with self.lock:
                if len(self.cache) > 2000:
                    self.cache.clear()
                self.cache[key] = hit
        return hit

    def summaries(self) -> list[dict]:
        """``traincast jobs --json``'s rows (job fields, records, last_step, progress, remaining_s), and for the
        dashboard: the band of the remaining time, elapsed time, rate, cost so far and to go, last loss."""
        out = []
        for info, n_rows, last in J.list_jobs(self.store):
            key = ("summary", info.name, n_rows, last, info.updated_s, info.total_steps, info.price_usd_per_hour)
            out.append(self._cached(key, lambda info=info, n_rows=n_rows, last=last: self._summary(info, n_rows, last)))
        return out

    def _summary(self, info, n_rows: int, last) -> dict:
        total = info.planned_steps
        row = {**dataclasses.asdict(info), "records": n_rows, "last_step": last,
               "progress": (last / total) if (total and last is not None) else None, "remaining_s": None}
        extra = dict(low_s=None, high_s=None, elapsed_s=None, rate_steps_per_s=None, cost_so_far_usd=None,
                     cost_to_go_usd=None, last_loss=None, estimate_error=None)
        series = None
        if n_rows:
            series = J.load_series(self.store, info.name)
            losses = series.loss[np.isfinite(series.loss)]
            extra["last_loss"] = float(losses[-1]) if len(losses) else None
        if total and n_rows >= estimate.MIN_RECORDS:
            try:
                est = estimate.estimate_remaining(series)
                row["remaining_s"] = est.remaining_s
                extra.update(low_s=est.low_s, high_s=est.high_s, elapsed_s=est.elapsed_s,
                             rate_steps_per_s=est.rate_steps_per_s)
                p = info.price_usd_per_hour
                if p is not None:
                    extra.update(cost_so_far_usd=est.elapsed_s / 3600 * p, cost_to_go_usd=est.remaining_s / 3600 * p)
            except TraincastError as exc:
                extra["estimate_error"] = str(exc)
        return api.clean_json({**row, **extra})

    def eta(self, job: str, total_steps: int | None = None, estimator: str | None = None) -> dict:
        """``traincast eta JOB --json`` and the rows seen; cached until the job gets new rows."""
        stamp = J.stamp(self.store, job)
        if stamp is None:
            J.get_job(self.store, job)  # UnknownNameError with did-you-mean
        return self._cached(("eta", job, stamp, total_steps, estimator), lambda: self._eta(job, total_steps, estimator))

    def _eta(self, job, total_steps, estimator) -> dict:
        series = J.load_series(self.store, job)
        if total_steps:
            series = dataclasses.replace(series, total_steps=total_steps)
        d = api.eta_report(series, total_steps, estimator, target=job)
        d["rows"] = len(series)
        return d

    def curve(self, job: str, max_points: int = 400) -> dict:
        info = J.get_job(self.store, job)
        jid = J.job_id(self.store, job)
        last = J.last_step(self.store, jid)
        key = ("curve", job, last, info.updated_s, max_points)
        return self._cached(key, lambda: self._curve(job, info, max_points))

    def _curve(self, job: str, info, max_points: int) -> dict:
        s = J.load_series(self.store, job)
        ok = np.isfinite(s.loss)
        steps, loss = s.steps[ok], s.loss[ok]
        idx = np.unique(np.linspace(0, len(steps) - 1, min(len(steps), max_points)).round().astype(int)) if len(steps) else []
        fit = None
        if len(steps) >= 8:
            try:
                m = api.fit_loss_curve(s)
                end = max(int(steps[-1]), int(info.planned_steps or 0))
                xs = np.unique(np.linspace(max(1, int(steps[0])), end, 120).round()).astype(float)
                fit = {"form": m.form_, "steps": xs.tolist(), "loss": [float(v) for v in m.predict(xs)],
                       "floor_loss": m.floor_loss()}
            except (TraincastError, RuntimeError, ValueError, np.linalg.LinAlgError) as exc:
                fit = {"error": str(exc)}
        return api.clean_json({
            "job": job, "steps": [int(x) for x in steps[idx]] if len(steps) else [],
            "loss": [float(x) for x in loss[idx]] if len(steps) else [],
            "total_steps": info.planned_steps,
            "events": [{"kind": e.kind, "step": e.step} for e in s.events if e.kind in ("epoch_end", "eval_end")][-200:],
            "fit": fit,
        })


def _finite(x):
    return x if x is not None and math.isfinite(x) else None
