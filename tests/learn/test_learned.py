"""The learned per-op predictor: feature mapping, shipped model, CLI, import."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch.nn as nn
import typer

from traincast.fit import datasets as D
from traincast.predict import opfeatures as F
from traincast.hardware.catalog import get_catalog
from traincast.predict.learned import LearnedPredictor, default_model_path
from traincast.workload import trace

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
needs_data = pytest.mark.skipif(not SHARED.exists(), reason="../shared/data is not beside this checkout")


def _forward_op(workload, aten):
    return next(o for o in workload.ops if o.aten == aten and o.phase == "forward")


def _features(rows: pd.DataFrame, device) -> np.ndarray:
    X, _ = F.featurize(F.attach_devices(rows, device))
    return X


@pytest.fixture(scope="module")
def v100():
    return get_catalog().device("Tesla_V100-PCIE-32GB")


@pytest.fixture(scope="module")
def learned():
    return LearnedPredictor.load_default()


# --- feature mapping: traced op == equivalent data row ------------------------------------
def test_traced_linear_maps_like_a_neusight_linear_row(v100):
    w = trace(nn.Linear(141, 13), batch_size=58, inputs=(141,))
    rows, mult = F.op_rows(_forward_op(w, "addmm"))
    assert mult == [1.0]
    data = pd.DataFrame({"B": [1], "M": [58], "N": [13], "K": [141], "Latency": [0.066]})
    ref = D.neusight_rows(data, "linear", "Tesla_V100-PCIE-32GB")
    traced = pd.DataFrame(rows)
    np.testing.assert_allclose(_features(traced, v100), _features(ref, v100))


def test_traced_conv_maps_like_a_neusight_conv_row(v100):
    w = trace(nn.Conv2d(3, 8, 3, padding=1, bias=False), batch_size=4, inputs=(3, 16, 16))
    rows, _ = F.op_rows(_forward_op(w, "convolution"))
    data = pd.DataFrame({"B": [4], "Input_Channel": [3], "Output_Channel": [8], "Kernel_Szie": [3],
                         "Input_Size": [16], "Stride": [1], "Padding": [1], "Latency": [0.05]})
    ref = D.neusight_rows(data, "conv", "Tesla_V100-PCIE-32GB")
    np.testing.assert_allclose(_features(pd.DataFrame(rows), v100), _features(ref, v100))
    # the backward conv counts one forward-equivalent conv per gradient it computes
    bwd = next(o for o in w.ops if o.aten == "convolution_backward")
    brows, bmult = F.op_rows(bwd)
    assert bmult[0] == 1.0  # first layer: weight gradient only, no input gradient
    np.testing.assert_allclose(_features(pd.DataFrame(brows[:1]), v100), _features(ref, v100))


def test_justus_same_padding_gives_tensorflow_output_size():
    df = pd.DataFrame({"op": ["conv2d", "conv2d"], "batchsize": [2, 2], "matsize": [7, 7], "kernelsize": [3, 3],
                       "channels_in": [4, 4], "channels_out": [5, 5], "strides": [2, 2], "padding": ["SAME", "VALID"],
                       "optimizer": ["none", "adam"], "time_ms_median": [1.0, 2.0]})
    r = D.justus_rows(df, gpu="K80")
    assert list(r["ho"]) == [4, 3]  # ceil(7/2), ceil((7-3+1)/2)
    assert list(r["train_step"]) == [0, 1]


# --- the shipped model (repo alone) --------------------------------------------------------
def test_shipped_model_is_small_and_sklearn_style(learned):
    assert default_model_path().stat().st_size < 20 * 2**20
    m = learned.model
    assert hasattr(m, "predict") and hasattr(m, "score") and hasattr(m, "get_params")
    assert set(m.models_) == {"gemm", "conv", "memory"}
    assert "V100" in m.trained_on_groups_
    from traincast.fit.train import DEFAULT_ESTIMATOR

    assert m.get_params()["estimator"] == DEFAULT_ESTIMATOR  # shipped as `traincast fit layers` builds it
    assert set(m.choice_) == {"conv/tf", "conv/torch", "gemm/tf", "gemm/torch", "memory/torch"}


def test_shipped_model_large_sgemm_runs_near_fp32_peak(learned):
    # a 4096^3 fp32 GEMM reaches 70-100% of datasheet fp32 peak on V100 (cuBLAS SGEMM)
    dev = get_catalog().device("V100-PCIE-32GB")
    rows = pd.DataFrame([F._row("matmul", b=1, m=4096, n=4096, k=4096)])
    ms = learned.model.predict(F.attach_devices(rows, dev))[0]
    ideal_ms = 2 * 4096**3 / (dev.fp32_tflops * 1e12) * 1e3
    assert ideal_ms / 1.0 <= ms <= ideal_ms / 0.7


def test_learned_predictor_on_unseen_gpu_covers_most_ops(learned):
    w = trace("resnet18", batch_size=4)
    l4 = get_catalog().device("L4")  # never in the layer/kernel data
    ot = learned.predict(w, l4)
    assert ot.predictor == "learned+analytical"  # a GPU outside the fit: the mean with the analytical times
    assert len(ot.times_s) == len(w.ops) and all(math.isfinite(t) and t > 0 for t in ot.times_s)
    cov = learned.coverage(w, l4, "fp32-strict")
    assert cov["learned"] + cov["fallback"] == len(w.ops)
    assert cov["learned"] > len(w.ops) // 2
    assert "native_batch_norm" in cov["fallback_by_aten"]
    # PyTorch's default fp32 runs the L4's convolutions on TF32 tensor cores: not what the fp32 data measured
    tf32 = learned.coverage(w, l4, "fp32")
    assert "convolution" in tf32["fallback_by_aten"] and tf32["learned"] < cov["learned"]
    assert "convolution" not in learned.coverage(w, get_catalog().device("V100"), "fp32")["fallback_by_aten"]
    # not covered: a CPU gets the analytical predictor's times
    cpu = get_catalog().device("generic-2core-avx2")
    assert not learned.covers(cpu)
    from traincast.predict.analytical import AnalyticalPredictor
    assert learned.predict(w, cpu).times_s == AnalyticalPredictor().predict(w, cpu).times_s


def test_on_a_gpu_outside_the_fit_covered_ops_are_the_geometric_mean_with_the_analytical_times(learned):
    from dataclasses import replace

    from traincast.predict.analytical import AnalyticalPredictor

    cat = get_catalog()
    w = trace("bert-tiny", batch_size=2, seq_len=32)
    t4, l4 = cat.device("T4"), cat.device("L4")
    assert learned.knows(t4) and not learned.knows(l4)  # T4 kernels are in the data, the L4 is in none
    assert learned.predict(w, t4).predictor == "learned"
    pure = replace(learned, blend_unseen=False, _known={})
    lp, la, an = pure.predict(w, l4).times_s, learned.predict(w, l4).times_s, AnalyticalPredictor().predict(w, l4).times_s
    cov = [i for i, (a, b) in enumerate(zip(lp, an)) if a != b]  # the ops the learned model times
    assert cov
    for i in range(len(w.ops)):
        assert la[i] == pytest.approx(math.sqrt(lp[i] * an[i]) if i in cov else an[i], rel=1e-9)
    assert pure.predict(w, t4).times_s == learned.predict(w, t4).times_s  # a GPU of the fit: as learned


# --- CLI -----------------------------------------------------------------------------------
def _run(args):
    from traincast.cli.learn import register
    from traincast.cli.main import run

    app = typer.Typer()
    register(app)

    @app.callback()
    def _root():  # keep sub-commands named even with a single command
        pass

    return run(args, the_app=app)


def test_eval_layers_missing_columns_exit_2(tmp_path, capsys):
    p = tmp_path / "bad.csv"
    pd.DataFrame({"op": ["conv2d"], "batchsize": [4], "matsize": [32], "channels_in": [3]}).to_csv(p, index=False)
    assert _run(["eval-layers", str(p), "--gpu", "V100-PCIE-32GB"]) == 2
    err = capsys.readouterr().err
    assert "kernelsize" in err and "channels_out" in err and "strides" in err and "padding" in err


def test_eval_layers_unknown_gpu_suggests(tmp_path, capsys):
    p = tmp_path / "d.csv"
    pd.DataFrame({"op": ["dense"], "batchsize": [4], "dim_input": [32], "dim_output": [8]}).to_csv(p, index=False)
    assert _run(["eval-layers", str(p), "--gpu", "A100-PCIE-41GB"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU" in err and "did you mean" in err and "A100-PCIE-40GB" in err, err


def test_eval_layers_counts_and_skips_nan_rows_and_writes_predictions(tmp_path, capsys):
    p, out = tmp_path / "d.csv", tmp_path / "pred.csv"
    pd.DataFrame({"gpu": ["X"] * 3, "op": ["dense"] * 3, "batchsize": [16, None, 64], "dim_input": [1024, 512, "abc"],
                  "dim_output": [1024, 512, 256], "optimizer": ["none"] * 3,
                  "time_ms_median": [0.1, 0.2, 0.3]}).to_csv(p, index=False)
    assert _run(["eval-layers", str(p), "--gpu", "T4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1 predicted" in text and "2 skipped" in text and "MAPE" in text
    pred = pd.read_csv(out)
    assert pred["predicted_ms"].notna().sum() == 1 and pred["predicted_ms"].iloc[0] > 0


def test_eval_layers_neusight_format(tmp_path, capsys):
    p = tmp_path / "k.csv"
    pd.DataFrame({"OPName": ["bmm", "softmax"], "Latency": [0.05, 0.04], "B": [8, 64], "M": [64, None],
                  "N": [64, None], "K": [64, None], "H": [None, 128]}).to_csv(p, index=False)
    assert _run(["eval-layers", str(p), "--gpu", "A100-PCIE-40GB", "--format", "neusight"]) == 0
    assert "2 predicted" in capsys.readouterr().out


def test_data_import_into_store(tmp_path, capsys):
    from traincast.store import Store

    d = tmp_path / "data" / "layers" / "justus2018"
    d.mkdir(parents=True)
    df = pd.DataFrame({"gpu": ["K80"] * 3, "op": ["dense"] * 3, "batchsize": [4, 8, None], "dim_input": [16, 32, 64],
                       "dim_output": [8, 8, 8], "precision": [32] * 3, "activation": ["relu"] * 3,
                       "optimizer": ["sgd", "none", "none"], "time_ms_median": [0.5, 0.4, 0.3]})
    with gzip.open(d / "K80_dense.csv.gz", "wt") as fh:
        df.to_csv(fh, index=False)
    db = tmp_path / "t.db"
    assert _run(["data", "import", str(tmp_path / "data"), "--db", str(db), "-q"]) == 0
    assert "skipped 1" in capsys.readouterr().out
    with Store(db) as s:
        n = s.conn.execute("SELECT count(*) FROM data_op_timings WHERE kind='matmul'").fetchone()[0]
        assert n == 2
    assert _run(["data", "import", str(tmp_path / "nope"), "--db", str(db)]) == 2


# --- leave-one-GPU-out on a small subsample (shared data) ---------------------------------
@needs_data
def test_leave_v100_out_beats_the_paper_on_a_subsample():
    from traincast.fit.learn import OpTimeRegressor, mape

    rows = pd.concat([D.load_justus(SHARED, max_rows_per_file=100),
                      D.load_neusight(SHARED, ops=("linear", "bmm", "conv", "ln", "softmax", "add", "gelu"),
                                      max_rows_per_file=200)], ignore_index=True)
    rows = F.attach_devices(rows)
    rows["gpu_group"] = rows["gpu"].map(F.gpu_group)
    train, test = rows[rows.gpu_group != "V100"], rows[rows.gpu_group == "V100"]
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # a shared, loaded machine: OpenMP threads only contend
        m = OpTimeRegressor(max_iter=60, loss="squared_error").fit(train, train["time_ms"].to_numpy())
    err = mape(m.predict(test), test["time_ms"].to_numpy())
    assert err < 30.0, err  # Justus et al. 2018: 39.6% leaving V100 out


def test_mlp_estimator_fits_and_predicts_like_the_default():
    """The paper's model (an MLP) behind the same estimator; unknown estimators are refused."""
    import numpy as np
    import pandas as pd
    import pytest

    from traincast.errors import DataError
    from traincast.predict import opfeatures as F
    from traincast.fit.learn import OpTimeRegressor
    from traincast.hardware import get_catalog

    rng = np.random.default_rng(0)
    rows = []
    for _ in range(300):
        m, n, k = (int(x) for x in rng.integers(64, 2048, 3))
        rows.append({"kind": "matmul", "b": 1, "m": m, "n": n, "k": k, "gpu": "V100"})
    df = pd.DataFrame(rows)
    if not F.valid_mask(df).all():
        pytest.skip("feature schema needs more columns than this synthetic table has")
    df = F.attach_devices(df, get_catalog().device("V100"))
    X, roof = F.featurize(df)
    y = roof * 1.7  # a constant factor over the roofline: any sane regressor learns it
    mlp = OpTimeRegressor(estimator="mlp", max_iter=300).fit(df, y)
    assert -mlp.score(df, y) < 10.0
    with pytest.raises(DataError, match="estimator must be"):
        OpTimeRegressor(estimator="svm").fit(df, y)


