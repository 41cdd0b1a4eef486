"""Calibration: the fit recovers known parameters; a real tiny calibration and
validation run end to end on this CPU and give forecasts within 3x of measured steps."""

import json
from dataclasses import asdict

import numpy as np
import pytest

from traincast.fit.calibration import Measured, _sample_arrays, base_params, calibrate, fit_parameters
from traincast.fit.validate import predict_measured
from traincast.hardware.catalog import get_catalog
from traincast.hardware.local import local_device
from traincast.predict.profile import DeviceProfile
from traincast.predict.roofline import compile_ops
from traincast.workload import trace


def _steps(params, wls, dev, precision="fp32"):
    """Step seconds and forward/backward/optimizer seconds of ``wls`` under ``params`` (the roofline's own)."""
    out, phases = [], []
    for w in wls:
        t = compile_ops(w.ops, dev, precision, params).times(params)
        ph = np.array([o.phase for o in w.ops])
        out.append(float(t.sum()) + params.step_overhead_ms * 1e-3)
        phases.append({k: float(t[ph == k].sum()) for k in ("forward", "backward", "optimizer")})
    return out, phases


def test_fit_recovers_parameters_from_steps_it_generated():
    dev = local_device("cpu", threads=2)
    wls = [trace(m, batch_size=b) for m in ("resnet18", "mobilenet_v2", "alexnet") for b in (2, 8)]
    true = base_params(dev).with_values({
        "compute.simt.matmul": 0.55, "compute.simt.conv": 0.35, "compute.simt.conv_grouped": 0.03,
        "compute.simt.other": 0.2, "memory_scale": 0.6, "op_overhead_us": 12.0, "step_overhead_ms": 3.0,
        "gemm_half_dim": 16.0, "conv_half_dim": 8.0, "compute.simt.pool": 0.02, "compute.simt.norm": 0.1,
        "compute.simt.reduction": 0.05, "light_overhead_us": 4.0})
    y, ph = _steps(true, wls, dev)
    fit = fit_parameters(wls, y, dev, ph, prior_weight=0.0)
    assert fit.rms_log_error < 0.01
    pred, _ = _steps(fit.params, wls, dev)
    assert np.allclose(pred, y, rtol=0.02)
    # convolutions dominate these models, so their efficiency is identified (the matmul one is not)
    assert fit.params.value("compute.simt.conv") == pytest.approx(0.35, rel=0.15)
    assert "compute.simt.attention" not in fit.free  # no op of these CNNs runs at it


@pytest.mark.parametrize("gpu", ["P100", "V100", "A100", "H100", "cpu"])
def test_calibrated_parameters_move_the_forecast_on_every_generation(gpu):
    """Steps generated with the compute efficiency of the unit and key the convolutions really run at halved
    (fp32 convolutions: FP32 on Pascal, Volta and CPUs, TF32 tensor cores on Ampere and Hopper): calibration
    fits that very parameter, and the profile it makes forecasts the steps -- not the catalog's times."""
    dev = local_device("cpu", threads=2) if gpu == "cpu" else get_catalog().device(gpu)
    wls = [trace("resnet18", batch_size=b) for b in (8, 32)] + [trace("alexnet", batch_size=16)]
    base = base_params(dev)
    c = compile_ops(wls[0].ops, dev, "fp32", base)
    unit = "tensor" if gpu in ("A100", "H100") else "simt"
    conv_units = {int(u) for u, k in zip(c.unit, c.key) if k == 1}  # COMPUTE_KEYS[1] == "conv"
    assert conv_units == {0 if unit == "simt" else 1}
    name = f"compute.{unit}.conv"
    true = base.with_values({name: base.value(name) * 0.5})
    y, ph = _steps(true, wls, dev)
    fit = fit_parameters(wls, y, dev, ph, prior_weight=0.0)
    assert name in fit.free
    prof = DeviceProfile(name="t", device=asdict(dev), overrides=fit.params.to_table(), fingerprint={}, date="")
    got = [prof.predictor().predict(w, prof.device_record()).total_s() for w in wls]
    before, _ = _steps(base, wls, dev)
    assert np.allclose(got, y, rtol=0.03), (got, y)
    assert not np.allclose(before, y, rtol=0.05)  # the catalog's forecast was off: the profile moved it


