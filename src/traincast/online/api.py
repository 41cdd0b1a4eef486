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
    if not str(target).strip():
        raise DataError("the log file or job name is empty; give the path of a training log or a job's name")
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


# --- the JSON answers of `traincast eta --json` and `converge --json`, for a job in the store -----------
# (the server answers with these; cli/online.py builds the same dicts, and tests/serve checks they agree)
def clean_json(x):
    """Non-finite floats become None, tuples lists: what JSON can carry."""
    import math

    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: clean_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean_json(v) for v in x]
    return x


def estimate_dict(est) -> dict:
    import dataclasses

    d = dataclasses.asdict(est)
    d["progress"] = est.progress
    d["rate_steps_per_s"] = est.rate_steps_per_s
    return d


def eta_dict(est, analysis, target: str) -> dict:
    """The fields of ``traincast eta --json`` from an estimate and the series' analysis (not yet JSON-clean)."""
    d = {"target": target, **estimate_dict(est)}
    d["warmup_steps"] = analysis.warmup_steps
    d["pauses"] = {k: sum(1 for p in analysis.pauses if p.kind == k) for k in sorted({p.kind for p in analysis.pauses})}
    d["pause_s"] = sum(p.excess_s for p in analysis.pauses)
    return d


def eta_report(series: JobSeries, total_steps: int | None = None, estimator: str | None = None, *,
               tests: bool = False, target: str | None = None) -> dict:
    """What ``traincast eta TARGET --json`` prints for a job (no log file, no move), as a dict."""
    from traincast.online import estimate

    est = estimate.estimate_remaining(series, total_steps, estimator or estimate.DEFAULT_ESTIMATOR, tests=tests)
    an = estimate.analyze(series, tests=False)
    return clean_json(eta_dict(est, an, target if target is not None else series.name))


def converge_dict(result, target: str) -> dict:
    """The fields of ``traincast converge --json`` from a :func:`traincast.online.converge.converge` result."""
    import dataclasses

    fc, ttt = result.forecast, result.time_to_target
    return {
        "target": target,
        **dataclasses.asdict(fc),
        "schedule_source": result.schedule_source,
        "epochs": result.epochs,
        "warnings": list(result.warnings),
        "reached": fc.status == "reached",
        "floor_loss": fc.floor_loss,
        "step_time_s": result.step_time_s,
        "time_to_target": dataclasses.asdict(ttt) if ttt else None,
    }


def converge_report(series: JobSeries, target_loss: float, *, lr_schedule: str | None = None,
                    total_steps: int | None = None, form: str = "auto", n_draws: int = 120,
                    step_time_s: float | None = None, target: str | None = None) -> dict:
    """What ``traincast converge TARGET --target-loss X --json`` prints, as a dict."""
    from traincast.online.converge import converge

    res = converge(series, target_loss, lr_schedule, total_steps, form=form, n_draws=n_draws, step_time_s=step_time_s)
    return clean_json(converge_dict(res, target if target is not None else series.name))
