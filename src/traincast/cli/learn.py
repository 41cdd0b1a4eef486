"""``traincast eval-layers``, ``traincast data import``, ``traincast fit layers``: the learned per-op model;
``traincast data jobs``, ``traincast fit jobs``, ``traincast eval-jobs``: end-to-end job regression.

Thin wrappers over :mod:`traincast.fit` (evaluate, importer, train, jobs).
"""

from __future__ import annotations

from typing import Optional

import typer

from traincast.errors import ConfigError, DataError


def register(app: typer.Typer) -> None:
    from traincast.cli.render import make_console

    console = make_console()

    @app.command("eval-layers")
    def eval_layers_cmd(
        csv: str = typer.Argument(..., help="CSV in the layers/justus2018 or kernels/neusight schema"),
        gpu: str = typer.Option(..., "--gpu", help="GPU the rows are predicted for (catalog name; may be one the model never saw)"),
        fmt: str = typer.Option("justus", "--format", help="justus | neusight"),
        out: Optional[str] = typer.Option(None, "--out", help="write the rows with a predicted_ms column here"),
        model: Optional[str] = typer.Option(None, "--model", help="a model file from `traincast fit layers` (default: the shipped one)"),
        adapt: int = typer.Option(0, "--adapt", help="adapt the model to this GPU with K measured rows of the CSV drawn at random; MAPE is over the other rows"),
        seed: int = typer.Option(0, "--seed", min=0, help="with --adapt: the random draw"),
    ):
        """Predict each layer/kernel row's time on GPU; print MAPE when measured times are present."""
        from traincast.fit.evaluate import eval_layers
        from traincast.predict.learned import LearnedPredictor

        m = LearnedPredictor.load(model).model if model else None
        res = eval_layers(csv, gpu, fmt.lower(), model=m, adapt=adapt, seed=seed)
        if out:
            try:
                res.frame.to_csv(out, index=False)
            except OSError as exc:
                raise ConfigError(f"cannot write {out!r}: {exc.strerror or exc}") from None
        console.print(f"{res.rows} rows on {res.gpu}: {res.predicted_rows} predicted"
                      + (f", {res.skipped_rows} skipped (missing or non-numeric fields)" if res.skipped_rows else ""))
        if res.adapt_rows:
            console.print(f"adapted to {res.gpu} with {res.adapt_rows} measured rows (column adapt_row)")
        if res.mape_pct is not None:
            console.print(f"MAPE {res.mape_pct:.1f}%  RMSE {res.rmse_ms:.3f} ms  (against {res.measured_column}"
                          + (", rows not used to adapt)" if res.adapt_rows else ")"))
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
        out: Optional[str] = typer.Option(None, "--out", help="model file (default: the shipped traincast/predict/data/learned_ops.tcm)"),
        rows_per_file: int = typer.Option(1500, "--rows-per-file", help="rows sampled from each GPU x op file"),
        exclude: Optional[str] = typer.Option(None, "--exclude", help="comma list of GPU models to leave out (e.g. V100,A100)"),
        max_iter: int = typer.Option(300, "--max-iter", help="boosting iterations (MLP: epochs) per op family"),
        estimator: Optional[str] = typer.Option(
            None, "--estimator", help="hybrid | hgb | mlp | ensemble | hgb_nohw | auto (per op family and framework, by GPU-grouped CV); "
                                      "default: the one docs/learned.md says"),
        normalizer: str = typer.Option(
            "tf-compute", "--normalizer", help="the datasheet time each op's ratio is learned against: tf-compute "
                                               "(roofline; fp32 compute time for TensorFlow matmul/conv layers) | "
                                               "compute (for every matmul/conv) | roofline"),
    ):
        """Rebuild the learned per-op model from the layer/kernel data."""
        from traincast.errors import positive
        from traincast.fit.learn import ESTIMATORS, NORMALIZERS
        from traincast.fit.train import DEFAULT_ESTIMATOR, fit_layers

        positive("--rows-per-file", rows_per_file)
        positive("--max-iter", max_iter)
        estimator = (estimator or DEFAULT_ESTIMATOR).strip().lower()
        if estimator not in ESTIMATORS:
            raise ConfigError(f"--estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
        normalizer = normalizer.strip().lower()
        if normalizer not in NORMALIZERS:
            raise ConfigError(f"--normalizer must be one of {', '.join(NORMALIZERS)}, got {normalizer!r}")
        if out:
            from traincast.errors import writable_file

            writable_file(out)
        groups = tuple(g.strip() for g in exclude.split(",") if g.strip()) if exclude else ()
        if db:
            from traincast.store import Store

            with Store(db, must_exist=True) as store:
                fit_layers(out=out, max_rows_per_file=rows_per_file, exclude_groups=groups, store=store,
                           log=console.print, max_iter=max_iter, estimator=estimator, normalizer=normalizer)
        else:
            from pathlib import Path

            if data_dir and not Path(data_dir).is_dir():
                raise ConfigError(f"--data {data_dir!r} is not a folder")
            fit_layers(data_dir, out=out, max_rows_per_file=rows_per_file, exclude_groups=groups,
                       log=console.print, max_iter=max_iter, estimator=estimator, normalizer=normalizer)

    @fit.command("adapt")
    def fit_adapt_cmd(
        csv: Optional[str] = typer.Argument(None, help="kernels measured on the GPU, in the kernels/neusight "
                                                        "schema (OPName, dimensions, Latency), or use --from-store"),
        gpu: str = typer.Option(..., "--gpu", help="the GPU the rows were measured on (catalog name)"),
        from_store: bool = typer.Option(False, "--from-store", help="use the forward samples `traincast bench "
                                                                    "layers --device cuda` stored instead of a CSV"),
        db: Optional[str] = typer.Option(None, "--db", help="with --from-store: database file (default $TRAINCAST_DB)"),
        campaign: Optional[str] = typer.Option(None, "--campaign", help="with --from-store: only this campaign's samples"),
        model: Optional[str] = typer.Option(None, "--model", help="a model file from `traincast fit layers` (default: the shipped one)"),
        out: Optional[str] = typer.Option(None, "--out", help="write the adaptation here (default: where `predict` finds it for --gpu)"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Adapt the learned per-op model to one GPU from rows measured on it; `predict --predictor learned`
        then uses it on that GPU."""
        from pathlib import Path

        from traincast.cli.render import print_json, table
        from traincast.fit import adapt as A
        from traincast.hardware.catalog import get_catalog
        from traincast.predict.learned import LearnedPredictor, default_model_path

        if (csv is None) == (not from_store):
            raise ConfigError("give either a CSV of rows measured on the GPU or --from-store")
        if not from_store and (db or campaign):
            raise ConfigError("--db and --campaign go with --from-store")
        device = get_catalog().device(gpu)
        model_path = Path(model) if model else default_model_path()
        base = LearnedPredictor.load(model_path)
        if from_store:
            from traincast.store import Store

            with Store(db, must_exist=True) as store:
                got = A.rows_from_store(store.conn, device, campaign=campaign)
                source = f"{store.path}" + (f" campaign {campaign}" if campaign else "")
            rows, y, timing = got.rows, got.time_ms, "in-step"
            for why, n in got.skipped.items():
                console.print(f"skipped {n} sample(s): {why}")
            console.print(f"{len(rows)} samples measured on {', '.join(got.gpu_names)}")
        else:
            rows, y = A.rows_from_csv(csv, device)
            source, timing = str(Path(csv).resolve()), "kernel"
        ad = A.fit_adaptation(rows, y, base.model, device.name, timing=timing, source=source,
                              model_sha256=base.model_sha256)
        path = ad.save(out)
        if as_json:
            print_json({**ad.to_dict(), "path": str(path)})
            return
        console.print(table(f"adaptation to {device.name} ({ad.rows} rows, {timing} timings)",
                            ["cell", "rows", "x model at the rows' mean", "slope"],
                            [[n, k, f"{f:.3g}", f"{b:.3f}"] for n, k, f, b in ad.cell_summary()], 1))
        cv = "n/a (fewer than 10 rows)" if ad.cv_mape_pct is None else f"{ad.cv_mape_pct:.1f}%"
        console.print(f"MAPE on the rows: {ad.base_mape_pct:.1f}% unadapted, {ad.fit_mape_pct:.1f}% adapted; "
                      f"5-fold cross-validated {cv}")
        console.print(f"saved {path}" + ("" if out else f"; `traincast predict --predictor learned --gpu "
                                                         f"'{device.name}'` uses it"))

    # ------------------------------------------------------------------ end-to-end job regression

    @data.command("jobs")
    def data_jobs_cmd(
        out: str = typer.Option(..., "--out", help="CSV file to write the job records to"),
        source: str = typer.Option("vtrain", "--source", help="vtrain (Megatron GPT on A100, target iteration_ms) | mlperf (time to train, target ttt_min) | store (the `traincast bench model` runs in the database, target step_s)"),
        data_dir: Optional[str] = typer.Option(None, "--data", help="shared data folder (default ../shared/data)"),
        db: Optional[str] = typer.Option(None, "--db", help="with --source store: database file (default $TRAINCAST_DB)"),
        model: Optional[str] = typer.Option(None, "--model", help="with --source store: only this model's runs"),
        device: Optional[str] = typer.Option(None, "--device", help="with --source store: only runs on this device (cpu, cuda:0)"),
    ):
        """Write tidy job-level records (features + target) for `traincast fit jobs`: from the shared data, or
        from the whole-step timings `traincast bench model` stored."""
        source = source.lower()
        if source not in ("vtrain", "mlperf", "store"):
            raise ConfigError(f"--source must be vtrain, mlperf or store, got {source!r}")
        if source != "store" and (db or model or device):
            raise ConfigError("--db, --model and --device go with --source store")
        if source == "store":
            from traincast.fit.jobs import STORE_TARGET, store_job_records
            from traincast.store import Store

            if data_dir:
                raise ConfigError("--data does not go with --source store (it reads the database)")
            with Store(db, must_exist=True) as store:
                res = store_job_records(store.conn, model=model, device=device)
                path = store.path
            frame, target = res.frame, STORE_TARGET
            for reason, n in res.skipped.items():
                console.print(f"skipped {n} run(s): {reason}")
            if frame.empty:
                raise ConfigError(f"none of the {res.stored_rows} stored runs in {path} could be made a job record")
        else:
            from traincast.fit.datasets import default_data_dir
            from traincast.fit.jobs import build_job_records

            frame, target = build_job_records(data_dir or default_data_dir(), source)
        try:
            frame.to_csv(out, index=False)
        except OSError as exc:
            raise ConfigError(f"cannot write {out!r}: {exc.strerror or exc}") from None
        console.print(f"wrote {len(frame)} {source} job records to {out} (target column {target!r})")

    @fit.command("jobs")
    def fit_jobs_cmd(
        csv: str = typer.Argument(..., help="job records: numeric/categorical feature columns and the target column"),
        target: str = typer.Option(..., "--target", help="the column to predict (e.g. epoch_s, iteration_ms)"),
        select: str = typer.Option("none", "--select", help="feature selection of the augmented linear models: none | sfs (forward, by CV MAPE) | stepwise (Draper-Smith, by partial-F p-values)"),
        alpha_in: float = typer.Option(0.05, "--alpha-in", help="--select stepwise: p-value to enter"),
        alpha_out: float = typer.Option(0.10, "--alpha-out", help="--select stepwise: p-value to stay (>= --alpha-in)"),
        max_features: int = typer.Option(20, "--max-features", help="cap of the sfs / stepwise selection"),
        save: Optional[str] = typer.Option(None, "--save", help="save the fitted model (best by CV, refitted on all rows) to this file, for `traincast eval-jobs`"),
        extrapolate: Optional[str] = typer.Option(None, "--extrapolate", help="COL:THRESHOLD: train on COL <= THRESHOLD, test above"),
        holdout_group: Optional[str] = typer.Option(None, "--holdout-group", help="COL: leave each value of COL out in turn (e.g. gpu)"),
        models: Optional[str] = typer.Option(None, "--models", help="comma list among linear_plain, linear, ridge, tree, forest, boosting, mlp"),
        drop: Optional[str] = typer.Option(None, "--drop", help="comma list of columns that are not features"),
        cv: int = typer.Option(5, "--cv", help="cross-validation folds"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    ):
        """Rank end-to-end job-time regressors by K-fold CV (MAPE, RMSE); optionally test extrapolation."""
        from traincast.cli.render import print_json, table
        from traincast.errors import positive
        from traincast.fit import jobs as J

        positive("--cv", cv)
        positive("--max-features", max_features)
        if cv < 2:
            raise ConfigError("--cv must be at least 2")
        select = select.lower()
        if select not in J.SELECTIONS:
            raise ConfigError(f"--select must be one of {', '.join(J.SELECTIONS)}, got {select!r}")
        if not (0 < alpha_in < 1 and 0 < alpha_out < 1) or alpha_in > alpha_out:
            raise ConfigError(f"--alpha-in and --alpha-out must lie in (0, 1) with --alpha-in <= --alpha-out, "
                              f"got {alpha_in:g} and {alpha_out:g}")
        kw = {"max_features": max_features, "alpha_in": alpha_in, "alpha_out": alpha_out}
        names = [m.strip() for m in models.split(",") if m.strip()] if models else None
        dropped = [c.strip() for c in drop.split(",") if c.strip()] if drop else ()
        if target in dropped:
            raise ConfigError(f"--drop {target}: that is the target (--target), not a feature")
        if holdout_group and holdout_group == target:
            raise ConfigError(f"--holdout-group {target}: that is the target; group by a feature, e.g. gpu_type")
        if select != "stepwise" and (alpha_in != 0.05 or alpha_out != 0.10):
            raise ConfigError("--alpha-in and --alpha-out go with --select stepwise")
        rec = J.load_jobs(csv, target, drop=dropped)
        if cv > len(rec.frame):
            raise ConfigError(f"--cv {cv} folds need at least {cv} rows; {csv} has {len(rec.frame)}")
        ext = J.parse_extrapolation(extrapolate) if extrapolate else None
        if ext:
            J.check_extrapolation_column(rec, ext[0])
        if holdout_group and holdout_group not in rec.frame.columns:
            raise DataError(f"--holdout-group: unknown column {holdout_group!r}; features: {', '.join(rec.features)}")
        if save:  # fail before the fit on a folder that is not there
            from pathlib import Path

            if not Path(save).resolve().parent.is_dir():
                raise ConfigError(f"--save {save!r}: folder {str(Path(save).resolve().parent)!r} does not exist")
        reg = J.JobRegressor(models=names, select=select, cv=cv, **kw).fit(rec)
        result = {"rows": len(rec.frame), "skipped_rows": rec.skipped_rows, "target": target,
                  "numeric": list(rec.numeric), "categorical": list(rec.categorical),
                  "augmented_features": len(reg.features_.feature_names_),
                  "selected_features": list(reg.selected_features_) if select != "none" else None,
                  "best": reg.best_.model, "ranking": J.ranking_rows(reg.ranking_)}
        if save:
            reg.save(save)
            result["saved"] = save
        holdouts = []
        if ext:
            holdouts.append(J.extrapolate(rec, ext[0], ext[1], models=names, select=select, cv=cv, **kw))
        if holdout_group:
            holdouts.extend(J.leave_one_group_out(rec, holdout_group, models=names, select=select, cv=cv, **kw))
        result["holdouts"] = [{"description": h.description, "n_train": h.n_train, "n_test": h.n_test,
                               "selected_features": list(h.selected_features) if select != "none" else None,
                               "scores": J.ranking_rows(h.scores)} for h in holdouts]
        if as_json:
            print_json(result)
            return

        def show(title, scores):
            console.print(table(title, ["model", "RMSE", "MAPE %", "log y", "features", "params"],
                                [[s.label, f"{s.rmse:.4g}", f"{s.mape_pct:.2f}", "yes" if s.log_target else "no",
                                  s.n_features, s.params] for s in scores]))

        console.print(f"{len(rec.frame)} rows" + (f" ({rec.skipped_rows} skipped)" if rec.skipped_rows else "")
                      + f"; target {target}; numeric: {', '.join(rec.numeric) or '-'}; "
                      f"categorical: {', '.join(rec.categorical) or '-'}; "
                      f"{len(reg.features_.feature_names_)} augmented features")
        how = {"sfs": "forward selection", "stepwise": "stepwise selection"}
        if select != "none":
            console.print(f"{how[select]} kept {len(reg.selected_features_)}: {', '.join(reg.selected_features_) or '-'}")
        show(f"{cv}-fold cross-validation, best first", reg.ranking_)
        if save:
            console.print(f"saved the {reg.best_.label.lower()} model to {save}")
        for h in holdouts:
            show(f"{h.description} ({h.n_train} train / {h.n_test} test rows)", h.scores)

    @app.command("eval-jobs")
    def eval_jobs_cmd(
        csv: str = typer.Argument(..., help="job rows with the saved model's feature columns (the target column optional)"),
        model: str = typer.Option(..., "--model", help="a model file from `traincast fit jobs ... --save FILE`"),
        out: Optional[str] = typer.Option(None, "--out", help="write the rows with a predicted_<target> column here"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
    ):
        """Predict each job row with a saved job model; print MAPE/RMSE when the rows hold the measured target."""
        from traincast.cli.render import print_json
        from traincast.fit import jobs as J

        reg = J.JobRegressor.load(model)
        res = J.predict_jobs(reg, csv)
        if out:
            try:
                res.frame.to_csv(out, index=False)
            except OSError as exc:
                raise ConfigError(f"cannot write {out!r}: {exc.strerror or exc}") from None
        if as_json:
            print_json({"model": reg.best_.model, "target": reg.target_, "rows": res.rows,
                        "predicted_rows": res.predicted_rows, "skipped_rows": res.skipped_rows,
                        "unseen_category_rows": res.unseen_rows, "scored_rows": res.scored_rows,
                        "mape_pct": res.mape_pct, "rmse": res.rmse, "out": out})
            return
        console.print(f"{res.rows} rows, {res.predicted_rows} predicted by the {reg.best_.label.lower()} model "
                      f"(CV MAPE {reg.best_.mape_pct:.2f}%)"
                      + (f", {res.skipped_rows} skipped (missing, non-numeric or non-positive features)" if res.skipped_rows else ""))
        if res.unseen_rows:
            console.print(f"{res.unseen_rows} row(s) have a category value the model never saw; their predictions "
                          "are extrapolations")
        if res.mape_pct is not None:
            console.print(f"MAPE {res.mape_pct:.2f}%  RMSE {res.rmse:.4g}  (against {res.target}, {res.scored_rows} rows)")
        if out:
            console.print(f"wrote {out}")
