"""End-to-end job regression: augmentation, selection, model ranking, extrapolation, CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from traincast.cli.main import _register_all, app, run
from traincast.errors import DataError, TraincastError
from traincast.fit import jobs as J


def _law(n: int = 240, seed: int = 0) -> pd.DataFrame:
    """epoch_s = 0.8 * batch / gpus + 3 (+ 0.05 * batch / gpus + 2 on resnet), with 0.5 % noise."""
    rng = np.random.default_rng(seed)
    batch = rng.choice([16, 32, 64, 128, 256, 512], n)
    gpus = rng.choice([1, 2, 4, 8], n)
    net = rng.choice(["alexnet", "resnet"], n)
    t = 0.8 * batch / gpus + 3.0 + np.where(net == "resnet", 0.05 * batch / gpus + 2.0, 0.0)
    t *= 1 + 0.005 * rng.standard_normal(n)
    return pd.DataFrame({"batch": batch, "gpus": gpus, "network": net, "epoch_s": t})


@pytest.fixture(scope="module")
def law_records():
    return J.records_from_frame(_law(), "epoch_s")


def test_augmentation_names_and_values():
    df = _law(20)
    f = J.JobFeatures(["batch", "gpus"], ["network"]).fit(df)
    names = list(f.feature_names_)
    assert "1/gpus" in names and "batch*1/gpus" in names and "network=resnet" in names
    assert "gpus*1/gpus" not in names
    X = f.transform(df)
    np.testing.assert_allclose(X[:, names.index("batch*1/gpus")], df.batch / df.gpus)


def test_augmented_linear_learns_law_and_beats_plain_on_extrapolation(law_records):
    reg = J.JobRegressor(models=["linear_plain", "linear"]).fit(law_records)
    cv = {s.model: s.mape_pct for s in reg.ranking_}
    assert cv["linear"] < 2.0
    assert cv["linear"] < cv["linear_plain"]
    assert reg.best_.model == "linear"
    assert reg.score(law_records) > 0.99

    ext = J.extrapolate(law_records, "batch", 64, models=["linear_plain", "linear"])
    assert ext.n_train > 0 and ext.n_test > 0
    assert ext.score_of("linear").mape_pct < 2.0
    assert ext.score_of("linear").mape_pct < ext.score_of("linear_plain").mape_pct
    ext_g = J.extrapolate(law_records, "gpus", 2, models=["linear_plain", "linear"])
    assert ext_g.score_of("linear").mape_pct < ext_g.score_of("linear_plain").mape_pct


def test_forward_selection_finds_the_law(law_records):
    reg = J.JobRegressor(models=["linear"], select="sfs").fit(law_records)
    assert "batch*1/gpus" in reg.selected_features_
    assert len(reg.selected_features_) <= 20
    assert reg.best_.mape_pct < 2.0


def test_ranking_contains_every_model():
    rec = J.records_from_frame(_law(80, seed=1), "epoch_s")
    reg = J.JobRegressor(cv=3).fit(rec)
    assert {s.model for s in reg.ranking_} == set(J.MODEL_NAMES)
    mapes = [s.mape_pct for s in reg.ranking_]
    assert mapes == sorted(mapes)
    assert all(np.isfinite(s.rmse) for s in reg.ranking_)
    text = J.format_ranking(reg.ranking_)
    for label in J.MODEL_LABELS.values():
        assert label in text
    assert reg.predict(rec.X).shape == (80,)


def test_leave_one_group_out():
    rec = J.records_from_frame(_law(120, seed=2), "epoch_s")
    res = J.leave_one_group_out(rec, "network", models=["linear"])
    assert [r.description for r in res] == ["hold out network = alexnet", "hold out network = resnet"]
    assert all(r.n_test > 0 for r in res)


@pytest.mark.parametrize("frame,target,msg", [
    (pd.DataFrame({"a": range(20), "b": range(20)}), "epoch_s", "not in the data"),
    (pd.DataFrame({"a": range(20), "epoch_s": ["x"] * 20}), "epoch_s", "not numeric"),
    (pd.DataFrame({"a": range(1, 5), "epoch_s": range(1, 5)}), "epoch_s", "too few"),
])
def test_bad_records(frame, target, msg):
    with pytest.raises(DataError, match=msg):
        J.records_from_frame(frame, target)


def test_unknown_columns():
    rec = J.records_from_frame(_law(40), "epoch_s")
    with pytest.raises(DataError, match="unknown column"):
        J.extrapolate(rec, "nosuch", 3)
    with pytest.raises(TraincastError):
        J.parse_extrapolation("batch")
    with pytest.raises(TraincastError, match="unknown model"):
        J.JobRegressor(models=["svm"]).fit(rec)


@pytest.fixture(scope="module")
def cli():
    _register_all()
    return lambda *a: run(list(a), app)


def test_cli_missing_target_exits_2(cli, tmp_path, capsys):
    p = tmp_path / "jobs.csv"
    _law(40).drop(columns=["epoch_s"]).to_csv(p, index=False)
    assert cli("fit", "jobs", str(p), "--target", "epoch_s") == 2
    assert "epoch_s" in capsys.readouterr().err
    assert cli("fit", "jobs", str(tmp_path / "none.csv"), "--target", "epoch_s") == 2


def test_cli_fit_jobs_json(cli, tmp_path, capsys):
    p = tmp_path / "jobs.csv"
    _law(120).to_csv(p, index=False)
    code = cli("fit", "jobs", str(p), "--target", "epoch_s", "--models", "linear_plain,linear",
               "--extrapolate", "batch:64", "--holdout-group", "network", "--json")
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"] == "linear" and out["rows"] == 120
    assert len(out["holdouts"]) == 3
    assert out["holdouts"][0]["scores"][0]["model"] == "linear"
    assert cli("fit", "jobs", str(p), "--target", "epoch_s", "--holdout-group", "nosuch") == 2
    assert cli("fit", "jobs", str(p), "--target", "epoch_s", "--extrapolate", "network:3") == 2


# --------------------------------------------------------------------------- stepwise selection


def _known(n: int, seed: int) -> pd.DataFrame:
    """t = 2 + 0.8 * batch / gpus + 0.3 * layers, 1 % noise; noise_a and noise_b have no effect."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"batch": rng.choice([16, 32, 64, 128, 256], n), "gpus": rng.choice([1, 2, 4, 8], n),
                       "layers": rng.integers(2, 40, n), "noise_a": rng.uniform(1, 10, n),
                       "noise_b": rng.integers(1, 100, n)})
    df["t"] = (2 + 0.8 * df.batch / df.gpus + 0.3 * df.layers) * (1 + 0.01 * rng.standard_normal(n))
    return df