# --- estimator="auto": the choice follows a CV grouped by GPU -----------------------------
def _synthetic_gpus(log_ratio, n=160, peaks=(4.0, 6.0, 9.0, 13.5), seed=0, column="dev_fp32_tflops"):
    """Matmul rows on four made-up GPUs that differ only in one spec (``column``: fp32 peak by default, set
    to ``peaks``); time = roofline * exp(log_ratio(rows))."""
    rng = np.random.default_rng(seed)
    parts = []
    for i, peak in enumerate(peaks):
        m, n_, k = (rng.integers(64, 2048, n) for _ in range(3))
        df = F.attach_devices(pd.DataFrame({"kind": "matmul", "b": 1, "m": m, "n": n_, "k": k, "gpu_group": f"G{i}"}),
                              get_catalog().device("V100"))
        df[column] = peak
        parts.append(df)
    df = pd.concat(parts, ignore_index=True)
    _, roof = F.featurize(df)
    return df, roof * np.exp(log_ratio(df))


def test_auto_estimator_picks_the_candidate_with_the_lowest_gpu_grouped_cv_mape():
    import warnings

    from threadpoolctl import threadpool_limits

    from traincast.fit.learn import OpTimeRegressor

    noise = np.random.default_rng(1).normal(0.0, 0.5, 4 * 160)
    cases = {
        # time scales smoothly with the GPU's peak: trees cannot extrapolate to the end GPUs, an MLP can
        "mlp": lambda d: np.log(d["dev_fp32_tflops"].to_numpy() / 8.0),
        # bands in k, the same on every GPU: trees fit the steps, a small MLP smooths them away
        "hgb": lambda d: 0.7 * ((d["k"].to_numpy() // 128) % 2),
        # a constant ratio under heavy noise: anything fitted to the noise does worse than the constant
        "roofline": lambda d: np.log(2.5) + noise,
    }
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLP convergence warnings at this small max_iter
        for expected, fn in cases.items():
            df, y = _synthetic_gpus(fn)
            m = OpTimeRegressor(estimator="auto", max_iter=100, candidates=("hgb", "mlp", "ensemble", "roofline"))
            m.fit(df, y)
            scores = m.cv_scores_["gemm/torch"]
            assert set(scores) == {"hgb", "mlp", "ensemble", "roofline"}
            # the folds are the GPUs: every candidate is scored on each GPU held out
            assert all(set(per) == {"G0", "G1", "G2", "G3"} for per in m.cv_group_scores_["gemm/torch"].values())
            assert m.choice_ == {"gemm/torch": min(scores, key=scores.get)} == {"gemm/torch": expected}, scores
            assert any(expected in line for line in m.summary())
            if expected == "mlp":
                # the chosen candidate is the one that predicts: same as a model fitted with it alone
                alone = OpTimeRegressor(estimator="mlp", max_iter=100).fit(df, y)
                np.testing.assert_allclose(m.predict(df), alone.predict(df), rtol=1e-9)
                assert m.score(df, y) > alone.score(df, y) - 1e-9
            if expected == "roofline":
                ratio = m.predict(df) / m.base_ms(df)
                np.testing.assert_allclose(ratio, ratio[0])  # one fitted constant times the base (the roofline)
                np.testing.assert_allclose(m.base_ms(df), F.featurize(df)[1])


def test_auto_drops_device_specs_when_they_only_name_the_gpu():
    """GPUs that differ only in clock, with per-GPU offsets the clock does not explain: trees that split on
    the spec columns hand a held-out GPU its neighbour's offset; without them the model learns the shape
    effect and a typical offset, and the GPU-grouped CV sees it."""
    import warnings

    from threadpoolctl import threadpool_limits

    from traincast.fit.learn import HW_FEATURES, OpTimeRegressor

    clocks = (1000.0, 1200.0, 1400.0, 1600.0)
    offset = dict(zip(clocks, (0.3, -0.1, 0.2, -0.3)))
    noise = np.random.default_rng(5).normal(0.0, 0.05, 4 * 160)  # noise-free targets stall absolute-error boosting
    df, y = _synthetic_gpus(lambda d: 1.5 * (d["m"].to_numpy() < 700) + d["dev_clock_mhz"].map(offset).to_numpy() + noise,
                            peaks=clocks, column="dev_clock_mhz")
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = OpTimeRegressor(estimator="auto", max_iter=100, candidates=("hgb", "hgb_nohw", "roofline")).fit(df, y)
    scores = m.cv_scores_["gemm/torch"]
    assert m.choice_ == {"gemm/torch": "hgb_nohw"}, scores
    assert scores["hgb_nohw"] < 0.9 * min(scores["hgb"], scores["roofline"]), scores
    # the chosen member never reads a device-spec column: changing them changes nothing
    moved = df.copy()
    moved["dev_clock_mhz"] = moved["dev_clock_mhz"] * 3
    moved["dev_mem_gib"] = moved["dev_mem_gib"] * 2
    np.testing.assert_allclose(m.predict(moved), m.predict(df), rtol=1e-12)
    hgb = OpTimeRegressor(max_iter=100).fit(df, y)
    assert not np.allclose(hgb.predict(moved), hgb.predict(df))  # while hgb reads them
    assert {"clock_mhz", "log_mem_gib"} <= set(HW_FEATURES)


def test_hybrid_keeps_device_specs_for_gpus_of_the_fit_and_drops_them_for_others():
    """``hybrid``: rows of a GPU in the fit are predicted as ``hgb`` predicts them (its spec columns pick out
    its own ratios); PyTorch rows of a GPU the fit never saw as ``hgb_nohw`` (no spec column read)."""
    import warnings

    from threadpoolctl import threadpool_limits

    from traincast.fit.learn import OpTimeRegressor

    clocks = (1000.0, 1200.0, 1400.0, 1600.0)
    offset = dict(zip(clocks, (0.3, -0.1, 0.2, -0.3)))
    noise = np.random.default_rng(5).normal(0.0, 0.05, 4 * 160)
    df, y = _synthetic_gpus(lambda d: 1.5 * (d["m"].to_numpy() < 700) + d["dev_clock_mhz"].map(offset).to_numpy() + noise,
                            peaks=clocks, column="dev_clock_mhz")
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = {e: OpTimeRegressor(estimator=e, max_iter=100).fit(df, y) for e in ("hgb", "hgb_nohw", "hybrid")}
    np.testing.assert_allclose(fits["hybrid"].predict(df), fits["hgb"].predict(df), rtol=1e-12)
    new = df.copy()
    new["dev_clock_mhz"] = 1300.0  # a GPU between the fitted ones
    np.testing.assert_allclose(fits["hybrid"].predict(new), fits["hgb_nohw"].predict(new), rtol=1e-12)
    assert not np.allclose(fits["hybrid"].predict(new), fits["hgb"].predict(new))
    # on the GPUs it knows, hybrid is as good as hgb and better than the spec-blind member
    assert fits["hybrid"].score(df, y) > fits["hgb_nohw"].score(df, y) + 1.0


def test_ratio_constant_minimises_mape():
    from traincast.fit.learn import ratio_constant

    t = np.random.default_rng(3).lognormal(0.5, 0.8, 301)
    c = math.exp(ratio_constant(np.log(t)))
    grid = np.exp(np.linspace(np.log(t.min()), np.log(t.max()), 4001))
    mapes = np.abs(grid[:, None] / t[None, :] - 1).mean(axis=1)
    assert np.abs(c / t - 1).mean() <= mapes.min() + 1e-12
    assert abs(c - np.median(t)) > 1e-3  # not the plain median: weighted by 1/t


def test_estimator_params_are_checked():
    from traincast.errors import DataError
    from traincast.fit.learn import OpTimeRegressor

    est = OpTimeRegressor(estimator="auto", cv_splits=3)
    assert est.get_params()["cv_splits"] == 3 and OpTimeRegressor(**est.get_params()).estimator == "auto"
    with pytest.raises(ValueError, match="invalid parameter"):
        est.set_params(n_estimators=10)
    df, y = _synthetic_gpus(lambda d: np.zeros(len(d)), n=20)
    with pytest.raises(DataError, match="candidates"):
        OpTimeRegressor(estimator="auto", candidates=("hgb", "svm")).fit(df, y)
    with pytest.raises(DataError, match="cv_splits"):
        OpTimeRegressor(estimator="auto", cv_splits=1).fit(df, y)


def test_fit_layers_unknown_estimator_exit_2(capsys):
    assert _run(["fit", "layers", "--estimator", "svm", "--out", "/nonexistent/x.pkl"]) == 2
    err = capsys.readouterr().err
    assert "--estimator" in err and "auto" in err
    assert _run(["fit", "layers", "--normalizer", "bandwidth", "--out", "/nonexistent/x.pkl"]) == 2
    err = capsys.readouterr().err
    assert "--normalizer" in err and "tf-compute" in err


# --- few-shot adaptation to one GPU (GpuAdapter) -----------------------------------------------
class _Given:
    """A stand-in base model whose prediction is the row's ``p`` column."""

    def predict(self, rows):
        return rows["p"].to_numpy(dtype=float)


def _adapt_rows(n=60, seed=1, tf=1):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"p": np.exp(rng.uniform(np.log(0.01), np.log(50.0), n)), "framework_tf": tf})


