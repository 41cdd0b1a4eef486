"""Calibration commands: calibrate, validate, devices."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from traincast.cli.render import console, dur, print_json, split_list as _split, table


def _progress(label: str, total: int):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    prog = Progress(TextColumn(label), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True,
                    disable=not console.is_terminal)
    task = prog.add_task(label, total=total)
    return prog, (lambda _m: prog.advance(task))


def _check_models(models) -> None:
    from traincast.workload import zoo

    for m in models:
        if not str(m).endswith((".yaml", ".yml", ".json")):
            zoo.get(m)


def _layers(n: int, device: str, threads) -> list[dict]:
    from traincast.errors import ConfigError

    if n < 0:
        raise ConfigError(f"--layer-samples must be >= 0, got {n}")
    if n == 0:
        return []
    from traincast.fit.calibration import run_layer_campaign

    return run_layer_campaign(n, device=device, threads=threads)


def _isolate_option():
    return typer.Option(True, "--isolate/--in-process", help="time each (model, batch) in a fresh process, as a "
                        "training job runs (the heap an earlier model left changes the next)")


def _host_only(device: str, name: str, out, as_json: bool) -> None:
    """``calibrate --host-only``: the host's issue cost measured here (measure/host.py), saved as a profile of this
    machine's GPU whose only overrides are ``host_forward_us`` and ``host_backward_us``."""
    import datetime as _dt
    from dataclasses import asdict

    from traincast.errors import ConfigError
    from traincast.hardware.local import local_device
    from traincast.measure.fingerprint import fingerprint
    from traincast.measure.host import MODEL_FIELDS, measure_host_costs
    from traincast.predict.profile import DeviceProfile

    if not str(device).startswith("cuda"):
        raise ConfigError("--host-only measures the host that issues a GPU's kernels: it needs --device cuda "
                          "(on a CPU the host is the device; calibrate it without --host-only)")
    dev = local_device(device, None)
    repeats = 3
    prog, tick = _progress("timing the host", repeats * len(MODEL_FIELDS))
    with prog:
        hc = measure_host_costs(device, repeats=repeats, progress=tick)
    prof = DeviceProfile(name=name, device=asdict(dev), fingerprint=fingerprint(device, None).as_dict(),
                         overrides={"host_forward_us": round(hc.forward_us, 2),
                                    "host_backward_us": round(hc.backward_us, 2)},
                         date=_dt.datetime.now().isoformat(timespec="seconds"),
                         fit={"host_only": True, "host": {"forward_us": hc.forward_us, "backward_us": hc.backward_us,
                                                          "per_model": hc.per_model}})
    path = prof.save(out)
    if as_json:
        print_json({"profile": str(path), "overrides": prof.overrides, "fit": prof.fit})
        return
    from traincast.predict.roofline import RooflineParams

    catalog = RooflineParams.for_device(dev)
    console.print(f"host of {dev.name}: {hc.forward_us:.1f} us per forward op, {hc.backward_us:.1f} us per backward "
                  f"op (the catalog's default: {catalog.host_forward_us:g} / {catalog.host_backward_us:g})")
    console.print(f"profile saved: {path}  (use: traincast predict MODEL --device local ...)")


