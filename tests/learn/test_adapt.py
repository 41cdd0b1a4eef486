"""A saved adaptation of the learned model to one GPU (`traincast fit adapt`) and its use by `predict`."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from traincast.cli.main import _register_all, run
from traincast.predict import opfeatures as F
from traincast.fit.adapt import GpuAdaptation, adaptation_path, fit_adaptation, rows_from_store, sample_row
from traincast.fit.evaluate import canonical_rows
from traincast.hardware.catalog import get_catalog
from traincast.predict import make_predictor
from traincast.predict.roofline import op_overheads_s
from traincast.predict.learned import LearnedPredictor
from traincast.workload import trace

_register_all()


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINCAST_HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def t4():
    return get_catalog().device("T4")


@pytest.fixture(scope="module")
def learned():
    return LearnedPredictor.load_default()


def cli(capsys, *args):
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _kernel_csv(path, dev, learned, factor, n=40, seed=0):
    """NeuSight-schema linear kernels whose 'measured' latency is ``factor`` x the shipped model's."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"OPName": "linear", "B": 1, "M": rng.integers(64, 4096, n), "N": rng.integers(64, 4096, n),
                       "K": rng.integers(64, 4096, n)})
    rows = F.attach_devices(canonical_rows(df, "neusight", dev.name), dev)
    df["Latency"] = factor * learned.model.predict(rows)
    df.to_csv(path, index=False)
    return path


def _single_row_ops(wl):
    """Indices of traced fp32 ops that map to one canonical row with multiplier 1, and those rows."""
    idx, rows = [], []
    for i, op in enumerate(wl.ops):
        m = F.op_rows(op)
        if m and len(m[0]) == 1 and m[1][0] == 1.0:
            idx.append(i)
            rows.append(m[0][0])
    return idx, pd.DataFrame(rows)


def test_fit_adapt_from_kernels_saves_what_predict_applies(tmp_path, capsys, t4, learned):
    csv = _kernel_csv(tmp_path / "t4.csv", t4, learned, 3.0)
    code, out, err = cli(capsys, "fit", "adapt", str(csv), "--gpu", "T4")
    assert code == 0, err
    assert "66.7% unadapted, 0.0% adapted" in out and "cross-validated 0.0%" in out, out
    saved = GpuAdaptation.load(adaptation_path(t4.name))
    assert saved.rows == 40 and saved.timing == "kernel" and saved.applies_to_torch
    assert saved.model_sha256 == learned.model_sha256
    assert np.isclose(saved.cell_summary()[0][2], 3.0, rtol=1e-3)  # factor at the rows' mean

    # the forecast takes it: each covered op's kernel is 3x the model's, less the harness floor
    wl = trace("bert-tiny", batch_size=2, seq_len=32)
    adapted = make_predictor("learned", t4, "auto")
    assert adapted.inner.adaptation is not None
    assert any(n.startswith("learned predictor adapted to") for n in adapted.notes(wl, t4))
    base_t, new_t = learned.predict(wl, t4), adapted.predict(wl, t4)
    assert new_t.predictor == "learned+adapted"
    idx, rows = _single_row_ops(wl)
    p = learned.fallback.params(t4)
    kf = p.kernel_floor_us * 1e-3
    floor = np.maximum(learned.harness_floor_ms(rows, t4) - kf, 0.0)  # per kind of kernel
    raw = learned.model.predict(F.attach_devices(rows, t4))
    over = op_overheads_s(wl.ops, p)
    got = np.array([new_t.times_s[i] - over[i] for i in idx]) * 1e3
    assert np.allclose(got, np.maximum(3.0 * raw - floor, kf), rtol=1e-6)
    assert np.allclose(np.array([base_t.times_s[i] - over[i] for i in idx]) * 1e3, np.maximum(raw - floor, kf))
    assert make_predictor("learned", t4).inner.adaptation is None  # never applied unasked

    # and the CLI says so when asked for it; without --adaptation (none) it is left out
    args = ["predict", "bert-tiny", "--gpu", "T4", "-b", "2", "--seq-len", "32", "--dataset-size", "10",
            "--predictor", "learned", "--json"]
    code, out, _ = cli(capsys, *args, "--adaptation", "auto")
    d = json.loads(out)
    assert code == 0 and d["predictor"] == "learned+adapted"
    assert any("adapted to" in n and "40 measured rows" in n for n in d["notes"])
    code, out0, _ = cli(capsys, *args)
    d0 = json.loads(out0)
    assert code == 0 and not any("adapted to" in n for n in d0["notes"])
    assert d["iteration_s"] > d0["iteration_s"]