def test_profile_round_trip(tmp_path):
    dev = local_device("cpu")  # this machine's threads, as calibrate() reads them (not a count of 2 written here)
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
    p_old = old.predictor().inner.params(dev)
    assert p_old.light_overhead_us == p_old.op_overhead_us == back.overrides["op_overhead_us"]


def test_real_calibration_and_validation_smoke(tmp_path, capsys, monkeypatch):
    """Smoke: tiny models, few steps; the forecast must be within 3x of the measured step."""
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
    # validate in-process (calibrate above ran its steps in fresh processes; test_isolated_measurement_...
    # checks that routing): the same fit and comparison, without paying a Python start per (model, batch)
    code = run(["validate", "--calibrate-on", "mnist-cnn,resnet18", "--models", "alexnet", "--batch-sizes", "1,2",
                "--steps", "2", "--threads", "1", "--layer-samples", "30", "--in-process",
                "--plot", str(tmp_path / "v.png"), "--json"])
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
    assert run(["calibrate", "--host-only"]) == 2  # on a CPU the host is the device
    assert "--host-only measures the host that issues a GPU's kernels" in capsys.readouterr().err


def test_host_cost_per_traced_op_of_the_tiny_models():
    """measure/host.py on this CPU (the same code times a GPU's host): each phase's wall time over the ops
    traincast traces for it; a positive, plausible figure per op (a microsecond to a few milliseconds), the ops
    those of the traced tiny model."""
    from traincast.measure.host import measure_host_costs, tiny_model, traced_ops

    _, _, path = tiny_model("llama")
    n = traced_ops(path)
    assert n["forward"] > 50 and n["backward"] > 50
    hc = measure_host_costs("cpu", models=("llama",), steps=5, repeats=2)
    assert hc.per_model["llama"]["ops"] == [n["forward"], n["backward"]]
    assert len(hc.per_model["llama"]["forward_us"]) == 2
    assert 1.0 < hc.forward_us < 5000.0 and 1.0 < hc.backward_us < 5000.0


def test_layer_sum_of_a_small_cnn_and_its_correction():
    from traincast.fit.layersum import LayerSum, fit_layer_sum_correction, layer_sum

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
    dev = local_device("cpu", threads=2)
    wls = [trace(m, batch_size=b) for m in ("resnet18", "mobilenet_v2") for b in (2, 8)]
    base = base_params(dev)
    true = base.with_values({"compute.simt.matmul": 0.25, "compute.simt.conv": 0.5, "memory_scale": 0.8,
                             "op_overhead_us": 10.0, "light_overhead_us": 10.0})
    y, _ = _steps(true, wls, dev)
    peak, bw = dev.peak_flops_per_s("fp32"), dev.memory_bandwidth_bytes_per_s
    mem = true.memory["matmul"] * 0.8
    samples = []
    for n in (256, 512, 1024):  # square matmuls: compute-bound at the true efficiency
        f, b = 2 * n**3, 3 * n * n * 4
        t = max(f / (peak * 0.25), b / (bw * mem)) + 10e-6
        samples.append({"phase": "forward", "op_class": "matmul", "flops": f, "bytes_read": 2 * n * n * 4,
                        "bytes_written": n * n * 4, "median_ms": t * 1e3, "params": {}})
    fit = fit_parameters(wls, y, dev, layer_samples=samples)
    assert fit.params.value("compute.simt.matmul") == pytest.approx(0.25, rel=0.1)
    fit0 = fit_parameters(wls, y, dev)
    # without samples the prior holds it at the catalog's value
    assert fit0.params.value("compute.simt.matmul") == pytest.approx(base.value("compute.simt.matmul"), rel=0.2)


def _relu_sample(numel: int, ms: float = 1.0) -> dict:
    return {"phase": "forward", "op_class": "elementwise", "op": "relu", "flops": numel, "bytes_read": 4 * numel,
            "bytes_written": 4 * numel, "median_ms": ms, "params": {}, "dtype": "fp32",
            "input_shapes_json": json.dumps([[numel]]), "output_shape_json": json.dumps([numel])}