def test_stepwise_select_keeps_true_columns_and_not_noise():
    noise_runs = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(100, 5))  # columns 0, 1 matter; 2-4 are noise
        y = 1 + 2 * X[:, 0] - 3 * X[:, 1] + 0.5 * rng.standard_normal(100)
        chosen = J.stepwise_select(X, y)
        assert {0, 1} <= set(chosen), (seed, chosen)
        noise_runs += bool(set(chosen) - {0, 1})
    # three null columns tested at alpha_in = 0.05: about 1 - 0.95^3 = 14 % of runs admit one
    assert noise_runs <= 5


def test_stepwise_select_drops_a_column_that_later_ones_make_redundant():
    dropped = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        x1, x2 = rng.normal(size=80), rng.normal(size=80)
        x3 = x1 + x2 + 0.6 * rng.normal(size=80)  # the best single predictor of y, but only a noisy proxy
        X, y = np.column_stack([x1, x2, x3]), x1 + x2 + 0.2 * rng.normal(size=80)
        assert J.stepwise_select(X, y, max_steps=1) == [2]  # enters first
        chosen = J.stepwise_select(X, y)
        assert {0, 1} <= set(chosen)
        dropped += 2 not in chosen
    assert dropped >= 8  # x3's p-value is uniform once x1, x2 are in: it stays in ~10 % of runs