def test_in_step_adaptation_replaces_floor_and_overhead(t4, learned):
    # per-call times of ops called back to back already hold their dispatch cost
    a = GpuAdaptation(gpu=t4.name, coef={0: (np.log(2.0), 1.0, 0.0, -50.0, 50.0)}, rows=10, timing="in-step",
                      source="test", model_sha256=learned.model_sha256, base_mape_pct=50.0, fit_mape_pct=1.0,
                      cv_mape_pct=2.0)
    wl = trace("bert-tiny", batch_size=2, seq_len=32)
    ot = learned.with_adaptation(a).predict(wl, t4)
    idx, rows = _single_row_ops(wl)
    raw = learned.model.predict(F.attach_devices(rows, t4))
    assert np.allclose(np.array([ot.times_s[i] for i in idx]), 2.0 * raw * 1e-3, rtol=1e-9)
    v100 = get_catalog().device("V100")  # another GPU: not adapted
    assert learned.with_adaptation(a).predict(wl, v100).times_s == learned.predict(wl, v100).times_s


def test_adaptations_that_would_mislead_are_refused(tmp_path, capsys, t4, learned):
    tf_only = GpuAdaptation(gpu=t4.name, coef={2: (0.0, 1.0, 0.0, 0.0, 0.0)}, rows=5, timing="kernel", source="x",
                            model_sha256=None, base_mape_pct=1.0, fit_mape_pct=1.0, cv_mape_pct=None)
    with pytest.raises(Exception, match="TensorFlow"):
        learned.with_adaptation(tf_only)
    stale = GpuAdaptation(gpu=t4.name, coef={0: (0.0, 1.0, 0.0, 0.0, 0.0)}, rows=5, timing="kernel", source="x",
                          model_sha256="0" * 64, base_mape_pct=1.0, fit_mape_pct=1.0, cv_mape_pct=None)
    stale.save()
    args = ["predict", "bert-tiny", "--gpu", "T4", "-b", "2", "--seq-len", "32", "--predictor", "learned"]
    code, _, err = cli(capsys, *args, "--adaptation", "auto")
    assert code == 2 and "another learned model" in err and "--adaptation none" in err, err
    assert cli(capsys, *args)[0] == 0
    # a plan over the T4 asked to adapt meets the same stale file, and takes the same way out
    plan_args = ["plan", "bert-tiny", "--epochs", "1", "--dataset-size", "1000", "-b", "8", "--gpus", "1",
                 "--instances", "g4dn.xlarge", "--seq-len", "32", "--predictor", "auto", "--plot", ""]
    code, _, err = cli(capsys, *plan_args, "--adaptation", "auto")
    assert code == 2 and "--adaptation none" in err, err
    assert cli(capsys, *plan_args)[0] == 0
    code, _, err = cli(capsys, *plan_args, "--adaptation", str(tmp_path / "t4.json"))
    assert code == 2 and "auto or none" in err
    other = tmp_path / "other.json"
    stale.save(other)
    code, _, err = cli(capsys, "predict", "bert-tiny", "--gpu", "V100", "-b", "2", "--seq-len", "32",
                       "--predictor", "learned", "--adaptation", str(other))
    assert code == 2 and "is for" in err
    code, _, err = cli(capsys, "predict", "bert-tiny", "--gpu", "T4", "-b", "2", "--predictor", "analytical",
                       "--adaptation", str(other))
    assert code == 2 and "--predictor learned or auto" in err
    code, _, err = cli(capsys, "predict", "bert-tiny", "--gpu", "T4", "-b", "2", "--predictor", "learned",
                       "--adaptation", str(tmp_path / "missing.json"))
    assert code == 2 and "no adaptation file" in err