def test_layer_fit_drops_samples_whose_output_may_be_fresh_pages():
    """A single op timed in a loop gets a large output from the allocator's leftovers or fresh from
    the OS depending on the campaign's history: such samples are left out of the fit."""
    dev = local_device("cpu", threads=2)
    fixed = {"fresh_alloc": {"min_bytes": 32 * 2**20, "gb_per_s": 3.0}, "cache_bytes": 32 * 2**20}
    small, big = _relu_sample(2**20), _relu_sample(16 * 2**20)  # 4 MiB and 64 MiB outputs
    c, _, kept = _sample_arrays([small, big, small], dev, base_params(dev, fixed))
    assert len(c) == 2 and all(r is small for r in kept)
    # without a fresh-page term nothing is ambiguous
    off = {"fresh_alloc": {"min_bytes": 0, "gb_per_s": 0.0}, "cache_bytes": 32 * 2**20}
    assert len(_sample_arrays([small, big], dev, base_params(dev, off))[0]) == 2


def test_warm_cache_and_light_overhead_are_identified_by_layer_samples():
    """Ops timed alone find their inputs in cache (warm_cache); their bare-call overhead is the
    light overhead. Both are recovered from samples generated with known values."""
    dev = local_device("cpu", threads=2)
    fixed = {"cache_bytes": 32 * 2**20}
    wls = [trace(m, batch_size=b) for m in ("resnet18", "mobilenet_v2") for b in (2, 8)]
    base = base_params(dev, fixed)
    true = base.with_values({"light_overhead_us": 6.0})
    raw = [_relu_sample(n) for n in (256, 1024, 4096, 2**14, 2**16, 2**18, 2**20, 2**21)]
    c, _, _ = _sample_arrays(raw, dev, true)
    t_ms = c.times(true, warm_cache=3.0) * 1e3
    samples = [dict(r, median_ms=float(t)) for r, t in zip(raw, t_ms)]
    y, _ = _steps(true, wls, dev)
    fit = fit_parameters(wls, y, dev, layer_samples=samples, fixed=fixed, prior_weight=0.01)
    assert fit.warm_cache * fit.params.memory_scale == pytest.approx(3.0 * true.memory_scale, rel=0.1)
    assert fit.params.light_overhead_us == pytest.approx(6.0, rel=0.15)


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




def test_profiles_and_the_shipped_table_are_validated_by_schema(tmp_path):
    """A profile's device and parameters are checked field by field when it is read; every generation of the
    shipped efficiency table passes the same schema."""
    import yaml

    from traincast.errors import SpecError
    from traincast.hardware.catalog import efficiency_table
    from traincast.predict.roofline import check_table

    table = efficiency_table()
    check_table(table["defaults"], "efficiency.yaml: defaults")
    for gen, t in table["generations"].items():
        check_table(t, f"efficiency.yaml: {gen}")
    meas = [Measured("mnist-cnn", b, 0.002 * b, 0.0, 0.01, {}) for b in (4, 16)]
    path = calibrate(("mnist-cnn",), (4, 16), measured=meas, name="t").save(tmp_path / "t.yaml")
    good = yaml.safe_load(path.read_text())
    for change, message in (
        (lambda d: d["overrides"]["compute"]["simt"].update(matmull=0.5), r"overrides: compute.simt.matmull: unknown "
                                                                           r"value 'matmull'; did you mean 'matmul'"),
        (lambda d: d["overrides"].update(memory_scale=-1), r"overrides: memory_scale: Input should be greater than 0"),
        (lambda d: d["device"].update(fp32_tflops="fast"), r"device.fp32_tflops: Input should be a valid number"),
        (lambda d: d.update(devise={}), r"devise: unknown field; did you mean 'device'"),
    ):
        d = yaml.safe_load(path.read_text())
        change(d)
        bad = tmp_path / "bad.yaml"
        bad.write_text(yaml.safe_dump(d))
        with pytest.raises(SpecError, match=message):
            DeviceProfile.load(bad)
    assert DeviceProfile.load(path).overrides == good["overrides"]