def test_gpu_adapter_recovers_a_machine_power_law_from_few_rows():
    from traincast.fit.learn import GpuAdapter, mape

    rows = _adapt_rows()
    y = 2.0 * rows["p"].to_numpy() ** 0.8  # a machine 2x slower at 1 ms, relatively slower on small ops
    fit, rest = rows.iloc[:20], rows.iloc[20:]
    ad = GpuAdapter(_Given()).fit(fit, y[:20])
    a, b, m, lo, hi = ad.coef_[2]  # cell: TensorFlow, forward
    assert abs(b - 0.8) < 0.03, b
    inside = (np.log(rest["p"]) - m).between(lo, hi).to_numpy()
    assert inside.sum() > 30 and mape(ad.predict(rest)[inside], y[20:][inside]) < 2.0
    big = pd.DataFrame({"p": [1e4], "framework_tf": 1})  # past the rows' range: the scale, not the tilt
    assert np.isclose(ad.predict(big)[0], np.exp(a + b * hi + (np.log(1e4) - m - hi)))
    assert mape(_Given().predict(rest), y[20:]) > 40.0  # the base alone is far off


def test_gpu_adapter_shrinks_the_slope_with_few_rows_and_shrugs_off_an_outlier():
    from traincast.fit.learn import GpuAdapter, mape

    rows = _adapt_rows(n=40)
    y = 3.0 * rows["p"].to_numpy()
    y_bad = y.copy()
    y_bad[0] *= 10.0  # one preempted measurement
    ad = GpuAdapter(_Given()).fit(rows.iloc[:10], y_bad[:10])
    assert abs(ad.coef_[2][1] - 1.0) < 0.05
    assert mape(ad.predict(rows.iloc[10:]), y[10:]) < 3.0
    two = GpuAdapter(_Given()).fit(rows.iloc[:2], y[:2])  # two rows: a scale, slope held at 1 by the prior
    assert mape(two.predict(rows.iloc[2:]), y[2:]) < 1.0


