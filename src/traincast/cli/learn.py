"""``traincast eval-layers``, ``traincast data import``, ``traincast fit layers``: the learned per-op model.

Thin wrappers over :mod:`traincast.fit` (evaluate, importer, train).
"""

from __future__ import annotations

from typing import Optional

import typer

from traincast.errors import ConfigError


def register(app: typer.Typer) -> None:
    from rich.console import Console

    console = Console()

    @app.command("eval-layers")
    def eval_layers_cmd(
        csv: str = typer.Argument(..., help="CSV in the layers/justus2018 or kernels/neusight schema"),
        gpu: str = typer.Option(..., "--gpu", help="GPU the rows are predicted for (catalog name; may be one the model never saw)"),
        fmt: str = typer.Option("justus", "--format", help="justus | neusight"),
        out: Optional[str] = typer.Option(None, "--out", help="write the rows with a predicted_ms column here"),
        model: Optional[str] = typer.Option(None, "--model", help="a model file from `traincast fit layers` (default: the shipped one)"),
    ):
        """Predict each layer/kernel row's time on GPU; print MAPE when measured times are present."""
        from traincast.fit.evaluate import eval_layers
        from traincast.predict.learned import LearnedPredictor

        m = LearnedPredictor.load(model).model if model else None
        res = eval_layers(csv, gpu, fmt.lower(), model=m)
        if out:
            try:
                res.frame.to_csv(out, index=False)
            except OSError as exc:
                raise ConfigError(f"cannot write {out!r}: {exc.strerror}") from None
        console.print(f"{res.rows} rows on {res.gpu}: {res.predicted_rows} predicted"
                      + (f", {res.skipped_rows} skipped (missing or non-numeric fields)" if res.skipped_rows else ""))
        if res.mape_pct is not None:
            console.print(f"MAPE {res.mape_pct:.1f}%  RMSE {res.rmse_ms:.3f} ms  (against {res.measured_column})")
        if out:
            console.print(f"wrote {out}")

    data = typer.Typer(help="Public measurement data: import into the store.", no_args_is_help=True)
    app.add_typer(data, name="data")

    @data.command("import")
    def data_import_cmd(
        folder: str = typer.Argument(..., help="the shared data folder (holds layers/justus2018 and kernels/neusight)"),
        db: Optional[str] = typer.Option(None, "--db", help="database file (default $TRAINCAST_DB)"),
        quiet: bool = typer.Option(False, "--quiet", "-q"),
    ):
        """Import the Justus 2018 layer and NeuSight kernel timings into the store."""
        from traincast.fit.importer import import_data
        from traincast.store import Store

        with Store(db) as store:
            s = import_data(store, folder, log=None if quiet else console.print)
            console.print(f"imported {s.rows} rows from {s.files} files into {store.path}"
                          + (f"; skipped {s.skipped_rows} rows with missing or non-numeric fields" if s.skipped_rows else ""))

    fit = typer.Typer(help="Fit learned models from measurements.", no_args_is_help=True)
    app.add_typer(fit, name="fit")

    @fit.command("layers")
    def fit_layers_cmd(
        data_dir: Optional[str] = typer.Option(None, "--data", help="shared data folder (default ../shared/data)"),
        db: Optional[str] = typer.Option(None, "--db", help="fit on the rows `traincast data import` put in this database instead"),
        out: Optional[str] = typer.Option(None, "--out", help="model file (default: the shipped traincast/predict/data/learned_ops.pkl)"),
        rows_per_file: int = typer.Option(1500, "--rows-per-file", help="rows sampled from each GPU x op file"),
        exclude: Optional[str] = typer.Option(None, "--exclude", help="comma list of GPU models to leave out (e.g. V100,A100)"),
        max_iter: int = typer.Option(300, "--max-iter", help="boosting iterations per op family"),
    ):
        """Rebuild the learned per-op model from the layer/kernel data."""
        from traincast.errors import positive
        from traincast.fit.train import fit_layers

        positive("--rows-per-file", rows_per_file)
        positive("--max-iter", max_iter)
        groups = tuple(g.strip() for g in exclude.split(",") if g.strip()) if exclude else ()
        if db:
            from traincast.store import Store

            with Store(db) as store:
                fit_layers(out=out, max_rows_per_file=rows_per_file, exclude_groups=groups, store=store,
                           log=console.print, max_iter=max_iter)
        else:
            from pathlib import Path

            if data_dir and not Path(data_dir).is_dir():
                raise ConfigError(f"--data {data_dir!r} is not a folder")
            fit_layers(data_dir, out=out, max_rows_per_file=rows_per_file, exclude_groups=groups,
                       log=console.print, max_iter=max_iter)