def test_calibration_models_cover_the_kinds_of_op_of_the_models_to_forecast(capsys, tmp_path, monkeypatch):
    """--for picks the pool models whose time is spent on the efficiencies the target models' time is spent on:
    depthwise convolutions (MobileNet v3) bring mobilenet_v2, grouped ones (ResNeXt) regnet_x_400mf, a
    transformer bert-tiny; without targets the whole pool, which covers every key of those."""
    from traincast.cli.main import _register_all, run
    from traincast.fit.calibration import CALIBRATION_POOL, calibration_models, key_shares

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the shares are of times forecast for this CPU, which depend on its thread count
    try:
        assert calibration_models(["mobilenet_v3_small"]) == ("resnet18", "mobilenet_v2")
        assert calibration_models(["resnext50_32x4d"]) == ("resnet18", "regnet_x_400mf")
        assert calibration_models(["gpt2"]) == ("resnet18", "bert-tiny")
    finally:
        torch.set_num_threads(threads)
    assert calibration_models([]) == CALIBRATION_POOL
    covered = set().union(*(k for m in CALIBRATION_POOL for k in [{x for x, v in key_shares(m).items() if v >= 0.05}]))
    assert {"simt.conv", "simt.conv_depthwise", "simt.conv_grouped", "simt.matmul", "simt.norm", "simt.reduction"} <= covered
    _register_all()
    monkeypatch.setenv("TRAINCAST_HOME", str(tmp_path))
    assert run(["calibrate", "--models", "resnet18", "--for", "gpt2"]) == 2
    assert "--models and --for" in capsys.readouterr().err
    assert run(["calibrate", "--for", "gpt-3"]) == 2
    assert "unknown model 'gpt-3'" in capsys.readouterr().err


def _steps_with_host(params, wls, dev, precision="fp32"):
    """Step seconds of ``wls`` on a GPU under ``params``: the roofline's op times with the host's issue cost
    overlapped (predict/host.py), as the forecast times a GPU step."""
    from traincast.predict.host import host_seconds, issue_bound

    out = []
    for w in wls:
        t = compile_ops(w.ops, dev, precision, params).times(params)
        h = host_seconds(w.ops, params.host_forward_us, params.host_backward_us)
        out.append(float(issue_bound(t, h).sum()) + params.step_overhead_ms * 1e-3)
    return out


def test_gpu_calibration_fits_the_hosts_issue_cost_through_the_overlap():
    """A GPU whose host issues ops 4x slower than the catalog says: small models are host-bound, large ones are
    not. Calibration fits the host's cost as the forecast applies it (overlapped with the kernels), so the
    profile forecasts a large model it never measured as the truth does; a serial per-op gap fitted to the
    small models instead (what calibration did before) would charge the large model the host's full cost."""
    dev = get_catalog().device("H100")
    wls = [trace(m, batch_size=b) for m, b in (("bert-tiny", 8), ("bert-tiny", 64), ("resnet18", 8),
                                                ("resnet18", 128), ("mobilenet_v2", 32))]
    base = base_params(dev)
    true = base.with_values({"host_forward_us": 4 * base.host_forward_us, "host_backward_us": 4 * base.host_backward_us})
    y = _steps_with_host(true, wls, dev)
    fit = fit_parameters(wls, y, dev)  # the default weak prior: five steps cannot tell every efficiency apart
    assert {"host_forward_us", "host_backward_us"} <= set(fit.free)
    assert fit.rms_log_error < 0.03
    assert fit.params.host_forward_us == pytest.approx(true.host_forward_us, rel=0.3)
    assert fit.params.op_overhead_us < 10.0  # the host's cost did not turn into a serial gap per op
    big = [trace("resnet50", batch_size=128)]
    want = _steps_with_host(true, big, dev)[0]
    assert _steps_with_host(fit.params, big, dev)[0] == pytest.approx(want, rel=0.1)
    serial = base.with_values({"op_overhead_us": base.op_overhead_us + 4 * base.host_forward_us,
                               "host_forward_us": 0.0, "host_backward_us": 0.0})
    assert _steps_with_host(serial, big, dev)[0] > 1.2 * want  # what a serial gap would have forecast


