"""CLI commands of the online package: watch, eta, jobs, converge, ingest."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Optional

import typer

from traincast.cli.render import dur
from traincast.errors import ConfigError, DataError, positive

MAX_DRAWS = 20_000  # sampled curves per forecast: far more than a band needs, bounded so a slip cannot run for hours


def _dump(obj) -> str:
    from traincast.online.api import clean_json

    return json.dumps(clean_json(obj), indent=None, sort_keys=False)


def _est_dict(e) -> dict:
    from traincast.online.api import estimate_dict

    return estimate_dict(e)


def _store(db: Optional[str], must_exist: bool = False):
    from traincast.store import Store

    return Store(db, must_exist=must_exist)


def _job_store(db: Optional[str], target: str):
    """The store that holds job ``target`` (not a log file): a missing database is an unknown job."""
    from traincast.errors import DataError
    from traincast.store import default_db_path, is_url

    if db and is_url(db):  # a team database (postgresql://...): the store says whether the job is there
        return _store(db)
    path = Path(db).expanduser() if db else default_db_path()
    if not path.exists() and ("/" in target or Path(target).suffix):
        raise DataError(f"log file {target!r} does not exist")
    if not path.exists():
        raise DataError(f"unknown job {target!r}: no log file of that name, and no traincast database at "
                        f"{str(path)!r} to hold a job")
    return _store(db)


def _positive(name, v):
    """Optional options: checked only when given (traincast.errors.positive does the check)."""
    if v is not None:
        positive(name, v)


def register(app: typer.Typer) -> None:
    from rich.table import Table

    from traincast.cli.render import make_console
    from traincast.online import api, estimate, jobs, move, parsers, plot
    from traincast.online.curves import FORMS
    from traincast.online.schedule import schedule_help

    console = make_console()

    @app.command("watch")
    def watch(
        log: str = typer.Argument(..., help="training log file to follow"),
        total_steps: Optional[int] = typer.Option(None, "--total-steps", help="steps of the whole run (else read from the log)"),
        fmt: str = typer.Option("auto", "--format", help="log format: auto (sniffed); " + parsers.LOG_FORMATS.describe()),
        interval_s: float = typer.Option(2.0, "--interval", help="seconds between reads"),
        once: bool = typer.Option(False, "--once", help="read once, print, exit"),
        timeout_s: Optional[float] = typer.Option(None, "--timeout", min=0, help="stop following after this many seconds"),
        estimator: str = typer.Option(estimate.DEFAULT_ESTIMATOR, "--estimator", help=", ".join(estimate.ESTIMATORS)),
        save_as: Optional[str] = typer.Option(None, "--save-as", help="also store the log as this job"),
        db: Optional[str] = typer.Option(None, "--db", help="database file (default $TRAINCAST_DB)"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object per read"),
    ):
        """Follow a growing log: progress bar, rate, ETA and its band."""
        _positive("--total-steps", total_steps)
        _positive("--interval", interval_s)
        if interval_s > 86400:
            raise ConfigError(f"--interval is at most a day (86400 s), got {interval_s}")
        if estimator not in estimate.ESTIMATORS:
            raise ConfigError(f"unknown estimator {estimator!r}; known: {', '.join(estimate.ESTIMATORS)}")
        if not Path(log).exists():
            raise DataError(f"log file {log!r} does not exist; give the path of a training log")
        if save_as is not None and not save_as.strip():
            raise ConfigError("--save-as needs a job name")
        store = _store(db) if save_as else None

        def read():
            parsed = parsers.parse_log(log, fmt)
            if store is not None:
                jobs.save_parsed(store, save_as, parsed, total_steps=total_steps, source=str(log))
            series = parsed.to_series(total_steps, name=Path(log).name)
            try:
                est = estimate.estimate_remaining(series, total_steps, estimator)
            except DataError:
                est = None
            return parsed, series, est

        def record(parsed, est):
            d = {"log": log, "format": parsed.format, "records": len(parsed.records), "skipped_lines": parsed.lines_skipped}
            if est is not None:
                d.update(_est_dict(est))
            return d

        if once:
            parsed, series, est = read()
            if est is None and not (total_steps or parsed.total_steps):
                raise ConfigError("the total number of steps is not in the log; pass --total-steps N")
            if as_json:
                typer.echo(_dump(record(parsed, est)))
            else:
                _print_estimate(console, est, parsed, log)
            return
        from rich.progress import BarColumn, Progress, TextColumn

        start = time.monotonic()
        try:
            with Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
                TextColumn("{task.fields[info]}"),
                console=console,
                disable=as_json,
            ) as prog:
                task = prog.add_task(Path(log).name, total=total_steps or 1, info="waiting for records")
                while True:
                    parsed, series, est = read()
                    if as_json:
                        typer.echo(_dump(record(parsed, est)))
                    total = total_steps or parsed.total_steps
                    if est is not None:
                        info = (
                            f"{est.rate_steps_per_s:,.2f} steps/s  ETA {dur(est.remaining_s)} "
                            f"[{dur(est.low_s)} - {dur(est.high_s)}]  skipped {parsed.lines_skipped}"
                        )
                        prog.update(task, total=est.total_steps, completed=est.step, info=info)
                        if est.remaining_steps == 0:
                            break
                    elif total:
                        prog.update(task, total=total, completed=series.steps[-1] if len(series) else 0)
                    if timeout_s is not None and time.monotonic() - start > timeout_s:
                        break
                    time.sleep(interval_s)
        except KeyboardInterrupt:
            pass

    @app.command("eta")
    def eta(
        target: str = typer.Argument(..., help="a log file, or the name of a job in the store"),
        total_steps: Optional[int] = typer.Option(None, "--total-steps"),
        fmt: str = typer.Option("auto", "--format", help="log format: auto (sniffed); " + parsers.LOG_FORMATS.describe()),
        estimator: str = typer.Option(estimate.DEFAULT_ESTIMATOR, "--estimator", help=", ".join(estimate.ESTIMATORS)),
        speed_ratio: Optional[float] = typer.Option(
            None, "--speed-ratio", help="if moved now: target time per step / current time per step"
        ),
        price_usd_per_hour: Optional[float] = typer.Option(None, "--price-usd-per-hour", help="price of the target (or current) hardware"),
        restart_s: float = typer.Option(0.0, "--restart-overhead-s", help="time to restart on the new hardware"),
        move_name: str = typer.Option("target", "--target-name", help="label of the target hardware"),
        move_to: Optional[str] = typer.Option(None, "--move-to", help="forecast the rest on other hardware, e.g. 4xA100 or p4d.24xlarge"),
        current_hw: Optional[str] = typer.Option(None, "--from", help="the job's hardware now (default: the job's metadata)"),
        model_name: Optional[str] = typer.Option(None, "--model", help="the job's model (default: the job's metadata)"),
        batch_size: Optional[int] = typer.Option(None, "--batch-size", help="the job's global batch (default: metadata)"),
        tests: bool = typer.Option(False, "--tests", help="run ADF/KPSS stationarity tests"),
        plot_path: Optional[str] = typer.Option(None, "--plot", help="PNG of the ETA history"),
        db: Optional[str] = typer.Option(None, "--db"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Remaining time of a job (from its log or the store), optionally on other hardware."""
        _positive("--total-steps", total_steps)
        _positive("--batch-size", batch_size)
        if price_usd_per_hour is not None and not 0 <= price_usd_per_hour < math.inf:
            raise ConfigError(f"--price-usd-per-hour must be a price of 0 or more, got {price_usd_per_hour!r}")
        if not 0 <= restart_s < math.inf:
            raise ConfigError(f"--restart-overhead-s must be 0 or more seconds, got {restart_s!r}")
        store = None if Path(target).exists() else _job_store(db, target)
        series, parsed = api.open_series(target, fmt, store, total_steps)
        est = estimate.estimate_remaining(series, total_steps, estimator, tests=tests)
        an = estimate.analyze(series, tests=False)
        mv = None
        if move_to is not None:
            if speed_ratio is not None:
                raise ConfigError("--move-to and --speed-ratio exclude each other")
            from traincast.online import jobs as _jobs_mod

            info = None if store is None else _jobs_mod.get_job(store, target)
            model_name = model_name or (info.model if info else None)
            current_hw = current_hw or (info.hardware if info else None)
            batch_size = batch_size or (info.batch_size if info else None)
            missing = [n for n, v in (("--model", model_name), ("--from", current_hw), ("--batch-size", batch_size)) if not v]
            if missing:
                raise ConfigError(f"--move-to needs the job's {', '.join(missing)} (not in the job's metadata)")
            from traincast.predict.compose import speed_ratio as _ratio

            speed_ratio, target_price, move_name = _ratio(model_name, batch_size=batch_size, current=current_hw, target=move_to)
            if price_usd_per_hour is None:
                price_usd_per_hour = target_price
        if speed_ratio is not None:
            mv = move.remaining_on_other_hardware(est, speed_ratio, price_usd_per_hour, restart_overhead_s=restart_s, target=move_name)
        if plot_path:
            plot.plot_eta_history(estimate.eta_history(series, total_steps, estimator), plot_path)
        if as_json:
            d = api.eta_dict(est, an, target)
            if parsed is not None:
                d["skipped_lines"] = parsed.lines_skipped
            if mv is not None:
                d["move"] = dataclasses.asdict(mv)
            elif price_usd_per_hour is not None:
                d["cost_usd"] = est.remaining_s / 3600 * price_usd_per_hour
            if plot_path:
                d["plot"] = plot_path
            typer.echo(_dump(d))
            return
        _print_estimate(console, est, parsed, target, an)
        if mv is not None:
            cost = "" if mv.cost_usd is None else f", ${mv.cost_usd:,.2f} (${mv.cost_low_usd:,.2f} - ${mv.cost_high_usd:,.2f})"
            console.print(
                f"if moved to {mv.target} now: {dur(mv.remaining_s)} "
                f"[{dur(mv.low_s)} - {dur(mv.high_s)}]{cost}"
            )
        elif price_usd_per_hour is not None:
            console.print(f"cost of the remaining time: ${est.remaining_s / 3600 * price_usd_per_hour:,.2f}")
        if plot_path:
            console.print(f"plot: {plot_path}")

    @app.command("jobs")
    def jobs_cmd(
        db: Optional[str] = typer.Option(None, "--db"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Jobs in the store, with progress and remaining time."""
        store = _store(db, must_exist=db is not None)
        rows = []
        for info, n_rows, last in jobs.list_jobs(store):
            rem = None
            total = info.planned_steps
            if total and n_rows >= estimate.MIN_RECORDS:
                try:
                    rem = estimate.estimate_remaining(jobs.load_series(store, info.name)).remaining_s
                except (DataError, ConfigError):
                    rem = None
            rows.append(
                {
                    **dataclasses.asdict(info),
                    "records": n_rows,
                    "last_step": last,
                    "progress": (last / total) if (total and last is not None) else None,
                    "remaining_s": rem,
                }
            )
        if as_json:
            typer.echo(_dump(rows))
            return
        if not rows:
            console.print(f"no jobs in {store.path}")
            return
        t = Table(title=f"jobs in {store.path}")
        for c in ("job", "model", "hardware", "step", "total", "progress", "remaining", "updated"):
            t.add_column(c)
        for r in rows:
            t.add_row(
                r["name"],
                r["model"] or "-",
                r["hardware"] or "-",
                f"{r['last_step']:,}" if r["last_step"] is not None else "-",
                f"{r['total_steps']:,}" if r["total_steps"] else "-",
                f"{r['progress']:.0%}" if r["progress"] is not None else "-",
                dur(r["remaining_s"]),
                time.strftime("%Y-%m-%d %H:%M", time.localtime(r["updated_s"])),
            )
        console.print(t)

    @app.command("converge")
    def converge(
        target: str = typer.Argument(..., help="a log file, or the name of a job in the store"),
        target_loss: float = typer.Option(..., "--target-loss", help="training loss to reach"),
        fmt: str = typer.Option("auto", "--format", help="log format: auto (sniffed); " + parsers.LOG_FORMATS.describe()),
        lr_schedule: Optional[str] = typer.Option(
            None, "--lr-schedule", help="the learning-rate schedule (else the logged learning rate): " + schedule_help()
        ),
        total_steps: Optional[int] = typer.Option(None, "--total-steps", help="steps of the whole run (the horizon)"),
        form: str = typer.Option("auto", "--form", help="loss-curve form: auto (the average of all), " + ", ".join(FORMS)),
        n_draws: int = typer.Option(120, "--draws", "--boot", help="sampled curves for the band"),
        step_time_s: Optional[float] = typer.Option(None, "--step-time-s", help="time per step (else measured from the log)"),
        steps_per_epoch: Optional[float] = typer.Option(
            None, "--steps-per-epoch",
            help="steps a pass over the data (else from the log: a trainer_state's epoch shares, the recorder's); the "
                 "loss is forecast to drop at each boundary; 0: no drops (a loss that does not fall when the data "
                 "repeat, e.g. a many-epoch image model logged coarsely)"),
        plot_path: Optional[str] = typer.Option(None, "--plot", help="PNG of the loss forecast"),
        db: Optional[str] = typer.Option(None, "--db"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Steps (and time) until the training loss reaches a target, aware of the learning-rate schedule and of the
        passes over the data."""
        if not math.isfinite(target_loss):
            raise ConfigError(f"--target-loss must be a finite number, got {target_loss}")
        if not 10 <= n_draws <= MAX_DRAWS:
            raise ConfigError(f"--draws must be between 10 and {MAX_DRAWS:,}, got {n_draws}")
        _positive("--step-time-s", step_time_s)
        _positive("--total-steps", total_steps)
        if steps_per_epoch is not None and not (math.isfinite(steps_per_epoch) and steps_per_epoch >= 0):
            raise ConfigError(f"--steps-per-epoch must be a number >= 0 (0: no epoch drops), got {steps_per_epoch}")
        if plot_path:
            from traincast.errors import png_path

            png_path(plot_path)
        import dataclasses

        from traincast.online.converge import converge as _converge

        store = None if Path(target).exists() else _job_store(db, target)
        import numpy as np

        series, parsed = api.open_series(target, fmt, store, total_steps)
        if parsed is not None and parsed.lines_skipped and not np.isfinite(series.loss).any():
            shown = f"; e.g. {parsed.skipped_examples[0][:80]!r}" if parsed.skipped_examples else ""
            raise DataError(f"log {target!r} has no loss values: {parsed.lines_skipped} line(s) could not be read as "
                            f"{parsed.format!r}{shown}; check --format and that the loss and step columns are numbers")
        if steps_per_epoch is not None:
            series = dataclasses.replace(series, steps_per_epoch=steps_per_epoch or None)
        res = _converge(series, target_loss, lr_schedule, total_steps, form=form, n_draws=n_draws, step_time_s=step_time_s)
        fc, ttt = res.forecast, res.time_to_target
        for w in res.warnings:
            typer.echo(f"warning: {w}", err=True)
        if plot_path:
            ok = np.isfinite(series.loss)
            plot.plot_forecast(series.steps[ok], series.loss[ok], res.draws, plot_path, fc)
        d = api.converge_dict(res, target)
        if plot_path:
            d["plot"] = plot_path
        if as_json:
            typer.echo(_dump(d))
            return
        typer.echo(converge_line(fc, ttt))
        if plot_path:
            console.print(f"plot: {plot_path}")

    @app.command("ingest")
    def ingest(
        log: str = typer.Argument(..., help="training log file"),
        job: str = typer.Option(..., "--job", help="job name to store it as"),
        fmt: str = typer.Option("auto", "--format"),
        total_steps: Optional[int] = typer.Option(None, "--total-steps"),
        model: Optional[str] = typer.Option(None, "--model"),
        hardware: Optional[str] = typer.Option(None, "--hardware"),
        batch_size: Optional[int] = typer.Option(None, "--batch-size"),
        db: Optional[str] = typer.Option(None, "--db"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Store a log as a job (replacing its earlier records)."""
        _positive("--total-steps", total_steps)
        _positive("--batch-size", batch_size)
        if hardware is not None:  # stored for `eta --move-to`: a typo is caught now, not there
            from traincast.predict.compose import parse_hardware

            parse_hardware(hardware)
        parsed = parsers.parse_log(log, fmt)
        store = _store(db)
        jobs.save_parsed(store, job, parsed, total_steps=total_steps, model=model, hardware=hardware, batch_size=batch_size, source=str(log))
        d = {"job": job, "format": parsed.format, "records": len(parsed.records), "events": len(parsed.events), "skipped_lines": parsed.lines_skipped, "db": str(store.path)}
        typer.echo(_dump(d) if as_json else f"stored {d['records']} records of {log} as job {job!r} ({d['skipped_lines']} lines skipped)")


def converge_line(fc, ttt=None) -> str:
    """One line that says what the convergence forecast is."""
    band = f"{fc.level:.0%} band"
    when = ""
    if fc.status == "reached":
        return f"loss {fc.target_loss:g} already reached at step {fc.steps:,.0f} (now at step {fc.current_step:,})"
    if fc.status == "unreachable":
        return (
            f"unreachable: target loss {fc.target_loss:g} is below the fitted floor {fc.floor_loss:.4g} "
            f"[{fc.floor_low:.4g} - {fc.floor_high:.4g}] this run reaches by step {fc.horizon_steps:,} "
            f"({fc.reach_probability:.0%} of the sampled curves reach it)"
        )

    def st(x):
        return f"{x:,.0f}" if math.isfinite(x) else f"not by step {fc.horizon_steps:,}"

    if ttt is not None and math.isfinite(ttt.time_s):
        hi = dur(ttt.high_s) if math.isfinite(ttt.high_s) else "later"
        when = f"; in {dur(ttt.time_s)} [{dur(ttt.low_s)} - {hi}]"
    head = "not enough signal yet: " if fc.status == "not enough signal" else ""
    if not math.isfinite(fc.steps):
        first = f", the earliest from step {fc.low:,.0f}" if math.isfinite(fc.low) else ""
        return (
            f"{head}loss {fc.target_loss:g} not reached by step {fc.horizon_steps:,} in most sampled curves "
            f"({fc.reach_probability:.0%} reach it{first}; now at step {fc.current_step:,}; floor {fc.floor_loss:.4g} "
            f"[{fc.floor_low:.4g} - {fc.floor_high:.4g}])"
        )
    if fc.reach_probability < 0.5:
        head += "if it is reached at all, "
    return (
        f"{head}loss {fc.target_loss:g} at step {st(fc.steps)} [{st(fc.low)} - {st(fc.high)}] ({band}, "
        f"{fc.reach_probability:.0%} reach it by step {fc.horizon_steps:,}; now at step {fc.current_step:,}; "
        f"floor {fc.floor_loss:.4g}){when}"
    )


def _print_estimate(console, est, parsed, name, an=None) -> None:
    from rich.table import Table

    t = Table(title=f"{name}", show_header=False)
    t.add_column("what")
    t.add_column("value")
    if parsed is not None:
        t.add_row("format", parsed.format)
        t.add_row("records / skipped lines", f"{len(parsed.records):,} / {parsed.lines_skipped:,}")
    if est is None:
        t.add_row("estimate", "not enough timed records yet")
        console.print(t)
        return
    t.add_row("step", f"{est.step:,} / {est.total_steps:,} ({est.progress:.1%})")
    t.add_row("elapsed", dur(est.elapsed_s))
    t.add_row("time per step", f"{est.step_time_s * 1e3:,.1f} ms  ({est.rate_steps_per_s:,.2f} steps/s, CoV {est.cov:.2f})")
    t.add_row("remaining", f"{dur(est.remaining_s)}  [{dur(est.low_s)} - {dur(est.high_s)}]")
    t.add_row("of which future pauses", dur(est.future_pause_s) if est.estimator not in ("robust", "naive", "naive_trim")
              else "in the pace (pauses seen so far)")
    if an is not None:
        kinds = {}
        for p in an.pauses:
            kinds[p.kind] = kinds.get(p.kind, 0) + 1
        t.add_row("warm-up steps trimmed", f"{an.warmup_steps:,}")
        t.add_row("pauses seen", ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items())) or "none")
    if est.stationary is not None:
        t.add_row("stationary (ADF+KPSS)", "yes" if est.stationary else "no")
    if est.last_time_s and est.last_time_s > 1e9:  # a unix clock: print the wall-clock finish
        t.add_row("finishes at", time.strftime("%Y-%m-%d %H:%M", time.localtime(est.last_time_s + est.remaining_s)))
    console.print(t)