def test_stepwise_select_bad_alphas():
    X, y = np.random.default_rng(0).normal(size=(20, 2)), np.arange(1.0, 21.0)
    with pytest.raises(TraincastError, match="must not exceed"):
        J.stepwise_select(X, y, alpha_in=0.2, alpha_out=0.1)
    with pytest.raises(TraincastError, match=r"\(0, 1\)"):
        J.stepwise_select(X, y, alpha_in=0.0)


def test_stepwise_job_regressor_finds_the_augmented_law():
    clean = 0
    for seed in range(8):
        rec = J.records_from_frame(_known(120, seed), "t")
        reg = J.JobRegressor(models=["linear"], select="stepwise", alpha_in=0.01, alpha_out=0.02).fit(rec)
        sel = set(reg.selected_features_)
        assert {"batch*1/gpus", "layers"} <= sel, (seed, sel)
        clean += not any("noise" in s for s in sel)
        assert reg.best_.n_features == len(sel)
        assert reg.best_.mape_pct < 2.0
    assert clean >= 6  # ~ 35 null augmented columns tested at 0.01 per step


def test_stepwise_extrapolates_better_than_all_augmented_features():
    rec = J.records_from_frame(_known(120, 0), "t")
    none = J.extrapolate(rec, "batch", 64, models=["linear"])
    step = J.extrapolate(rec, "batch", 64, models=["linear"], select="stepwise")
    assert step.score_of("linear").mape_pct < 2.0
    assert step.score_of("linear").mape_pct < none.score_of("linear").mape_pct
    assert {"batch*1/gpus", "layers"} <= set(step.selected_features) and none.selected_features == ()


def test_cli_fit_jobs_stepwise(cli, tmp_path, capsys):
    p = tmp_path / "jobs.csv"
    _known(120, 1).to_csv(p, index=False)
    code = cli("fit", "jobs", str(p), "--target", "t", "--models", "linear", "--select", "stepwise",
               "--alpha-in", "0.01", "--alpha-out", "0.02", "--extrapolate", "gpus:2", "--json")
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"batch*1/gpus", "layers"} <= set(out["selected_features"])
    assert out["ranking"][0]["features"] == len(out["selected_features"])
    assert {"batch*1/gpus", "layers"} <= set(out["holdouts"][0]["selected_features"])
    assert cli("fit", "jobs", str(p), "--target", "t", "--select", "stepwise", "--alpha-in", "0.2") == 2
    assert "alpha" in capsys.readouterr().err
    assert cli("fit", "jobs", str(p), "--target", "t", "--select", "lasso") == 2


# --------------------------------------------------------------------------- saved models


def test_save_load_round_trip(law_records, tmp_path):
    reg = J.JobRegressor(models=["linear", "tree"], select="sfs").fit(law_records)
    path = reg.save(tmp_path / "m.tcm")
    back = J.JobRegressor.load(path)
    assert np.array_equal(back.predict(law_records.X), reg.predict(law_records.X))
    assert back.target_ == "epoch_s" and back.feature_names_in_ == ("batch", "gpus", "network")
    assert back.best_ == reg.best_ and back.ranking_ == reg.ranking_
    assert back.selected_features_ == reg.selected_features_


def test_save_drops_training_matrices_but_keeps_fitted_families(law_records, tmp_path):
    reg = J.JobRegressor(models=["linear", "tree"]).fit_all(law_records)
    back = J.JobRegressor.load(reg.save(tmp_path / "m.tcm"))
    assert not hasattr(back, "_train_XA")
    np.testing.assert_array_equal(back.predict(law_records.X, model="tree"), reg.predict(law_records.X, model="tree"))
    only_best = J.JobRegressor(models=["linear", "tree"]).fit(law_records)
    with pytest.raises(TraincastError, match="fit_all"):
        only_best.predict(law_records.X, model="tree" if only_best.best_.model != "tree" else "linear")


