"""Analytical predictor, communication formulas, composition into jobs."""

import math

import pytest

from traincast.errors import ConfigError, UnknownNameError
from traincast.hardware import Cluster, get_catalog
from traincast.predict import AnalyticalPredictor, allreduce_s, forecast, gradient_sync, make_predictor
from traincast.predict.compose import WorkloadFamily, interpolate
from traincast.workload import trace

S = 100e6  # bytes
B = 10e9  # bytes/s


def test_ring_allreduce_formula():
    for p in (2, 4, 8, 64):
        assert allreduce_s("ring", S, p, B, 0.0) == pytest.approx(2 * (p - 1) / p * S / B)
    assert allreduce_s("ring", S, 8, B, 1e-5) == pytest.approx(2 * 7 / 8 * S / B + 14e-5)


def test_parameter_server_formulas_grow_with_p_and_ring_does_not():
    ps = [allreduce_s("ps", S, p, B, 0) for p in (2, 4, 8)]
    assert ps == pytest.approx([2 * (p - 1) * S / B for p in (2, 4, 8)])
    assert allreduce_s("ps-sharded", S, 8, B, 0) == pytest.approx(allreduce_s("ring", S, 8, B, 0))
    ring = [allreduce_s("ring", S, p, B, 0) for p in (8, 64, 512)]
    assert max(ring) / min(ring) < 1.15


def test_tree_and_butterfly_follow_paleo():
    assert allreduce_s("tree", S, 8, B, 0) == pytest.approx(2 * 3 * S / B)
    assert allreduce_s("butterfly", S, 8, B, 0) == pytest.approx(3 * S / B)
    assert allreduce_s("ring", S, 1, B, 0) == 0.0
    with pytest.raises(UnknownNameError):
        allreduce_s("mesh", S, 8, B, 0)


def test_overlap_hides_communication_behind_backward():
    dev = get_catalog().device("V100")
    c = Cluster(dev, gpus_per_node=8)
    no = gradient_sync(int(S), c, "ring", backward_s=0.1, overlap=False)
    yes = gradient_sync(int(S), c, "ring", backward_s=0.1, overlap=True)
    assert no.exposed_s == pytest.approx(no.total_s)
    assert yes.exposed_s < 0.5 * no.exposed_s
    # with no backward to hide behind, everything is exposed
    assert gradient_sync(int(S), c, "ring", 0.0, True).exposed_s == pytest.approx(yes.total_s)


def test_inter_node_is_slower_than_intra_node():
    dev = get_catalog().device("A100")
    one = gradient_sync(int(S), Cluster(dev, 8, 1), "ring", overlap=False)
    two = gradient_sync(int(S), Cluster(dev, 4, 2, inter_node_gbit_per_s=100), "ring", overlap=False)
    assert two.total_s > 3 * one.total_s


def test_roofline_per_op_is_max_of_compute_and_memory(resnet50_b8):
    dev = get_catalog().device("V100")
    ot = AnalyticalPredictor().predict(resnet50_b8, dev)
    p = AnalyticalPredictor().params(dev)
    for op, t, b in zip(resnet50_b8.ops, ot.times_s, ot.bound):
        t_m = op.bytes_total / (dev.memory_bandwidth_bytes_per_s * p.memory[op.op_class] * p.memory_scale)
        assert t >= t_m  # never faster than moving its bytes
        assert b in ("compute", "memory", "latency")
    bounds = {b for b in ot.bound}
    assert {"compute", "memory"} <= bounds