def test_fit_adapt_bad_input_exits_2(tmp_path, capsys, t4, learned):
    assert cli(capsys, "fit", "adapt", "--gpu", "T4")[0] == 2
    csv = _kernel_csv(tmp_path / "k.csv", t4, learned, 2.0, n=5)
    code, _, err = cli(capsys, "fit", "adapt", str(csv), "--from-store", "--gpu", "T4")
    assert code == 2 and "either" in err
    code, _, err = cli(capsys, "fit", "adapt", str(csv), "--gpu", "NoSuchGPU")
    assert code == 2 and "NoSuchGPU" in err
    timed = pd.read_csv(csv).assign(Device="Tesla T4")  # the GPU the kernels say they ran on
    timed.to_csv(tmp_path / "t4.csv", index=False)
    code, _, err = cli(capsys, "fit", "adapt", str(tmp_path / "t4.csv"), "--gpu", "A100")
    assert code == 2 and "timed on Tesla T4, not on A100" in err
    code, _, _ = cli(capsys, "fit", "adapt", str(tmp_path / "t4.csv"), "--gpu", "T4", "--out", str(tmp_path / "a.json"))
    assert code == 0
    justus = tmp_path / "j.csv"
    pd.DataFrame({"gpu": "X", "op": ["dense"], "batchsize": [8], "dim_input": [64], "dim_output": [64],
                  "optimizer": "none", "time_ms_median": [1.0]}).to_csv(justus, index=False)
    code, _, err = cli(capsys, "fit", "adapt", str(justus), "--gpu", "T4")
    assert code == 2 and "Justus" in err
    nolat = tmp_path / "n.csv"
    pd.read_csv(csv).drop(columns="Latency").to_csv(nolat, index=False)
    code, _, err = cli(capsys, "fit", "adapt", str(nolat), "--gpu", "T4")
    assert code == 2 and "Latency" in err
    code, _, err = cli(capsys, "fit", "adapt", "--from-store", "--db", str(tmp_path / "none.db"), "--gpu", "T4")
    assert code == 2 and "no traincast database at" in err
    one = tmp_path / "one.csv"
    pd.read_csv(csv).head(1).to_csv(one, index=False)
    code, _, err = cli(capsys, "fit", "adapt", str(one), "--gpu", "T4")
    assert code == 2 and "at least 2 rows" in err


def test_sample_rows_match_the_traced_ops():
    lin = sample_row({"op": "linear", "params": {"tokens": 8, "in_features": 16, "out_features": 32, "bias": 1}})
    assert (lin["kind"], lin["m"], lin["k"], lin["n"], lin["bias"]) == ("matmul", 8, 16, 32, 1)
    conv = sample_row({"op": "conv2d", "params": {"batch": 2, "in_channels": 8, "height": 14, "width": 14,
                                                 "out_channels": 16, "kernel": 3, "stride": 1, "padding": 1,
                                                 "groups": 1, "bias": 0}})
    assert conv["kind"] == "conv" and (conv["cn"], conv["cin"], conv["cout"], conv["kh"], conv["ho"]) == (2, 8, 16, 3, 14)
    assert sample_row({"op": "batchnorm", "params": {"batch": 2, "channels": 8, "height": 4}}) is None
    assert sample_row({"op": "nosuch", "params": {}}) is None


def test_store_samples_become_in_step_rows(tmp_path, t4, learned):
    from traincast.errors import DataError
    from traincast.measure.layers import CampaignConfig, load_samples, run_campaign
    from traincast.store import Store

    with Store(tmp_path / "s.db") as st:
        cfg = CampaignConfig(ops=("linear", "conv2d", "batchnorm"), n_samples=8, size="small", device="cpu")
        run_campaign(st.conn, cfg)
        got = rows_from_store(st.conn, t4, device_prefix="cpu")
        samples = load_samples(st.conn)
        with pytest.raises(DataError, match="no forward fp32 cuda layer sample"):
            rows_from_store(st.conn, t4)
    n_bn = sum(s["op"] == "batchnorm" for s in samples)
    assert len(got.rows) == len(samples) - n_bn and set(got.rows["kind"]) <= {"matmul", "conv"}
    assert sum(got.skipped.values()) == n_bn
    timed = sorted(float(s["median_ms"]) for s in samples if s["op"] != "batchnorm")
    assert sorted(got.time_ms) == timed
    a = fit_adaptation(got.rows, got.time_ms, learned.model, t4.name, timing="in-step", source="test")
    assert a.rows == len(got.rows)
    # The adapter minimises a robust (soft-L1, f_scale 0.2) loss of the log error, so that loss, not the MAPE
    # of a few noisy CPU timings, is what it can never make worse than the unadapted model's.
    from traincast.predict.adaptation import adapt_predictions, adaptation_cells

    def soft_l1(pred):
        r = np.log(pred) - np.log(got.time_ms)
        return float((2 * 0.2**2 * (np.sqrt(1 + (r / 0.2) ** 2) - 1)).sum())

    base = np.asarray(learned.model.predict(got.rows), float)
    after = adapt_predictions(base, adaptation_cells(got.rows), a.coef)
    assert soft_l1(after) <= soft_l1(base) * (1 + 1e-6)
    assert not np.allclose(after, base)