def test_gpu_adapter_corrects_each_framework_and_phase_apart():
    from traincast.errors import DataError
    from traincast.fit.learn import GpuAdapter

    tf, torch_rows = _adapt_rows(n=10, tf=1), _adapt_rows(n=10, seed=2, tf=0)
    tf["train_step"] = np.arange(10) % 2
    y = np.where(tf["train_step"] > 0, 5.0, 2.0) * tf["p"]  # training steps cost more on this machine
    ad = GpuAdapter(_Given()).fit(tf, y.to_numpy())
    assert sorted(ad.coef_) == [2, 3]
    assert np.allclose(ad.predict(torch_rows), torch_rows["p"])  # a framework it did not see: unchanged
    assert np.allclose(ad.predict(tf), y, rtol=1e-3)
    with pytest.raises(DataError, match="not fitted"):
        GpuAdapter(_Given()).predict(tf)
    with pytest.raises(DataError, match="measured time"):
        GpuAdapter(_Given()).fit(tf, np.full(10, np.nan))


def test_eval_layers_adapt_uses_k_rows_and_scores_the_others(tmp_path, capsys):
    rng = np.random.default_rng(3)
    n = 30
    df = pd.DataFrame({"gpu": "X", "op": "dense", "batchsize": rng.integers(1, 64, n),
                       "dim_input": rng.integers(64, 4096, n), "dim_output": rng.integers(64, 4096, n),
                       "optimizer": "none", "time_ms_median": 1.0})
    p, out = tmp_path / "d.csv", tmp_path / "pred.csv"
    df.to_csv(p, index=False)
    assert _run(["eval-layers", str(p), "--gpu", "T4", "--out", str(out)]) == 0
    df["time_ms_median"] = 3.0 * pd.read_csv(out)["predicted_ms"]  # this "machine" is 3x the model
    df.to_csv(p, index=False)
    capsys.readouterr()
    assert _run(["eval-layers", str(p), "--gpu", "T4", "--out", str(out)]) == 0
    assert "MAPE 66.7%" in capsys.readouterr().out
    assert _run(["eval-layers", str(p), "--gpu", "T4", "--out", str(out), "--adapt", "8"]) == 0
    text = capsys.readouterr().out
    assert "adapted to T4 with 8 measured rows" in text and "MAPE 0.0%" in text, text
    pred = pd.read_csv(out)
    assert pred["adapt_row"].sum() == 8
    assert _run(["eval-layers", str(p), "--gpu", "T4", "--adapt", "31"]) == 2
    assert "needs 31 rows" in capsys.readouterr().err
    assert _run(["eval-layers", str(p), "--gpu", "T4", "--adapt", "-1"]) == 2