def test_predict_jobs_counts_skips_and_scores():
    rec = J.records_from_frame(_law(120), "epoch_s")
    reg = J.JobRegressor(models=["linear"]).fit(rec)
    rows = _law(20, seed=5).astype(object)
    rows.loc[0, "batch"] = None
    rows.loc[1, "gpus"] = "many"
    rows.loc[2, "gpus"] = 0  # 1/gpus is a feature: out of its domain
    rows.loc[3, "network"] = "vgg"  # predicted, flagged as unseen
    res = J.predict_jobs(reg, rows)
    assert (res.rows, res.predicted_rows, res.skipped_rows, res.unseen_rows) == (20, 17, 3, 1)
    assert res.frame["predicted_epoch_s"].isna().sum() == 3
    assert res.target == "epoch_s" and res.scored_rows == 17
    y = rows.epoch_s.to_numpy(float)[3:]
    assert res.mape_pct == pytest.approx(J.mape_pct(y, res.frame["predicted_epoch_s"].to_numpy()[3:]))
    with pytest.raises(DataError, match="missing feature column"):
        J.predict_jobs(reg, rows.drop(columns=["gpus"]))
    no_target = J.predict_jobs(reg, rows.drop(columns=["epoch_s"]))
    assert no_target.mape_pct is None and no_target.predicted_rows == 17


def test_cli_save_and_eval_jobs(cli, tmp_path, capsys):
    train, rows = tmp_path / "jobs.csv", tmp_path / "rows.csv"
    _law(120).to_csv(train, index=False)
    _law(30, seed=7).to_csv(rows, index=False)
    model, pred = tmp_path / "m.tcm", tmp_path / "pred.csv"
    assert cli("fit", "jobs", str(train), "--target", "epoch_s", "--models", "linear,tree", "--save", str(model)) == 0
    capsys.readouterr()
    assert cli("eval-jobs", str(rows), "--model", str(model), "--out", str(pred)) == 0
    text = capsys.readouterr().out
    assert "30 predicted" in text and "MAPE" in text
    got = pd.read_csv(pred)
    expect = J.JobRegressor.load(model).predict(_law(30, seed=7))
    np.testing.assert_allclose(got["predicted_epoch_s"].to_numpy(), expect, rtol=1e-12)
    import re

    mape = float(re.search(r"^MAPE ([\d.]+)%", text, re.M).group(1))
    assert mape == pytest.approx(J.mape_pct(got.epoch_s, got.predicted_epoch_s), abs=0.006)


