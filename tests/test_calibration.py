"""Calibration: the fit recovers known parameters; a real tiny calibration and
validation run end to end on this CPU and give forecasts within 3x of measured steps."""

import json

import numpy as np
import pytest

from traincast.fit.calibration import (
    PARAM_NAMES,
    DeviceProfile,
    Measured,
    _Arrays,
    calibrate,
    fit_parameters,
    local_device,
    predict_measured,
)
from traincast.workload import trace


def test_fit_recovers_parameters_from_steps_it_generated():
    dev = local_device("cpu", threads=2)
    wls = [trace(m, batch_size=b) for m in ("resnet18", "mobilenet_v2", "alexnet") for b in (2, 8)]
    true = np.array([0.55, 0.35, 0.03, 0.2, 0.6, 12.0, 3.0, 16.0, 8.0, 0.02, 0.1, 1.0, 0.05, 1.0, 4.0])
    y = [_Arrays(w, dev).predict_s(true) for w in wls]
    ph = [_Arrays(w, dev).phases_s(true) for w in wls]
    th, rms = fit_parameters(wls, y, dev, ph, prior_weight=0.0)
    assert rms < 0.01
    pred = [_Arrays(w, dev).predict_s(th) for w in wls]
    assert np.allclose(pred, y, rtol=0.02)
    # convolutions dominate these models, so their efficiency is identified (the matmul one is not)
    assert dict(zip(PARAM_NAMES, th))["eff_conv"] == pytest.approx(0.35, rel=0.15)


def test_fit_arrays_agree_with_the_predictor_the_profile_makes():
    """The fit's vectorised per-op formula (_Arrays) and AnalyticalPredictor with the profile's overrides
    (overrides_from) are two codings of one model: they must give the same op times for any parameters."""
    from traincast.fit.calibration import overrides_from
    from traincast.predict.analytical import AnalyticalPredictor

    dev = local_device("cpu", threads=2)
    fixed = {"fresh_alloc": {"min_bytes": 8 * 2**20, "gb_per_s": 2.5}, "cache_bytes": 2**20}
    th = np.array([0.55, 0.35, 0.03, 0.2, 0.6, 12.0, 3.0, 16.0, 8.0, 0.02, 0.1, 0.8, 0.05, 1.0, 4.0])
    for model, b in (("resnet18", 4), ("mobilenet_v2", 2), ("bert-tiny", 8)):
        wl = trace(model, batch_size=b)
        arr = _Arrays(wl, dev, fixed)
        ot = AnalyticalPredictor(overrides=overrides_from(th, dev, fixed)).predict(wl, dev)
        assert np.allclose(arr.op_times(th), ot.times_s, rtol=1e-9), model
        assert arr.predict_s(th) == pytest.approx(ot.total_s(), rel=1e-9)


def test_profile_round_trip(tmp_path):
    dev = local_device("cpu", threads=2)
    wls = [trace("mnist-cnn", batch_size=b) for b in (4, 16)]
    meas = [Measured("mnist-cnn", b, 0.002 * b, 0.0, 0.01, {}) for b in (4, 16)]
    prof = calibrate(("mnist-cnn",), (4, 16), measured=meas, name="t")
    p = prof.save(tmp_path / "t.yaml")
    back = DeviceProfile.load(p)
    assert back.overrides == prof.overrides
    assert back.device_record().fp32_tflops == dev.fp32_tflops
    rows = predict_measured(back, meas)
    assert all(abs(r["error_pct"]) < 60 for r in rows)
    # a profile saved before the light overhead existed charges every op its one overhead
    old = DeviceProfile(**{**back.__dict__, "overrides": {k: v for k, v in back.overrides.items()
                                                          if k != "light_overhead_us"}})
    p_old = old.predictor().params(dev)
    assert p_old["light_overhead_us"] == p_old["op_overhead_us"] == back.overrides["op_overhead_us"]