def test_harness_floor_per_kind_of_kernel():
    """The kernel data's timing harness adds a floor that depends on the kind of kernel (NeuSight: about
    0.05 ms per linear, 0.03 per bmm, 0.025 per elementwise kernel): each GPU's smallest latency per kind,
    the median over GPUs for a GPU the data lacks."""
    from traincast.fit.train import harness_floors
    from traincast.predict.learned import LearnedPredictor, harness_floor_keys

    rows = pd.DataFrame({
        "gpu": ["Tesla_T4", "Tesla_T4", "Tesla_V100-PCIE-32GB", "Tesla_P4", "Tesla_T4", "Tesla_V100-PCIE-32GB"],
        "op": ["linear", "linear", "linear", "linear", "add", "relu"],
        "kind": ["matmul", "matmul", "matmul", "matmul", "elementwise", "elementwise"],
        "b": [1, 1, 1, 1, 0, 0],
        "time_ms": [0.06, 0.05, 0.07, 0.04, 0.02, 0.03],
    })
    fl = harness_floors(rows)
    assert fl["linear"] == {"T4": 0.05, "V100-PCIE-32GB": 0.07, "P4": 0.04, "default": 0.05}
    assert fl["elementwise"] == {"T4": 0.02, "V100-PCIE-32GB": 0.03, "default": 0.025}
    traced = pd.DataFrame({"kind": ["matmul", "matmul", "conv", "norm", "softmax", "elementwise"],
                           "b": [1, 8, 1, 1, 1, 1]})
    assert list(harness_floor_keys(traced)) == ["linear", "bmm", "conv", "ln", "softmax", "elementwise"]

    class M:  # a fitted model's stored floors are all the predictor reads here
        harness_floor_ms_ = fl
        min_time_ms_ = 0.02

    lp = LearnedPredictor(model=M())
    cat = get_catalog()
    two = traced.iloc[[0, 5]]
    np.testing.assert_allclose(lp.harness_floor_ms(two, cat.device("V100-PCIE-32GB")), [0.07, 0.03])
    np.testing.assert_allclose(lp.harness_floor_ms(two, cat.device("A100-SXM4-80GB")), [0.05, 0.025])
    np.testing.assert_allclose(LearnedPredictor(model=M(), measurement_floor_ms=0.01).harness_floor_ms(
        two, cat.device("T4")), [0.01, 0.01])


