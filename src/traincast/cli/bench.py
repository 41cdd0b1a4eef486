"""``traincast bench layers|model|ddp``: measure this machine (thin wrappers over traincast.measure)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from traincast.errors import ConfigError


def _parse_set(text: Optional[str]) -> dict:
    """``batch=8,kernel=3,causal=true`` -> dict of ints/floats/bools."""
    out: dict = {}
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ConfigError(f"--set takes key=value pairs separated by commas, got {part!r} (e.g. --set batch=8,kernel=3)")
        k, v = (s.strip() for s in part.split("=", 1))
        low = v.lower()
        if low in ("true", "false"):
            out[k] = low == "true"
            continue
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                raise ConfigError(f"--set {k}={v}: the value must be a number or true/false") from None
    return out


def _fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= 1000:
        return f"{ms / 1000:.3f} s"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1000:.1f} us"


def register(app: typer.Typer) -> None:
    from rich.table import Table

    from traincast.cli.render import make_console

    bench = typer.Typer(help="Measure this machine: single layers, whole training steps, data-parallel runs.",
                        no_args_is_help=True)
    app.add_typer(bench, name="bench")
    console = make_console()
    err_console = make_console(stderr=True)

    @bench.command("layers")
    def layers(
        ops: str = typer.Option("all", "--ops", help="comma list of ops or groups (cnn, transformer, pool, norm, elementwise, all)"),
        samples: int = typer.Option(300, "--samples", "-n", help="successful samples wanted in the campaign (earlier runs count)"),
        phase: str = typer.Option("forward", "--phase", help="forward | train (forward + backward + SGD step)"),
        device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N"),
        dtype: str = typer.Option("fp32", "--dtype", help="fp32 | fp16 | bf16"),
        size: str = typer.Option("auto", "--size", help="shape caps: small | medium | large (auto: small on cpu, large on cuda)"),
        seed: int = typer.Option(0, "--seed", min=0),
        campaign: Optional[str] = typer.Option(None, "--campaign", help="campaign name (default: derived from the settings)"),
        fixed: Optional[str] = typer.Option(None, "--set", help="pin op parameters, e.g. batch=8,kernel=3"),
        threads: Optional[int] = typer.Option(None, "--threads", help="torch threads (default: torch's)"),
        max_new: Optional[int] = typer.Option(None, "--max-new", min=1, help="stop after this many new samples"),
        db: Optional[str] = typer.Option(None, "--db", help="database file (default $TRAINCAST_DB)"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
    ) -> None:
        """Justus-style single-layer campaign, stored sample by sample (resumable)."""
        from dataclasses import asdict

        from traincast.measure import CampaignConfig, open_store, run_campaign
        from traincast.measure.ops import resolve_ops

        if size == "auto":
            size = "large" if device.strip().lower().startswith(("cuda", "gpu")) else "small"
        cfg = CampaignConfig(ops=resolve_ops(ops), n_samples=samples, phase=phase, device=device, dtype=dtype,
                             size=size, seed=seed, fixed=_parse_set(fixed), threads=threads, campaign_id=campaign)
        store = open_store(db)
        show = err_console.is_terminal and not as_json
        if show:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[rate]:.0f}/min"), TextColumn("{task.fields[op]:>16}"),
                                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=err_console)
        else:
            progress = None
        state: dict = {"task": None, "new": 0}
        import time as _time

        t0 = _time.perf_counter()

        def on_sample(sample, n_done, n_target):
            state["new"] += 1
            if progress is None:
                return
            if state["task"] is None:
                state["task"] = progress.add_task("layers", total=n_target, completed=n_done, rate=0.0, op="")
            rate = 60.0 * state["new"] / max(1e-9, _time.perf_counter() - t0)
            progress.update(state["task"], completed=n_done, rate=rate, op=sample.op)

        try:
            if progress is not None:
                with progress:
                    res = run_campaign(store.conn, cfg, on_sample=on_sample, max_new=max_new)
            else:
                res = run_campaign(store.conn, cfg, on_sample=on_sample, max_new=max_new)
        finally:
            store.close()
        if as_json:
            typer.echo(json.dumps(asdict(res)))
        else:
            typer.echo(
                f"campaign {res.campaign_id}: {res.n_new} new samples ({res.n_failed_new} failed) in {res.elapsed_s:.1f} s "
                f"= {res.samples_per_min:.0f} samples/min; {res.n_total}/{samples} stored in {store.path}"
            )
        if res.interrupted:
            typer.echo("interrupted: finished samples are saved; rerun the same command to continue", err=True)
            raise typer.Exit(130)

    @bench.command("model")
    def model(
        model_name: str = typer.Argument(..., metavar="MODEL", help="zoo name or spec file"),
        batch_size: int = typer.Option(..., "--batch-size", "-b"),
        device: str = typer.Option("cpu", "--device"),
        steps: int = typer.Option(10, "--steps", help="timed steps"),
        warmup: int = typer.Option(3, "--warmup", help="untimed steps first"),
        profile_steps: int = typer.Option(2, "--profile-steps", help="steps under torch.profiler for the breakdown (0: none)"),
        optimizer: str = typer.Option("sgd", "--optimizer"),
        precision: str = typer.Option("fp32", "--precision"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len"),
        threads: Optional[int] = typer.Option(None, "--threads"),
        top: int = typer.Option(10, "--top", help="rows of the module and op tables"),
        out: Optional[str] = typer.Option(None, "--out", help="write the full result (breakdown included) as JSON here"),
        db: Optional[str] = typer.Option(None, "--db", help="database file (default $TRAINCAST_DB)"),
        no_save: bool = typer.Option(False, "--no-save", help="do not store the result"),
        against: Optional[str] = typer.Option(None, "--against", help="a device profile (`traincast calibrate`): "
                                                                      "its forecast beside the measured step, per phase and per op"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Time real training steps of MODEL, with a per-module / per-op breakdown."""
        from traincast.errors import writable_file
        from traincast.measure import open_store, save_model_timing, time_model

        if out:
            writable_file(out)

        if batch_size < 1:
            raise ConfigError(f"--batch-size must be at least 1, got {batch_size}")
        prof = None
        if against is not None:
            from traincast.predict.profile import find_profile

            prof = find_profile(against)  # fails before the measuring, not after
            if profile_steps < 1:
                raise ConfigError("--against compares op by op: it needs --profile-steps 1 or more")
            pdev = str((prof.fingerprint or {}).get("device") or "")
            if pdev and pdev.split(":")[0] != device.split(":")[0]:
                raise ConfigError(f"profile {prof.name!r} was calibrated on {pdev}, the step runs on {device}")
        mt = time_model(model_name, batch_size=batch_size, device=device, steps=steps, warmup=warmup,
                        profile_steps=profile_steps, optimizer=optimizer, precision=precision, seq_len=seq_len,
                        threads=threads)
        d = mt.as_dict()
        cmp = None
        if prof is not None:
            from dataclasses import asdict

            from traincast.fit.validate import compare_step

            cmp = compare_step(mt, prof)
            d["against"] = {"profile": prof.name, **asdict(cmp)}
        if not no_save:
            with open_store(db) as store:
                d["id"] = save_model_timing(store.conn, mt)
        if out:
            with open(out, "w") as f:
                json.dump(d, f, indent=1)
        if as_json:
            typer.echo(json.dumps(d))
            return
        t = mt.timing
        console.print(f"[bold]{mt.model}[/] batch {batch_size} on {mt.device} ({mt.threads} threads): step "
                      f"{_fmt_ms(t.median_ms)} median, IQR {_fmt_ms(t.iqr_ms)}, CoV {t.cov:.1%}, {t.n_repeats} steps")
        b = mt.breakdown
        if b is None:
            return
        console.print(f"profiled: {_fmt_ms(b.profiled_step_ms)} per step; phases: "
                      + ", ".join(f"{k} {_fmt_ms(v)}" for k, v in b.per_phase_ms.items()))
        for title, rows, key in (("module", b.per_module, "total_ms"), ("aten op", b.per_aten, "total_ms")):
            tab = Table(title=f"top {top} by {title} (ms per step)")
            tab.add_column(title)
            for col in ("forward", "backward", "optimizer", "total"):
                tab.add_column(col, justify="right")
            for name, v in sorted(rows.items(), key=lambda kv: -kv[1].get(key, 0.0))[:top]:
                tab.add_row(name, *(f"{v.get(c + '_ms', 0.0):.2f}" for c in ("forward", "backward", "optimizer", "total")))
            console.print(tab)
        if cmp is not None:
            err = (cmp.predicted_ms / cmp.measured_ms - 1) * 100
            console.print(f"profile {prof.name!r} forecasts {_fmt_ms(cmp.predicted_ms)} per step ({err:+.1f}%); phases "
                          "measured / predicted: " + ", ".join(f"{k} {_fmt_ms(m)} / {_fmt_ms(p)}"
                                                              for k, (m, p) in cmp.phases.items()))
            tab = Table(title=f"top {top} ops by |measured - predicted| (ms per step; measured: profiler self time, "
                              f"without the {_fmt_ms(cmp.framework_ms)} outside aten ops that predicted per-op "
                              "overheads stand for)")
            for col in ("aten op", "phase", "ops", "measured", "predicted", "difference"):
                tab.add_column(col, justify="left" if col in ("aten op", "phase") else "right")
            for a, ph, n, m, p in cmp.ops[:top]:
                tab.add_row(a, ph, str(n), f"{m:.2f}", f"{p:.2f}", f"{m - p:+.2f}")
            console.print(tab)

    @bench.command("ddp")
    def ddp(
        model_name: str = typer.Argument(..., metavar="MODEL", help="zoo name or spec file"),
        procs: int = typer.Option(2, "--procs", "-p", help="processes (one per GPU on cuda)"),
        batch_size: int = typer.Option(8, "--batch-size", "-b", help="per process"),
        steps: int = typer.Option(10, "--steps"),
        warmup: int = typer.Option(3, "--warmup"),
        device: str = typer.Option("cpu", "--device"),
        backend: Optional[str] = typer.Option(None, "--backend", help="gloo | nccl (default: gloo on cpu, nccl on cuda)"),
        optimizer: str = typer.Option("sgd", "--optimizer"),
        precision: str = typer.Option("fp32", "--precision"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len"),
        threads_per_proc: Optional[int] = typer.Option(None, "--threads-per-proc", min=1),
        db: Optional[str] = typer.Option(None, "--db"),
        no_save: bool = typer.Option(False, "--no-save"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Data-parallel training of MODEL in P processes: iteration and all-reduce times."""
        from traincast.measure import open_store, save_ddp_timing, time_ddp

        r = time_ddp(model_name, procs=procs, batch_size=batch_size, steps=steps, warmup=warmup, device=device,
                     backend=backend, optimizer=optimizer, precision=precision, seq_len=seq_len,
                     threads_per_proc=threads_per_proc)
        d = r.as_dict()
        if not no_save:
            with open_store(db) as store:
                d["id"] = save_ddp_timing(store.conn, r)
        if as_json:
            typer.echo(json.dumps(d))
            return
        it, ar = r.iteration, r.allreduce
        console.print(f"[bold]{r.model}[/] DDP {r.procs} x batch {r.batch_size} ({r.backend}, {r.device}, "
                      f"{r.threads_per_proc} threads/proc): iteration {_fmt_ms(it.median_ms)} median, IQR {_fmt_ms(it.iqr_ms)}, CoV {it.cov:.1%}")
        console.print(f"gradients {r.grad_bytes / 2**20:.2f} MiB in {len(r.bucket_bytes)} buckets; all-reduce in DDP hook "
                      f"{_fmt_ms(r.comm_hook_ms)} per step (overlaps backward); standalone all-reduce "
                      f"{_fmt_ms(ar.median_ms if ar else None)} (IQR {_fmt_ms(ar.iqr_ms if ar else None)})")

    @bench.command("input")
    def input_cmd(
        image_size: int = typer.Option(224, "--image-size", help="the model's input size (square)"),
        source_width: int = typer.Option(500, "--source-width", help="width of the stored JPEG images"),
        source_height: int = typer.Option(375, "--source-height", help="height of the stored JPEG images"),
        jpeg_quality: int = typer.Option(90, "--jpeg-quality"),
        samples: int = typer.Option(64, "--samples", "-n", help="images per repeat"),
        repeats: int = typer.Option(5, "--repeats"),
        workers: Optional[str] = typer.Option(None, "--workers",
                                              help="also run a real DataLoader with these worker counts, e.g. 1,2"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """The image input pipeline on this CPU: JPEG decode + training augmentation per image and core."""
        from dataclasses import asdict

        from traincast.measure.inputs import time_input_pipeline, time_loader

        ws = []
        if workers:
            try:
                ws = [int(w) for w in workers.split(",") if w.strip()]
            except ValueError:
                raise ConfigError(f"--workers takes worker counts separated by commas, e.g. 1,2; got {workers!r}") from None
        t = time_input_pipeline(image_size, source_width=source_width, source_height=source_height,
                                jpeg_quality=jpeg_quality, samples=samples, repeats=repeats)
        loaders = {w: time_loader(w, image_size, source_width=source_width, source_height=source_height,
                                  jpeg_quality=jpeg_quality) for w in ws}
        if as_json:
            typer.echo(json.dumps(asdict(t) | {"per_sample_ms": t.per_sample_ms,
                                               "loader_samples_per_s": {str(k): v for k, v in loaders.items()}}))
            return
        console.print(f"{source_width}x{source_height} JPEG (q{jpeg_quality}, {t.jpeg_bytes / 1e3:.0f} kB) -> "
                      f"{image_size}x{image_size}: decode {_fmt_ms(t.decode_ms)}, augmentation {_fmt_ms(t.augment_ms)}, "
                      f"{_fmt_ms(t.per_sample_ms)} per image per core (IQR {_fmt_ms(t.iqr_ms)})")
        for w, rate in loaders.items():
            console.print(f"DataLoader, {w} worker(s): {rate:,.0f} images/s "
                          f"(one core per worker would give {w * 1e3 / t.per_sample_ms:,.0f})")