def test_real_calibration_and_validation_smoke(tmp_path, capsys, monkeypatch):
    """1-minute smoke: tiny models, few steps; the forecast must be within 3x of the measured step."""
    from traincast.cli.main import _register_all, run

    _register_all()
    monkeypatch.setenv("TRAINCAST_HOME", str(tmp_path))
    monkeypatch.setenv("TRAINCAST_DB", str(tmp_path / "t.db"))
    code = run(["calibrate", "--models", "mnist-cnn,resnet18", "--batch-sizes", "1,2", "--steps", "2", "--threads", "1",
                "--layer-samples", "30", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and (tmp_path / "profiles" / "local.yaml").exists()
    assert out["fit"]["rms_log_error"] < 1.0
    assert out["fit"]["layer_samples"] == 30
    code = run(["predict", "alexnet", "--device", "local", "--batch-size", "2", "--dataset-size", "10", "--json"])
    assert code == 0
    f = json.loads(capsys.readouterr().out)
    code = run(["validate", "--calibrate-on", "mnist-cnn,resnet18", "--models", "alexnet", "--batch-sizes", "1,2",
                "--steps", "2", "--threads", "1", "--layer-samples", "30", "--plot", str(tmp_path / "v.png"), "--json"])
    v = json.loads(capsys.readouterr().out)
    assert code == 0 and (tmp_path / "v.png").exists()
    for r in v["held_out"]:
        assert 1 / 3 < r["predicted_s"] / r["measured_s"] < 3
    assert f["iteration_ms"] > 0
    assert run(["devices", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "local"
    # the profile's forecast beside a measured step, op by op
    bench = ["bench", "model", "mnist-cnn", "-b", "2", "--steps", "2", "--warmup", "1", "--threads", "1", "--no-save"]
    assert run(bench + ["--profile-steps", "1", "--against", "local", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    a = d["against"]
    assert a["profile"] == "local" and 1 / 3 < a["predicted_ms"] / a["measured_ms"] < 3
    conv = [o for o in a["ops"] if o[0] == "convolution" and o[1] == "forward"]
    from traincast.workload import trace

    n_conv = sum(o.aten == "convolution" and o.phase == "forward" for o in trace("mnist-cnn", batch_size=2).ops)
    assert conv and conv[0][2] == n_conv > 0 and conv[0][3] > 0 and conv[0][4] > 0
    assert set(a["phases"]) >= {"forward", "backward", "optimizer"}
    assert run(bench + ["--against", "nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err
    assert run(bench + ["--against", "local", "--profile-steps", "0"]) == 2
    assert "--profile-steps" in capsys.readouterr().err


def test_calibration_bad_input(capsys, tmp_path, monkeypatch):
    from traincast.cli.main import _register_all, run

    _register_all()
    monkeypatch.setenv("TRAINCAST_HOME", str(tmp_path))
    monkeypatch.setenv("TRAINCAST_DB", str(tmp_path / "t.db"))
    assert run(["calibrate", "--device", "cuda"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert run(["calibrate", "--models", "resnet5"]) == 2
    assert "did you mean" in capsys.readouterr().err
    assert run(["validate", "--calibrate-on", "resnet18", "--models", "resnet18"]) == 2
    assert "must not be calibration models" in capsys.readouterr().err
    assert run(["calibrate", "--layer-samples", "-1", "--models", "mnist-cnn", "--batch-sizes", "1", "--steps", "1"]) == 2
    assert "--layer-samples" in capsys.readouterr().err  # refused before any step is timed
    assert run(["predict", "resnet18", "--device", "local", "--batch-size", "2"]) == 2
    assert "run `traincast calibrate`" in capsys.readouterr().err


def test_layer_sum_of_a_small_cnn_and_its_correction():
    from traincast.fit.calibration import LayerSum, fit_layer_sum_correction, layer_sum

    ls = layer_sum("mnist-cnn", 8, measured_s=0.01, threads=1)
    assert ls.n_layers == 13  # 3 conv + 3 relu + 3 pool + flatten + dense + relu + dense
    assert ls.layer_sum_s > ls.harness_s > 0
    assert ls.ratio_before == pytest.approx(ls.layer_sum_s / 0.01)
    # the correction recovers a known linear relation
    sums = [LayerSum("m", 1, 10, 0.5 * s + 0.002, s, 0.0, 0.0) for s in (0.01, 0.05, 0.2)]
    a, b = fit_layer_sum_correction(sums)
    assert a == pytest.approx(0.5, rel=1e-6) and b == pytest.approx(0.002, rel=1e-6)


def test_layer_samples_identify_a_class_the_models_cannot():
    """CNN steps say little about matmul efficiency; single-op matmul samples fix it."""
    from traincast.fit.calibration import prior_theta

    dev = local_device("cpu", threads=2)
    wls = [trace(m, batch_size=b) for m in ("resnet18", "mobilenet_v2") for b in (2, 8)]
    true = np.array([0.25, 0.5, 0.05, 0.3, 0.8, 10.0, 1.0, 8.0, 8.0, 0.02, 0.1, 1.0, 0.05, 1.0, 10.0])
    y = [_Arrays(w, dev).predict_s(true) for w in wls]
    peak, bw = dev.peak_flops_per_s("fp32"), dev.memory_bandwidth_bytes_per_s
    samples = []
    for n in (256, 512, 1024):  # square matmuls: compute-bound at the true efficiency
        f, b = 2 * n**3, 3 * n * n * 4
        t = max(f / (peak * 0.25), b / (bw * 0.75 * 0.8)) + 10e-6
        samples.append({"phase": "forward", "op_class": "matmul", "flops": f, "bytes_read": 2 * n * n * 4,
                        "bytes_written": n * n * 4, "median_ms": t * 1e3, "params": {}})
    th, _ = fit_parameters(wls, y, dev, layer_samples=samples)
    assert th[0] == pytest.approx(0.25, rel=0.1)
    th0, _ = fit_parameters(wls, y, dev)
    assert th0[0] == pytest.approx(prior_theta(dev)[0], rel=0.2)  # without samples the prior holds it


def _relu_sample(numel: int, ms: float = 1.0) -> dict:
    return {"phase": "forward", "op_class": "elementwise", "op": "relu", "flops": numel, "bytes_read": 4 * numel,
            "bytes_written": 4 * numel, "median_ms": ms, "params": {}, "dtype": "fp32",
            "input_shapes_json": json.dumps([[numel]]), "output_shape_json": json.dumps([numel])}


def test_layer_fit_drops_samples_whose_output_may_be_fresh_pages():
    """A single op timed in a loop gets a large output from the allocator's leftovers or fresh from
    the OS depending on the campaign's history: such samples are left out of the fit."""
    from traincast.fit.calibration import _LayerArrays

    dev = local_device("cpu", threads=2)
    fixed = {"fresh_alloc": {"min_bytes": 32 * 2**20, "gb_per_s": 3.0}, "cache_bytes": 32 * 2**20}
    small, big = _relu_sample(2**20), _relu_sample(16 * 2**20)  # 4 MiB and 64 MiB outputs
    la = _LayerArrays([small, big, small], dev, fixed)
    assert la.n == 2 and all(r is small for r in la.rows)
    # without a fresh-page term nothing is ambiguous
    off = {"fresh_alloc": {"min_bytes": 0, "gb_per_s": 0.0}, "cache_bytes": 32 * 2**20}
    assert _LayerArrays([small, big], dev, off).n == 2


def test_warm_cache_and_light_overhead_are_identified_by_layer_samples():
    """Ops timed alone find their inputs in cache (warm_cache); their bare-call overhead is the
    light overhead. Both are recovered from samples generated with known values."""
    from traincast.fit.calibration import _LayerArrays, prior_theta

    dev = local_device("cpu", threads=2)
    fixed = {"cache_bytes": 32 * 2**20}
    wls = [trace(m, batch_size=b) for m in ("resnet18", "mobilenet_v2") for b in (2, 8)]
    true = prior_theta(dev).copy()
    true[PARAM_NAMES.index("warm_cache")] = 3.0
    true[PARAM_NAMES.index("light_overhead_us")] = 6.0
    raw = [_relu_sample(n) for n in (256, 1024, 4096, 2**14, 2**16, 2**18, 2**20, 2**21)]
    la = _LayerArrays(raw, dev, fixed)
    t_ms = np.exp(la.resid(true)) * 1.0  # resid = log(t) - log(1 ms)
    samples = [dict(r, median_ms=float(t)) for r, t in zip(raw, t_ms)]
    y = [_Arrays(w, dev, fixed).predict_s(true) for w in wls]
    th, _ = fit_parameters(wls, y, dev, layer_samples=samples, fixed=fixed, prior_weight=0.01)
    got = dict(zip(PARAM_NAMES, th))
    assert got["warm_cache"] * got["mem_scale"] == pytest.approx(3.0 * true[PARAM_NAMES.index("mem_scale")], rel=0.1)
    assert got["light_overhead_us"] == pytest.approx(6.0, rel=0.15)


def test_isolated_measurement_runs_in_a_fresh_process(monkeypatch):
    """``isolate=True`` routes every (model, batch) through a worker process; the record it
    brings back matches one measured in this process."""
    import traincast.fit.calibration as cal

    calls = []
    real = cal._isolated_time_model

    def spy(model, **kw):
        calls.append(model)
        return real(model, **kw)

    monkeypatch.setattr(cal, "_isolated_time_model", spy)
    iso = cal.measure_steps(["mnist-cnn"], [4], steps=3, threads=1, retries=0, isolate=True)[0]
    assert calls == ["mnist-cnn"]
    here = cal.measure_steps(["mnist-cnn"], [4], steps=3, threads=1, retries=0, isolate=False)[0]
    assert calls == ["mnist-cnn"]  # in-process measurement does not spawn
    assert (iso.model, iso.batch_size) == (here.model, here.batch_size) == ("mnist-cnn", 4)
    assert 1 / 3 < iso.measured_s / here.measured_s < 3
    assert iso.phases_s and set(iso.phases_s) == set(here.phases_s)