def test_cli_eval_jobs_bad_inputs(cli, tmp_path, capsys):
    import pickle

    train, rows = tmp_path / "jobs.csv", tmp_path / "rows.csv"
    _law(60).to_csv(train, index=False)
    model = tmp_path / "m.tcm"
    assert cli("fit", "jobs", str(train), "--target", "epoch_s", "--models", "linear", "--save", str(model)) == 0
    capsys.readouterr()
    _law(10).drop(columns=["network"]).to_csv(rows, index=False)
    assert cli("eval-jobs", str(rows), "--model", str(model)) == 2
    assert "missing feature column(s) 'network'" in capsys.readouterr().err
    nan_rows = _law(10)
    nan_rows.loc[[2, 5], "batch"] = np.nan
    nan_rows.to_csv(rows, index=False)
    assert cli("eval-jobs", str(rows), "--model", str(model), "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["skipped_rows"] == 2 and out["predicted_rows"] == 8 and out["scored_rows"] == 8
    other = tmp_path / "other.pkl"
    other.write_bytes(pickle.dumps({"not": "a model"}))
    (tmp_path / "empty.pkl").write_bytes(b"")
    for bad in (train, other, tmp_path / "empty.pkl", tmp_path / "none.pkl"):
        assert cli("eval-jobs", str(rows), "--model", str(bad)) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    _law(10)[["batch"]].assign(gpus="x", network="alexnet").to_csv(rows, index=False)
    assert cli("eval-jobs", str(rows), "--model", str(model)) == 2
    assert "none of the 10 rows" in capsys.readouterr().err
    assert cli("fit", "jobs", str(train), "--target", "epoch_s", "--save", str(tmp_path / "no" / "m.pkl")) == 2


# --------------------------------------------------------------------------- job records from `bench model` runs


def _stored_run(model: str, batch: int, step_ms: float, seq_len=None):
    from traincast.measure import ModelTiming, Timing

    t = Timing(step_ms, 0.0, 0.0, step_ms, step_ms, step_ms, 3, samples_ms=(step_ms,) * 3)
    return ModelTiming(model, batch, "cpu", "sgd", "fp32", seq_len, t, None, 1)


def test_store_job_records_from_real_runs(tmp_path):
    from traincast.measure import collect_fingerprint, save_model_timing, time_model
    from traincast.store import Store
    from traincast.workload import trace

    with Store(tmp_path / "m.db") as store:
        runs = [time_model("mnist-cnn", batch_size=b, steps=2, warmup=1, profile_steps=0, threads=1) for b in (2, 4)]
        for mt in runs:
            save_model_timing(store.conn, mt)
        save_model_timing(store.conn, _stored_run("Sequential", 8, 1.0))  # a bare nn.Module: cannot be traced
        res = J.store_job_records(store.conn)
    assert res.stored_rows == 3 and sum(res.skipped.values()) == 1 and "'Sequential'" in next(iter(res.skipped))
    f = res.frame
    assert list(f.batch_size) == [2, 4] and set(f.model) == {"mnist-cnn"} and "seq_len" not in f.columns
    np.testing.assert_allclose(f.step_s, [mt.timing.median_ms / 1e3 for mt in runs])
    wl = trace("mnist-cnn", batch_size=2)
    assert (f.parameters == wl.parameters).all()
    np.testing.assert_allclose(f.fwd_gflop_per_sample, wl.flops("forward") / 2 / 1e9)
    assert (f.threads == 1).all() and (f.hardware == collect_fingerprint("cpu", 1).cpu_model).all()


def test_cli_store_jobs_export_fit_and_eval(cli, tmp_path, capsys):
    """Runs stored through save_model_timing -> data jobs --source store -> fit jobs --save -> eval-jobs."""
    from traincast.measure import save_model_timing
    from traincast.store import Store

    db = tmp_path / "m.db"
    rng = np.random.default_rng(0)
    gflop = {"mnist-cnn": 0.002847228, "pcam-cnn": 5.403364236, "dcgan": 0.835428389}  # traced forward GFLOPs
    with Store(db) as store:
        for m, g in gflop.items():
            for b in (1, 2, 4, 8, 16, 32):  # 1.5 ms + 0.9 ms per forward GFLOP of the batch, 1 % noise
                save_model_timing(store.conn, _stored_run(m, b, (1.5 + 0.9 * b * g) * (1 + 0.01 * rng.standard_normal())))
    out = tmp_path / "jobs.csv"
    assert cli("data", "jobs", "--source", "store", "--db", str(db), "--out", str(out)) == 0
    assert "wrote 18 store job records" in capsys.readouterr().out
    jobs = pd.read_csv(out)
    assert len(jobs) == 18 and J.STORE_TARGET in jobs.columns
    np.testing.assert_allclose(jobs.groupby("model").fwd_gflop_per_sample.first().sort_index(),
                               pd.Series(gflop).sort_index(), rtol=1e-6)
    model = tmp_path / "m.tcm"
    assert cli("fit", "jobs", str(out), "--target", "step_s", "--models", "linear_plain,linear",
               "--cv", "3", "--save", str(model), "--json") == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["best"] == "linear" and fit["ranking"][0]["mape_pct"] < 5.0
    assert "batch_size" in fit["numeric"] and "fwd_gflop_per_sample" in fit["numeric"]
    assert cli("eval-jobs", str(out), "--model", str(model), "--json") == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["predicted_rows"] == 18 and ev["scored_rows"] == 18 and ev["mape_pct"] < 5.0


def test_cli_store_jobs_bad_inputs(cli, tmp_path, capsys):
    from traincast.store import Store

    empty = tmp_path / "empty.db"
    Store(empty).close()
    assert cli("data", "jobs", "--source", "store", "--db", str(empty), "--out", str(tmp_path / "j.csv")) == 2
    assert "no whole-step timings" in capsys.readouterr().err
    assert cli("data", "jobs", "--source", "store", "--db", str(tmp_path / "none.db"), "--out", str(tmp_path / "j.csv")) == 2
    assert cli("data", "jobs", "--db", str(empty), "--out", str(tmp_path / "j.csv")) == 2  # --db without --source store
    assert not (tmp_path / "j.csv").exists()