def _tf_dense_rows(bandwidths, n=200, seed=0):
    """Justus-style TensorFlow dense layers (forward, batch 1-16: memory-bound by the roofline) on made-up GPUs
    that differ only in DRAM bandwidth; time = 3x the fp32 compute time, as if bandwidth held none of them."""
    rng = np.random.default_rng(seed)
    parts = []
    for i, bw in enumerate(bandwidths):
        df = pd.DataFrame({"kind": "matmul", "b": 1, "m": rng.integers(1, 17, n), "n": rng.integers(256, 4096, n),
                           "k": rng.integers(256, 4096, n), "framework_tf": 1, "train_step": 0, "gpu_group": f"G{i}"})
        df = F.attach_devices(df, get_catalog().device("V100"))
        df["dev_bw_gbps"] = bw
        parts.append(df)
    df = pd.concat(parts, ignore_index=True)
    tc = 2 * df["m"] * df["n"] * df["k"] / (df["dev_fp32_tflops"] * 1e12) * 1e3
    noise = np.random.default_rng(seed + 1).normal(0.0, 0.03, len(df))
    return df, (3.0 * tc * np.exp(noise)).to_numpy()


def test_tf_layers_learn_their_ratio_to_the_compute_time_and_carry_it_to_a_new_bandwidth():
    """The default normalizer takes TensorFlow matmul/conv layers' ratio to FLOPs / peak: a GPU whose bandwidth
    lies outside the fitted ones keeps the ratio. Learned against the roofline, the ratio moves with bandwidth and
    trees cannot follow it past the fitted range. PyTorch rows keep the roofline either way."""
    import warnings

    from threadpoolctl import threadpool_limits

    from traincast.fit.learn import OpTimeRegressor, mape

    df, y = _tf_dense_rows((400.0, 600.0, 900.0, 1300.0))
    new, y_new = _tf_dense_rows((150.0,), seed=7)
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = {nm: OpTimeRegressor(max_iter=100, normalizer=nm).fit(df, y) for nm in ("tf-compute", "roofline")}
    assert mape(fits["tf-compute"].predict(new), y_new) < 8.0
    assert mape(fits["roofline"].predict(new), y_new) > 40.0
    # what the ratio is taken to: the compute time (+ the roofline's floor) for these rows, the roofline for PyTorch
    X, roof = F.featurize(new)
    tc = 2 * new["m"] * new["n"] * new["k"] / (new["dev_fp32_tflops"] * 1e12) * 1e3
    np.testing.assert_allclose(fits["tf-compute"].base_ms(new), tc + F.ROOF_FLOOR_MS, rtol=1e-6)
    torch_rows = new.assign(framework_tf=0)
    np.testing.assert_allclose(fits["tf-compute"].base_ms(torch_rows), F.featurize(torch_rows)[1])
    np.testing.assert_allclose(fits["roofline"].base_ms(new), roof)