def test_host_only_profile_carries_the_measured_host_and_slows_a_host_bound_forecast(tmp_path, monkeypatch):
    """``calibrate --device cuda --host-only`` without a GPU here: the measurement and the device lookup stand in
    (the CUDA run itself needs a GPU); the profile it saves overrides the host's two costs alone, and a host-bound
    forecast with it is slower than the catalog's."""
    import traincast.hardware.local as local
    import traincast.measure.fingerprint as fpm
    import traincast.measure.host as host
    from traincast.cli.calibrate import _host_only
    from traincast.predict.options import forecast_from_options

    h100 = get_catalog().device("H100")
    monkeypatch.setattr(local, "local_device", lambda device, threads=None, **kw: h100)
    monkeypatch.setattr(fpm, "fingerprint", lambda device, n=None: type("F", (), {"as_dict": lambda self: {}})())
    monkeypatch.setattr(host, "measure_host_costs", lambda device, repeats=3, progress=None: host.HostCosts(
        60.0, 30.0, device, {"llama": {"ops": [207, 316], "forward_us": [60.0], "backward_us": [30.0]}}))
    out = tmp_path / "h.yaml"
    _host_only("cuda", "h", out, as_json=False)
    prof = DeviceProfile.load(out)
    assert prof.overrides == {"host_forward_us": 60.0, "host_backward_us": 30.0}
    kw = dict(batch_size=2, seq_len=64, precision="amp-bf16", optimizer="adamw")
    slow = forecast_from_options("bert-tiny", profile=str(out), **kw).iteration_s
    assert slow > 2 * forecast_from_options("bert-tiny", gpu="H100", **kw).iteration_s


def test_a_step_slowed_by_a_neighbour_is_timed_again_and_the_faster_timing_fitted(monkeypatch):
    """A busy neighbour can slow a whole measurement evenly (small spread, so measure_steps keeps it): after the
    fit, a step measured well above its fitted time is timed once more, the faster timing kept and the fit redone;
    a step timed the same twice changes nothing."""
    import traincast.fit.calibration as cal
    from traincast.measure.kernels import DepthwiseCosts
    from traincast.measure.memory import Bandwidth

    bw = Bandwidth(stream_gb_per_s=20.0, fresh_gb_per_s=4.0, fill_gb_per_s=15.0, size_mb=128, cov=0.0)
    dw = DepthwiseCosts(gflops_per_s=4.0, ratio_to_3x3=25.0, shapes=((8, 96, 56, 56),), cov=0.0, call_us=50.0,
                        grad_call_us=100.0)
    models, batches = ("resnet18", "mobilenet_v2", "alexnet"), (2, 8, 16)
    kw = dict(device="cpu", threads=2, bandwidth=bw, depthwise=dw)
    seed = [Measured(m, b, 0.02 * b, 0.0, 0.01, {}) for b in batches for m in models]
    clean = {(r["model"], r["batch_size"]): r["predicted_s"] for r in calibrate(models, batches, measured=seed,
                                                                                   **kw).fit["steps"]}
    slowed = ("resnet18", 8)
    meas = [Measured(m, b, clean[(m, b)] * (2.5 if (m, b) == slowed else 1.0), 0.0, 0.01, {})
            for b in batches for m in models]
    timed = []

    def measure_again(ms, bs, **_):
        timed.append((ms[0], bs[0]))
        return [Measured(ms[0], bs[0], clean[(ms[0], bs[0])], 0.0, 0.01, {})]

    monkeypatch.setattr(cal, "measure_steps", measure_again)
    kept = calibrate(models, batches, measured=meas, retime=0, **kw)
    assert timed == [] and "retimed" not in kept.fit
    fixed = calibrate(models, batches, measured=meas, retime=3, **kw)
    assert timed[0] == slowed  # the worst step first
    r = fixed.fit["retimed"][0]
    assert (r["model"], r["batch_size"]) == slowed and r["again_s"] == pytest.approx(clean[slowed])
    assert r["first_s"] > 1.2 * r["fitted_s"]
    step = {(s["model"], s["batch_size"]): s for s in fixed.fit["steps"]}
    assert step[slowed]["measured_s"] == pytest.approx(clean[slowed])
    assert fixed.fit["rms_log_error"] < 0.5 * kept.fit["rms_log_error"]
    # every other step re-timed was timed the same: its first timing stays
    for r in fixed.fit["retimed"][1:]:
        assert r["again_s"] == pytest.approx(r["first_s"])