def test_gemm_dims_and_fresh_output_bytes_by_hand():
    from traincast.predict.roofline import fresh_output_bytes, gemm_dims, gemm_factor

    assert gemm_dims("mm", ((16, 9216), (9216, 4096))) == (16, 4096, 9216)
    assert gemm_dims("addmm", ((4096,), (16, 9216), (9216, 4096))) == (16, 4096, 9216)
    assert gemm_dims("bmm", ((12, 128, 64), (12, 64, 128))) == (128, 128, 64)
    assert gemm_dims("linear", ((8, 128, 768), (3072, 768))) == (1024, 3072, 768)
    assert gemm_dims("relu", ((8, 8),)) is None
    # a 3x3 convolution 64 -> 128 channels on 2 x 56 x 56 outputs, forward and backward; depthwise: none
    x, w, out = (2, 64, 58, 58), (128, 64, 3, 3), (2, 128, 56, 56)
    assert gemm_dims("convolution", (x, w), (out,)) == (2 * 56 * 56, 128, 64 * 9)
    assert gemm_dims("convolution_backward", (out, x, w)) == (2 * 56 * 56, 128, 64 * 9)
    assert gemm_dims("convolution", ((2, 32, 56, 56), (32, 1, 3, 3)), ((2, 32, 56, 56),)) is None  # depthwise
    # ResNeXt's 32 groups of 4 channels: 32 GEMMs of N = 128 / 32 output and K = 4 x 9 input terms each
    assert gemm_dims("convolution", ((2, 128, 56, 56), (128, 4, 3, 3)), ((2, 128, 56, 56),)) == (2 * 56 * 56, 4, 36)
    assert gemm_factor(16, 16) == 0.5 and gemm_factor(math.inf, 16) == 1.0 and gemm_factor(4, 0) == 1.0
    mib = 2**20
    # two outputs of 64 MiB and 1 MiB: only the large one is fresh; in-place ops allocate nothing
    shapes = ((16 * mib,), (mib // 4,))
    assert fresh_output_bytes("convolution_backward", shapes, 65 * mib, 32 * mib) == 64 * mib
    assert fresh_output_bytes("relu_", ((64 * mib,),), 256 * mib, 32 * mib) == 0
    assert fresh_output_bytes("mm", ((8 * mib,),), 32 * mib, 0) == 0
    # a foreach op over 6 tensors of 64 MiB keeps 4 shapes: they are sized by dtype, not by the total
    assert fresh_output_bytes("_foreach_sqrt", ((16 * mib,),) * 4, 6 * 64 * mib, 32 * mib, "fp32") == 4 * 64 * mib


def test_grouped_and_depthwise_convolutions_have_their_own_keys():
    """MobileNet's depthwise convolutions (one input channel per group) and ResNeXt's grouped ones are timed at
    efficiencies of their own; a table without a depthwise entry gives it the grouped one, then the dense one."""
    from traincast.predict.roofline import RooflineParams, compute_key

    keys = {compute_key(o) for o in trace("mobilenet_v2", batch_size=2).ops if o.op_class == "conv"}
    assert keys == {"conv", "conv_depthwise"}
    keys = {compute_key(o) for o in trace("resnext50_32x4d", batch_size=2).ops if o.op_class == "conv"}
    assert keys == {"conv", "conv_grouped"}
    p = RooflineParams.from_table({"compute": {"simt": {"conv": 0.5, "conv_grouped": 0.1, "other": 0.3},
                                               "tensor": {"conv": 0.4, "other": 0.3}}, "memory": {"default": 0.7}})
    assert p.compute["simt"]["conv_depthwise"] == 0.1 and p.compute["tensor"]["conv_depthwise"] == 0.4


def test_skinny_gemms_and_fresh_pages_cost_more_on_cpu():
    """A CPU's table charges a GEMM by its smallest dimension and large fresh outputs by page-in rate."""
    from dataclasses import replace

    from traincast.hardware.local import local_device
    from traincast.workload.records import OpRecord

    # fixed peak and bandwidth: the GEMMs below are compute-bound whatever CPU runs the test
    dev = replace(local_device("cpu", threads=2), fp32_tflops=0.1, memory_bandwidth_gb_per_s=1000.0)
    base = trace("mnist-cnn", batch_size=1)

    def mm(m, k, n):
        return OpRecord("mm", "forward", "x", "matmul", 2 * m * k * n, 4 * (m * k + k * n), 4 * m * n, "fp32",
                        ((m, k), (k, n)), ((m, n),))

    def time_of(*ops, **ov):
        return sum(AnalyticalPredictor(overrides=ov).predict(replace(base, ops=ops), dev).times_s)

    square, skinny = mm(1024, 1024, 1024), mm(4, 16384, 16384)  # equal FLOPs
    assert skinny.flops == square.flops
    half = AnalyticalPredictor().params(dev).gemm_half_dim
    assert half > 0
    assert time_of(skinny) > 2 * time_of(square)
    assert time_of(skinny, gemm_half_dim=0) < time_of(skinny)
    big = mm(8192, 64, 8192)  # a 256 MiB output, fresh from the OS on every call
    no_fresh = time_of(big, fresh_alloc={"min_bytes": 0, "gb_per_s": 0})
    assert time_of(big, fresh_alloc={"min_bytes": 32 * 2**20, "gb_per_s": 2.0}) == pytest.approx(
        no_fresh + 256 * 2**20 / 2e9)
    gpu = get_catalog().device("A100")
    assert AnalyticalPredictor().params(gpu).fresh_alloc_gb_per_s == 0


def test_light_ops_pay_the_light_overhead():
    """Gradient accumulation and each tensor of a CPU foreach op pay ``light_overhead_us``; every
    other op ``op_overhead_us`` per launch. Tables without a light overhead charge all alike."""
    from traincast.hardware.local import local_device
    from traincast.predict.roofline import is_light, launches_of

    dev = local_device("cpu", threads=2)
    wl = trace("resnet18", batch_size=2)
    light = [o for o in wl.ops if is_light(o)]
    assert any(o.phase == "backward" and o.aten == "add" for o in light)  # residual gradients accumulate
    assert any(o.phase == "optimizer" for o in light)
    assert not any(o.aten == "convolution" for o in light)
    # batch norm's num_batches_tracked += 1: an int64 op (no float tensor: dtype "none"), never an autograd node
    counters = [o for o in light if o.phase == "forward" and o.aten == "add_" and o.dtype == "none"]
    assert len(counters) == sum(1 for o in wl.ops if o.aten == "native_batch_norm") == 20
    chunk = AnalyticalPredictor().params(dev).foreach_chunk
    n_light = sum(launches_of(o, chunk) for o in light)

    def total(**ov):
        return AnalyticalPredictor(overrides=ov).predict(wl, dev).total_s()

    assert total(light_overhead_us=50.0, op_overhead_us=8.0) - total(light_overhead_us=0.0, op_overhead_us=8.0) == \
        pytest.approx(n_light * 50e-6, rel=1e-6)
    gpu = get_catalog().device("A100")
    assert AnalyticalPredictor().params(gpu).light_overhead_us is None
    a = AnalyticalPredictor().predict(wl, gpu)
    same = {"light_overhead_us": AnalyticalPredictor().params(gpu).op_overhead_us}
    b = AnalyticalPredictor(overrides=same).predict(wl, gpu)
    assert a.times_s == pytest.approx(b.times_s)


def test_faster_gpus_are_faster_and_amp_helps_on_tensor_cores():
    t = {g: forecast("resnet50", gpu=g, batch_size=64, dataset_size=1000, scaling=False).iteration_s
         for g in ("K80", "V100", "A100", "H100")}
    assert t["K80"] > t["V100"] > t["A100"] > t["H100"]
    fp32 = forecast("resnet50", gpu="A100", batch_size=64, dataset_size=1000, scaling=False)
    amp = forecast("resnet50", gpu="A100", batch_size=64, dataset_size=1000, precision="amp-bf16", scaling=False)
    assert amp.iteration_s < 0.8 * fp32.iteration_s


def test_job_composition_epochs_steps_and_cost():
    f = forecast("resnet18", instance="p3.16xlarge", gpus=8, batch_size=256, epochs=3, dataset_size=10_000)
    assert f.steps_per_epoch == math.ceil(10_000 / 256)
    assert f.epoch_s == pytest.approx(f.steps_per_epoch * f.iteration_s)
    assert f.total_s == pytest.approx(3 * f.epoch_s)
    assert f.cost_usd == pytest.approx(f.total_s / 3600 * 24.48, rel=1e-6)
    assert f.iteration_s == pytest.approx(f.forward_s + f.backward_s + f.optimizer_s + f.communication_s + f.overhead_s
                                          + f.straggler_s)
    assert [r.gpus for r in f.scaling] == [1, 2, 4, 8]
    assert f.scaling[0].speedup == 1.0
    assert all(0 < r.efficiency <= 1.0001 for r in f.scaling)


def test_weak_scaling_keeps_per_gpu_batch():
    f = forecast("resnet18", gpu="A100", gpus=16, batch_size=64, per_gpu_batch=True, dataset_size=100_000)
    assert f.global_batch == 1024 and f.nodes == 2
    assert all(r.per_gpu_batch == 64 for r in f.scaling)
    assert f.scaling[-1].nodes == 2


def test_oom_flag_and_largest_batch():
    f = forecast("llama-7b", gpu="T4", batch_size=1, seq_len=512, dataset_size=1000, scaling=False)
    assert not f.fits_in_memory and f.max_per_gpu_batch == 0
    assert "out of memory" in " ".join(f.notes)
    g = forecast("resnet18", gpu="A100-80GB", batch_size=32, dataset_size=1000, scaling=False)
    assert g.fits_in_memory and g.max_per_gpu_batch > 32


def test_interpolated_workload_equals_a_direct_trace():
    a, b = trace("resnet18", batch_size=2), trace("resnet18", batch_size=4)
    direct = trace("resnet18", batch_size=7)
    mid = interpolate(a, b, 7)
    assert mid.flops() == direct.flops()
    assert mid.bytes() == pytest.approx(direct.bytes(), rel=1e-9)
    assert mid.memory.activation_bytes == pytest.approx(direct.memory.activation_bytes, rel=0.01)
    fam = WorkloadFamily("resnet18")
    fam.trace(2)
    fam.trace(4)
    assert fam.at(7).flops() == direct.flops()


def test_impossible_configurations_are_config_errors():
    with pytest.raises(ConfigError, match="smaller than the 8 GPUs"):
        forecast("resnet18", gpu="V100", gpus=8, batch_size=4, dataset_size=100)
    with pytest.raises(ConfigError, match="does not split evenly"):
        forecast("resnet18", gpu="V100", gpus=6, nodes=4, batch_size=64, dataset_size=100)
    with pytest.raises(ConfigError, match="positive"):
        forecast("resnet18", gpu="V100", batch_size=64, epochs=-1, dataset_size=100)
    with pytest.raises(ConfigError, match="carries"):
        forecast("resnet18", gpu="A100", instance="p3.2xlarge", batch_size=64, dataset_size=100)


def test_parse_hardware_and_speed_ratio():
    from traincast.predict.compose import parse_hardware, speed_ratio

    assert parse_hardware("4xA100") == {"gpu": "A100-SXM4-40GB", "gpus": 4}
    assert parse_hardware("V100x2") == {"gpu": "V100-SXM2-16GB", "gpus": 2}
    assert parse_hardware("p4d.24xlarge") == {"instance": "p4d.24xlarge", "gpus": 8}
    assert parse_hardware("2xp3.16xlarge") == {"instance": "p3.16xlarge", "gpus": 16}
    r, price, label = speed_ratio("resnet18", batch_size=64, current="1xK80", target="4xA100")
    assert r < 0.1 and price > 0 and "A100" in label
    assert speed_ratio("resnet18", batch_size=64, current="T4", target="T4")[0] == pytest.approx(1.0)
    with pytest.raises(UnknownNameError):
        parse_hardware("4xZ100")
    with pytest.raises(ConfigError, match="count must be at least 1"):
        parse_hardware("0xA100")


def test_eta_move_to_other_hardware(tmp_path, capsys):
    import json

    from traincast.cli.main import _register_all, run

    _register_all()
    log = tmp_path / "run.csv"
    log.write_text("step,time,loss\n" + "".join(f"{s},{0.5 * s:.2f},{1 / s:.4f}\n" for s in range(1, 201)))
    code = run(["eta", str(log), "--total-steps", "1000", "--move-to", "4xA100", "--from", "1xT4",
                "--model", "resnet18", "--batch-size", "128", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0
    assert d["move"]["remaining_s"] < 0.5 * d["remaining_s"]
    assert run(["eta", str(log), "--total-steps", "1000", "--move-to", "4xA100"]) == 2
    assert "--move-to needs" in capsys.readouterr().err


def test_amd_fp32_gemms_run_on_the_matrix_units():
    """AMD CDNA has full-precision FP32 matrix instructions at twice the vector rate, and rocBLAS uses them:
    a large fp32 matmul is timed at the fp32_matrix peak x the tensor efficiency; elementwise ops stay on the
    vector units; fp32-strict keeps GEMMs on the vector rate."""
    from torch import nn

    dev = get_catalog().device("MI210")
    assert dev.fp32_matrix_tflops == 45.3 and dev.fp32_tflops == 22.6
    wl = trace(nn.Linear(4096, 4096, bias=False), batch_size=4096, inputs=(4096,))
    mm = next(i for i, o in enumerate(wl.ops) if o.phase == "forward" and o.op_class == "matmul")
    pred = AnalyticalPredictor()
    p = pred.params(dev)
    t = pred.predict(wl, dev).times_s[mm]
    expect = wl.ops[mm].flops / (45.3e12 * p.compute["tensor"]["matmul"])
    assert t == pytest.approx(expect, rel=0.05)
    strict = pred.predict(wl, dev, precision="fp32-strict").times_s[mm]
    assert strict == pytest.approx(wl.ops[mm].flops / (22.6e12 * p.compute["simt"]["matmul"]), rel=0.05)
    # a GPU without the field is unchanged: NVIDIA fp32 matmuls stay on the FP32 (SIMT) rate
    assert get_catalog().device("V100").fp32_matrix_tflops is None


def test_catalog_rejects_an_unknown_peak_precision(tmp_path):
    from traincast.errors import SpecError
    from traincast.hardware.catalog import device_from_row

    row = {"name": "X", "peak_tflops": {"fp32": 10, "fp23": 5}, "memory_gb": 8, "memory_bandwidth_gb_per_s": 100}
    with pytest.raises(SpecError, match=r"x.yaml: peak_tflops.fp23: unknown field; did you mean 'fp32'"):
        device_from_row(row, "x.yaml")


def test_recurrent_layers_run_as_cudnn_schedules_on_gpus():
    """An LSTM traced on meta is PyTorch's native per-step decomposition (two GEMMs and ~10 pointwise ops
    per step). On a GPU cuDNN runs one input GEMM for all steps, per step one recurrent GEMM and one fused
    pointwise kernel, and batched gradient GEMMs: same FLOPs, far fewer kernels."""
    from torch import nn

    from traincast.predict.rnn import cudnn_schedule

    import dataclasses


    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(n_in, H, num_layers=2, bidirectional=True, batch_first=True)
            self.head = nn.Linear(2 * H, 10)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    T, B, n_in, H = 40, 8, 256, 512
    wl = trace(Tagger(), batch_size=B, inputs=(T, n_in))
    calls = wl.recurrent_calls
    assert len(calls) == 1
    c = calls[0]
    assert (c.mode, c.seq_len, c.batch, c.hidden_size, c.num_layers, c.bidirectional) == ("LSTM", T, B, H, 2, True)
    sched = cudnn_schedule(c)
    traced_fwd = sum(o.flops for o in wl.ops if o.phase == "forward" and o.op_class == "matmul"
                     and o.module == "Tagger.rnn")
    fwd_mm = [o for o in sched if o.phase == "forward" and o.op_class == "matmul"]
    bwd_mm = [o for o in sched if o.phase == "backward" and o.op_class == "matmul"]
    # forward GEMM FLOPs by hand: 2 x 4H x (in + H) per token, layer 2 reads both directions (2H)
    by_hand = 2 * 4 * H * ((n_in + H) * 2 + (2 * H + H) * 2) * T * B
    assert sum(o.flops for o in fwd_mm) == by_hand == pytest.approx(traced_fwd, rel=1e-6)
    assert sum(o.flops for o in bwd_mm) == 2 * by_hand  # input and weight gradients
    # per layer and direction: 1 + T forward GEMMs, T recurrent + 3 batched gradient GEMMs
    assert len(fwd_mm) == 4 * (1 + T) and len(bwd_mm) == 4 * (T + 3)
    assert c.module == "Tagger.rnn"
    assert sum(o.phase == "forward" for o in sched) < 0.3 * sum(o.phase == "forward" for o in wl.ops)

    plain_pred = AnalyticalPredictor()
    pred = make_predictor("analytical")  # every predictor by name is wrapped: recurrent layers as cuDNN runs them
    gpu = get_catalog().device("V100")
    ot, plain = pred.predict(wl, gpu), plain_pred.predict(wl, gpu)
    assert len(ot.times_s) == len(wl.ops)
    mod = calls[0].module
    s_ot = plain_pred.predict(dataclasses.replace(wl, ops=tuple(sched), recurrent_calls=()), gpu)
    for phase in ("forward", "backward"):
        got = sum(t for o, t in zip(wl.ops, ot.times_s) if o.phase == phase and o.module == mod)
        want = sum(t for o, t in zip(sched, s_ot.times_s) if o.phase == phase)
        assert got == pytest.approx(want, rel=1e-9)
    assert ot.total_s() < 0.5 * plain.total_s()  # thousands of launches fewer
    cpu = get_catalog().device("generic-2core-avx2")  # on a CPU the native decomposition is what runs
    assert pred.predict(wl, cpu).times_s == plain_pred.predict(wl, cpu).times_s


def test_interpolated_workloads_scale_the_recurrent_batch():
    w = interpolate(trace("gnmt", batch_size=8, seq_len=6), trace("gnmt", batch_size=16, seq_len=6), 24)
    calls = w.recurrent_calls
    assert w.interpolated_from == (8, 16) and calls and {c.batch for c in calls} == {24}


def test_a_config_without_a_dataset_size_forecasts_one_iteration(tmp_path, capsys):
    """A Hugging Face config has no default training set: the forecast gives the iteration, and the epoch,
    total and cost say they need --dataset-size."""
    import json

    from traincast.cli.main import _register_all, run

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64,
                               "n_layer": 2, "n_head": 2, "vocab_size": 300, "n_positions": 64}))
    f = forecast(str(cfg), gpu="A100", batch_size=4, seq_len=32, scaling=False)
    assert f.iteration_s > 0 and f.dataset_size is None
    assert f.epoch_s is None and f.total_s is None and f.cost_usd is None and f.steps_per_epoch is None
    assert any("--dataset-size" in n for n in f.notes)
    _register_all()
    assert run(["predict", str(cfg), "--gpu", "A100", "-b", "4", "--seq-len", "32"]) == 0
    out = capsys.readouterr().out
    assert "iteration" in out and "--dataset-size" in out
    assert run(["plan", str(cfg), "--epochs", "1", "-b", "4", "--seq-len", "32", "--plot", ""]) == 2
    assert "--dataset-size (training samples per epoch), --tokens or --steps is needed" in capsys.readouterr().err


def test_auto_reads_shapes_only_where_the_learned_model_times_ops():
    """``auto`` times a GPU of its fit with the learned model (which reads op shapes: exact traces) and hands any
    other GPU to the analytical roofline, where interpolated traces will do (the parallel search then traces two
    micro-batches instead of every one)."""
    from traincast.hardware.catalog import get_catalog
    from traincast.predict.registry import default_predictor

    cat = get_catalog()
    auto = default_predictor()
    assert auto.needs_shapes_on(cat.device("A100-SXM4-40GB"))
    assert not auto.needs_shapes_on(cat.device("H100-SXM5-80GB"))
    assert not auto.needs_shapes_on(cat.device("MI250"))


def test_a_step_measured_on_another_gpu_scales_the_compute_not_the_communication():
    """--measured-step-ms on --measured-on: one GPU's forecast becomes measured x forecast here / forecast there
    (by hand); on 8 GPUs the compute takes the same ratio and the gradient all-reduce does not; epoch, cost and the
    scaling table follow the new step."""
    from traincast.predict.options import forecast_from_options

    kw = dict(batch_size=8, dataset_size=3200, epochs=2, family=WorkloadFamily("resnet18"))
    here = forecast_from_options("resnet18", gpu="H100", **kw)
    there = forecast_from_options("resnet18", gpu="A100", **kw)
    f = forecast_from_options("resnet18", gpu="H100", measured_step_ms=50.0, measured_on="A100", **kw)
    k = 0.050 / there.iteration_s
    assert f.measured["ratio"] == pytest.approx(k) and f.measured["device"] == there.device
    assert f.iteration_s == pytest.approx(0.050 * here.iteration_s / there.iteration_s)
    assert f.total_s == pytest.approx(2 * f.steps_per_epoch * f.iteration_s)
    assert f.cost_usd == pytest.approx(f.total_s / 3600 * f.usd_per_hour)
    assert "scaled from a step measured on A100" in f.notes[0]

    many = dict(batch_size=64, gpus=8, family=kw["family"])
    plain = forecast_from_options("resnet18", gpu="H100", **many)
    g = forecast_from_options("resnet18", gpu="H100", measured_step_ms=50.0, measured_on="A100", **many)
    k8 = g.measured["ratio"]
    assert g.measured["per_gpu_batch"] == 8 and k8 == pytest.approx(k)
    assert g.communication_s == plain.communication_s > 0
    compute = plain.forward_s + plain.backward_s + plain.optimizer_s + plain.overhead_s + plain.straggler_s
    assert g.iteration_s == pytest.approx(plain.iteration_s + (k8 - 1) * compute)
    last = g.scaling[-1]
    assert last.gpus == 8 and last.iteration_s == pytest.approx(g.iteration_s)
    assert g.scaling[0].speedup == 1.0


@pytest.mark.parametrize("args, msg", [
    (["--measured-step-ms", "30"], "go together"),
    (["--measured-on", "A100"], "go together"),
    (["--measured-step-ms", "0", "--measured-on", "A100"], "positive number of milliseconds"),
    (["--measured-step-ms", "nan", "--measured-on", "A100"], "positive number of milliseconds"),
    (["--measured-step-ms", "30", "--measured-on", "Z999"], "unknown GPU 'Z999'"),
    (["--measured-step-ms", "30", "--measured-on", "A100", "--gpus", "8", "--tp", "2"], "data-parallel forecasts"),
])
def test_a_measured_step_given_wrong_is_refused_with_exit_2(capsys, args, msg):
    from traincast.cli.main import _register_all, run

    _register_all()
    code = run(["predict", "resnet18", "--gpu", "H100", "-b", "32", *args])
    err = capsys.readouterr().err
    assert code == 2 and msg in err and "Traceback" not in err