def test_saved_models_are_data_that_round_trip_and_other_versions_are_refused(tmp_path):
    """A model is saved as a zip of a JSON manifest and skops estimators, stamped with the scikit-learn version:
    it loads back with the same predictions; a file of another scikit-learn version, a pickle or a file of
    another kind is refused with a message naming the command that rebuilds it."""
    import json
    import zipfile

    import sklearn

    from traincast.errors import DataError
    from traincast.fit.learn import OpTimeRegressor
    from traincast.predict.opmodel import load_op_model

    df, y = _tf_dense_rows((400.0, 900.0), n=80)
    m = OpTimeRegressor(max_iter=30, normalizer="roofline", estimator="hybrid").fit(df, y)
    path = tmp_path / "m.tcm"
    m.save(path)
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        assert manifest["sklearn_version"] == sklearn.__version__ and manifest["format_version"] == 1
        assert all(n.endswith(".skops") for n in z.namelist() if n != "manifest.json")
    back = load_op_model(path)
    np.testing.assert_array_equal(back.predict(df), m.predict(df))
    assert back.get_params() == {k: (tuple(v) if isinstance(v, list) else v) for k, v in m.get_params().items()}
    assert back.summary() == m.summary()
    # the same file stamped by another scikit-learn
    other = tmp_path / "other.tcm"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(other, "w") as dst:
        for n in src.namelist():
            data = src.read(n)
            if n == "manifest.json":
                data = json.dumps(dict(json.loads(data), sklearn_version="0.99.0")).encode()
            dst.writestr(n, data)
    with pytest.raises(DataError, match=r"scikit-learn 0\.99\.0.*traincast fit layers"):
        load_op_model(other)
    pkl = tmp_path / "old.pkl"
    pkl.write_bytes(b"\x80\x04not a zip")
    with pytest.raises(DataError, match="pickle .* no longer read"):
        load_op_model(pkl)
    with pytest.raises(DataError, match="no model file"):
        load_op_model(tmp_path / "missing.tcm")


def test_bad_normalizer_is_refused():
    from traincast.errors import DataError
    from traincast.fit.learn import OpTimeRegressor

    df, y = _tf_dense_rows((400.0, 900.0), n=80)
    assert OpTimeRegressor().get_params()["normalizer"] == "tf-compute"
    with pytest.raises(DataError, match="normalizer must be one of"):
        OpTimeRegressor(normalizer="bandwidth").fit(df, y)