def register(app: typer.Typer) -> None:
    @app.command()
    def calibrate(
        device: str = typer.Option("cpu", "--device", help="cpu | cuda"),
        models: Optional[str] = typer.Option(None, "--models", help="calibration models (default: resnet18, "
                                             "mobilenet_v2, regnet_x_400mf, bert-tiny, vgg11: every kind of op; "
                                             "measured breadth first, so --budget keeps the variety)"),
        for_models: Optional[str] = typer.Option(None, "--for", help="the models you will forecast: calibrate on "
                                                 "the pool models that run their kinds of op"),
        batch_sizes: str = typer.Option("2,8,16", "--batch-sizes"),
        steps: int = typer.Option(7, "--steps", help="timed steps per (model, batch)"),
        threads: Optional[int] = typer.Option(None, "--threads"),
        budget: Optional[str] = typer.Option(None, "--budget", help="time for measuring, e.g. 10m; the rest is skipped"),
        layer_samples: int = typer.Option(160, "--layer-samples", min=0, help="single-op campaign samples for the "
                                          "per-op-class fit (stored, resumable); 0: whole steps only"),
        isolate: bool = _isolate_option(),
        retime: int = typer.Option(3, "--retime", min=0, help="after the fit, time again up to this many steps that "
                                   "took over 1.2x their fitted time (a busy neighbour slows a whole measurement "
                                   "evenly), keep the faster timing and fit again; 0: never"),
        name: str = typer.Option("local", "--name", help="profile name (`--profile NAME` uses it)"),
        out: Optional[Path] = typer.Option(None, "--out", help="write the profile here instead"),
        host_only: bool = typer.Option(False, "--host-only", help="GPUs: measure only the host's cost of issuing "
                                       "one eager op (tiny GPT-2/Llama/BERT steps, about a minute) and save a profile "
                                       "with the catalog's GPU and this host (the host differs between machines "
                                       "with the same GPU)"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Time real steps here, fit the analytical predictor to them, save a device profile."""
        import re

        from traincast.errors import ConfigError, positive, writable_file
        from traincast.fit.calibration import calibrate as run_calibration
        from traincast.fit.calibration import measure_steps
        from traincast.measure.timing import check_device

        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ConfigError(f"--name {name!r}: a profile name is letters, digits, '_', '.' and '-' (no folders)")
        if out is not None:
            writable_file(out)
        check_device(device)
        if host_only:
            _host_only(device, name, out, as_json)
            return
        from traincast.fit.calibration import calibration_models

        if models is not None and for_models is not None:
            raise ConfigError("--models and --for both choose the calibration models; give one of them")
        targets = _split(for_models, "--for") if for_models else ()
        _check_models(targets)
        ms = _split(models, "--models") if models else calibration_models(targets, device)
        bs = _split(batch_sizes, "--batch-sizes", int)
        for b in bs:
            positive("--batch-sizes entries", b)
        positive("--steps", steps)
        _check_models(ms)
        from traincast.plan.pareto import parse_duration_s

        budget_s = parse_duration_s(budget) if budget else None
        prog, tick = _progress("measuring", len(ms) * len(bs))
        with prog:
            meas = measure_steps(ms, bs, device=device, steps=steps, threads=threads, progress=tick, budget_s=budget_s,
                                 isolate=isolate)
        layers = _layers(layer_samples, device, threads)
        prof = run_calibration(ms, bs, device=device, threads=threads, name=name, measured=meas, layer_samples=layers,
                               steps=steps, isolate=isolate, retime=retime)
        path = prof.save(out)
        if as_json:
            print_json({"profile": str(path), "fit": prof.fit, "overrides": prof.overrides})
            return
        rows = [[r["model"], r["batch_size"], dur(r["measured_s"]), dur(r["predicted_s"]),
                 f"{(r['predicted_s'] - r['measured_s']) / r['measured_s'] * 100:+.1f}%"] for r in prof.fit["steps"]]
        console.print(table(f"calibration on {prof.device['name']}", ["model", "batch", "measured", "fitted", "error"], rows))
        for r in prof.fit.get("retimed", []):
            verdict = ("kept the second: the first was slowed" if r["again_s"] < 0.95 * r["first_s"]
                       else "about the same: the fit, not the timing, misses it")
            console.print(f"timed again: {r['model']} batch {r['batch_size']}, {dur(r['first_s'])} -> "
                          f"{dur(r['again_s'])} (fitted {dur(r['fitted_s'])}; {verdict})")
        console.print("parameters: " + ", ".join(f"{k}={v:.3g}" for k, v in prof.fit["parameters"].items()))
        bw = prof.fit.get("bandwidth")
        if bw:
            console.print(f"memory (measured): STREAM {bw['stream_gb_per_s']:.1f} GB/s, writing fresh pages "
                          f"{bw['fresh_gb_per_s']:.2f} GB/s vs {bw['fill_gb_per_s']:.1f} GB/s mapped")
        dw = prof.fit.get("depthwise")
        if dw:
            from traincast.measure.kernels import DepthwiseCosts

            console.print(f"depthwise convolutions (measured): {DepthwiseCosts.from_dict(dw).summary()}")
        console.print(f"profile saved: {path}  (use: traincast predict MODEL --device local ...)")

    @app.command()
    def validate(
        device: str = typer.Option("cpu", "--device", help="cpu | cuda (must be present)"),
        calibration_models: str = typer.Option("resnet18,mobilenet_v2,regnet_x_400mf,bert-tiny,vgg11", "--calibrate-on"),
        models: str = typer.Option("resnet50,densenet121,googlenet,alexnet,efficientnet_b0,gpt2", "--models",
                                   help="held-out models"),
        batch_sizes: str = typer.Option("2,8,16", "--batch-sizes"),
        steps: int = typer.Option(7, "--steps"),
        threads: Optional[int] = typer.Option(None, "--threads"),
        plot_path: Optional[Path] = typer.Option(Path("validation.png"), "--plot"),
        layer_samples: int = typer.Option(160, "--layer-samples", min=0, help="single-op samples for the per-class fit"),
        isolate: bool = _isolate_option(),
        with_layer_sum: bool = typer.Option(False, "--layer-sum", help="also time every layer alone (CPU): "
                                            "the summed-layer ratio before and after the fitted correction"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Calibrate on some models, forecast held-out ones, compare with measured steps (MAPE)."""
        from traincast.errors import positive
        from traincast.fit.calibration import calibrate as run_calibration
        from traincast.fit.calibration import measure_steps
        from traincast.fit.validate import mape, plot_validation, predict_measured
        from traincast.measure.timing import check_device

        check_device(device)
        cal, held, bs = (_split(calibration_models, "--calibrate-on"), _split(models, "--models"),
                         _split(batch_sizes, "--batch-sizes", int))
        for b in bs:
            positive("--batch-sizes entries", b)
        _check_models(cal + held)
        overlap = set(cal) & set(held)
        if overlap:
            from traincast.errors import ConfigError

            raise ConfigError(f"held-out models must not be calibration models: {', '.join(sorted(overlap))}")
        prog, tick = _progress("measuring", (len(cal) + len(held)) * len(bs))
        with prog:
            m_cal = measure_steps(cal, bs, device=device, steps=steps, threads=threads, progress=tick, isolate=isolate)
            m_held = measure_steps(held, bs, device=device, steps=steps, threads=threads, progress=tick,
                                   isolate=isolate)
        prof = run_calibration(cal, bs, device=device, threads=threads, measured=m_cal, name="validation",
                               layer_samples=_layers(layer_samples, device, threads))
        cal_rows, held_rows = predict_measured(prof, m_cal, device), predict_measured(prof, m_held, device)
        if plot_path and str(plot_path) not in ("", "."):
            plot_validation(cal_rows, held_rows, str(plot_path))
        else:
            plot_path = None
        result = {"device": prof.device["name"], "calibration": cal_rows, "held_out": held_rows,
                  "mape_held_out_pct": mape(held_rows), "mape_calibration_pct": mape(cal_rows),
                  "parameters": prof.fit["parameters"]}
        sums_held = []
        if with_layer_sum:
            from traincast.fit.layersum import fit_layer_sum_correction, layer_sum

            if device != "cpu":
                from traincast.errors import ConfigError

                raise ConfigError("--layer-sum times layers on the CPU only; drop it for --device cuda")
            sums_cal = [layer_sum(m.model, m.batch_size, m.measured_s, threads=threads) for m in m_cal]
            sums_held = [layer_sum(m.model, m.batch_size, m.measured_s, threads=threads) for m in m_held]
            a, b = fit_layer_sum_correction(sums_cal)
            result["layer_sum"] = {
                "correction": {"a": a, "b_s": b},
                "held_out": [s.to_dict() | {"ratio_after_fit": (a * (s.layer_sum_s - s.harness_s) + b) / s.measured_s}
                             for s in sums_held],
            }
        if as_json:
            print_json(result)
            return
        for label, rows in (("calibration models (fitted on)", cal_rows), ("held-out models", held_rows)):
            console.print(table(label, ["model", "batch", "measured", "IQR", "predicted", "error",
                                        "fwd meas/pred", "bwd meas/pred", "opt meas/pred"], [
                [r["model"], r["batch_size"], dur(r["measured_s"]), dur(r["iqr_s"]), dur(r["predicted_s"]),
                 f"{r['error_pct']:+.1f}%"] + [
                    f"{dur(r['measured_phases_s'].get(p))} / {dur(r['predicted_phases_s'][p])}"
                    for p in ("forward", "backward", "optimizer")] for r in rows]))
        if sums_held:
            a, b = result["layer_sum"]["correction"]["a"], result["layer_sum"]["correction"]["b_s"]
            console.print(table(f"summed single-layer times / whole step (held-out; fitted: step = {a:.3f} x "
                                f"(sum - harness) + {b * 1e3:.1f} ms)",
                                ["model", "batch", "layers", "step", "layer sum", "harness", "ratio before",
                                 "ratio after"],
                                [[d["model"], d["batch_size"], d["n_layers"], dur(d["measured_s"]), dur(d["layer_sum_s"]),
                                  dur(d["harness_s"]), f"{d['ratio_before']:.2f}", f"{d['ratio_after_fit']:.2f}"]
                                 for d in result["layer_sum"]["held_out"]]))
        console.print(f"MAPE on calibration models: {mape(cal_rows):.1f}%")
        console.print(f"MAPE on held-out models: {mape(held_rows):.1f}%" + (f"  (plot: {plot_path})" if plot_path else ""))

    @app.command()
    def devices(as_json: bool = typer.Option(False, "--json")):
        """Device profiles made by `traincast calibrate`."""
        from traincast.paths import profiles_dir
        from traincast.predict.profile import list_profiles

        profs = list_profiles()
        if as_json:
            print_json([{"name": p.name, "device": p.device["name"], "date": p.date, "fit": p.fit} for p in profs])
            return
        if not profs:
            console.print(f"no profiles in {profiles_dir()}; run `traincast calibrate`")
            return
        rows = [[p.name, p.device["name"], p.date, f"{p.fit.get('rms_log_error', float('nan')):.3f}",
                 ", ".join(p.fit.get("models", []))] for p in profs]
        console.print(table("device profiles", ["name", "device", "date", "rms log err", "calibrated on"], rows, 9))
