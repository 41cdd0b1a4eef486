"""One-call entry points the CLI wraps: a series from a log path or a job name."""

from __future__ import annotations

from pathlib import Path

from traincast.errors import DataError
from traincast.online import jobs as _jobs
from traincast.online.converge import LossCurveModel, StepsToTarget
from traincast.online.parsers import parse_log
from traincast.online.records import JobSeries, ParsedLog
from traincast.store import Store


def open_series(
    target: str, fmt: str = "auto", store: Store | None = None, total_steps: int | None = None
) -> tuple[JobSeries, ParsedLog | None]:
    """``target`` is a log file (parsed) or else the name of a job in the store."""
    p = Path(target)
    if p.exists() or any(sep in target for sep in ("/", "\\")) or p.suffix in (".log", ".txt", ".csv", ".json", ".jsonl"):
        parsed = parse_log(p, fmt)
        return parsed.to_series(total_steps, name=p.name), parsed
    if store is None:
        store = Store()
    series = _jobs.load_series(store, target)
    if total_steps:
        series = JobSeries(
            series.steps, series.time_s, series.loss, series.metric, series.events, total_steps, series.steps_per_epoch, series.name
        )
    return series, None


def fit_loss_curve(series: JobSeries, form: str = "auto", log_space: bool = True) -> LossCurveModel:
    import numpy as np

    ok = np.isfinite(series.loss)
    if ok.sum() == 0:
        raise DataError(f"job/log {series.name!r} has no loss values; log the training loss to fit its curve")
    return LossCurveModel(form=form, log_space=log_space).fit(series.steps[ok], series.loss[ok])


def steps_to_target(
    series: JobSeries, target_loss: float, form: str = "auto", n_boot: int = 100, seed: int = 0, log_space: bool = True
) -> tuple[LossCurveModel, StepsToTarget]:
    """Fit the loss curve of ``series`` and predict the step where it reaches ``target_loss``.

    The defaults (``form="auto"``, ``log_space=True``) had the lowest error from
    50% of real runs in ``benchmarks/converge_validation.py``.
    """
    model = fit_loss_curve(series, form, log_space)
    return model, model.steps_to_target(target_loss, n_boot=n_boot, seed=seed)
