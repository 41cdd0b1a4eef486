"""Kernel fusion (workload/fusion.py): the data flow the tracer records and the bytes a fused kernel moves."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from traincast.cli.main import _register_all, run
from traincast.hardware import get_catalog
from traincast.predict.host import host_seconds
from traincast.predict.roofline import RooflineParams, compile_ops
from traincast.workload import trace
from traincast.workload.fusion import apply_kernels, fuse_pointwise, fusion_groups
from traincast.workload.records import MemoryFootprint, Workload
from traincast.workload.tracer import trace_call

_register_all()
M, K, N = 64, 32, 48


def _wl(ops) -> Workload:
    return Workload(model="t", batch_size=1, optimizer="sgd", ops=tuple(ops),
                    memory=MemoryFootprint(0, 0, 0, 0, 0, 1), parameters=0, trainable_parameters=0)


def _meta(*shape):
    return torch.empty(*shape, device="meta")


def test_a_chain_after_a_matmul_reads_its_input_once_and_keeps_intermediates_in_registers():
    x, w = _meta(M, K), _meta(K, N)
    _, ops = trace_call(lambda: ((x @ w).relu() * 2 + 1).sum())
    assert [o.aten for o in ops] == ["mm", "relu", "mul", "add", "sum"]
    # data flow: relu reads the matmul's output, each later op its predecessor's
    assert ops[1].src[0][:3] == (0, 0, M * N * 4) and ops[2].src[0][0] == 1 and ops[3].src[0][0] == 2
    eager = _wl(ops)
    f = fuse_pointwise(eager)
    assert fusion_groups(eager.ops) == [[1, 2, 3, 4]]
    assert [o.fusion for o in f.ops] == [0, 1, 2, 2, 2]
    assert f.ops[0] == eager.ops[0]  # the matmul is untouched
    fused = f.ops[1:]
    # one read of the matmul's output; nothing written: every intermediate stays in the kernel (the sum is
    # read by no one)
    assert sum(o.bytes_read for o in fused) == M * N * 4
    assert sum(o.bytes_written for o in fused) == 0
    assert [o.flops for o in f.ops] == [o.flops for o in eager.ops]
    assert sum(o.bytes_total for o in eager.ops[1:]) == 3 * (2 * M * N * 4) + M * N * 4 + 4


def test_a_tensor_on_a_freed_storages_address_is_not_its_writer_output():
    """The data flow keys a tensor by its storage's address; a storage made after another was freed can take that
    address. The tracer holds every storage it has keyed until the trace ends, so ``b`` below, allocated without
    a recorded op right after ``a`` was freed, reads as a leaf (a negative source), never as ``mul``'s output
    (before the fix, 11 of 20 such reads pointed to an earlier op, and compiled forecasts varied run to run)."""

    def fn():
        for _ in range(20):
            a = torch.ones(1000, device="meta") * 2
            del a
            b = torch.empty(1000, device="meta")
            c = b + 1
        return c

    _, ops = trace_call(fn)
    adds = [o for o in ops if o.aten == "add"]
    assert len(adds) == 20 and all(o.src[0][0] < 0 for o in adds)


def test_tracing_a_model_twice_gives_the_same_ops(tmp_path):
    """The same model traced twice in one process: the same ops, bytes and data flow (a compiled GPT's)."""
    cfg = tmp_path / "gpt.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 64,
                               "vocab_size": 128}))
    a, b = (apply_kernels(trace(str(cfg), batch_size=2, seq_len=32, optimizer="adam"), "compiled") for _ in range(2))
    assert [(o.aten, o.bytes_read, o.bytes_written, o.src) for o in a.ops] == \
        [(o.aten, o.bytes_read, o.bytes_written, o.src) for o in b.ops]


def test_an_output_read_outside_the_group_is_written():
    x, w1, w2, w3 = _meta(M, K), _meta(K, N), _meta(N, K), _meta(N, K)

    def fn():
        h = (x @ w1).relu()
        g = h * 2
        return g @ w2, h @ w3

    _, ops = trace_call(fn)
    assert [o.aten for o in ops] == ["mm", "relu", "mul", "mm", "mm"]
    f = fuse_pointwise(_wl(ops))
    relu, mul = f.ops[1], f.ops[2]
    assert relu.bytes_read == M * N * 4 and mul.bytes_read == 0
    # h is read by the last matmul and g by the second: both leave the kernel
    assert relu.bytes_written == M * N * 4 and mul.bytes_written == M * N * 4


def test_groups_never_span_phases_or_repeated_blocks(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 1000,
                             "n_positions": 64}))
    wl = trace(str(p), batch_size=2, seq_len=32, precision="amp-bf16", optimizer="adamw")
    f = fuse_pointwise(wl)
    groups = fusion_groups(wl.ops)
    assert any(len(g) > 2 for g in groups)
    for g in groups:
        assert len({wl.ops[i].phase for i in g}) == 1
        assert wl.ops[g[0]].phase in ("forward", "backward")
        blocks = {".".join(wl.ops[i].module.split(".")[:4]) for i in g if ".h." in wl.ops[i].module}
        assert len(blocks) <= 1
    # same ops, FLOPs and states; fewer bytes; optimizer untouched; fewer saved activations (the partitioner's cut,
    # tested by hand below), and a smaller working set
    assert len(f.ops) == len(wl.ops) and f.flops() == wl.flops()
    assert (f.memory.parameter_bytes, f.memory.gradient_bytes, f.memory.optimizer_state_bytes) == \
        (wl.memory.parameter_bytes, wl.memory.gradient_bytes, wl.memory.optimizer_state_bytes)
    assert 0 < f.recomputed_bytes < wl.memory.activation_bytes
    assert f.memory.activation_bytes == wl.memory.activation_bytes - f.recomputed_bytes
    assert f.memory.transient_bytes <= wl.memory.transient_bytes
    assert f.bytes("forward") < 0.8 * wl.bytes("forward") and f.bytes("backward") < 0.8 * wl.bytes("backward")
    assert f.bytes("optimizer") == wl.bytes("optimizer")
    # launches: one per fused kernel; the ops inside have no kernel floor, overhead or host time of their own
    dev = get_catalog().device("A100-SXM4-80GB")
    params = RooflineParams.for_device(dev)
    inside = np.array([o.fusion == 2 for o in f.ops])
    assert inside.sum() == f.fused_pointwise[0] - f.fused_pointwise[1] > 0
    t_f = compile_ops(f.ops, dev, "amp-bf16", params).times(params)
    t_e = compile_ops(wl.ops, dev, "amp-bf16", params).times(params)
    assert t_f.sum() < t_e.sum()
    tiny = replace(params, op_overhead_us=0.0, kernel_floor_us=0.0)
    zero_bytes = [replace(o, bytes_read=0, bytes_written=0, flops=0) for o in f.ops]
    assert np.all(compile_ops(zero_bytes, dev, "amp-bf16", tiny).times(tiny)[inside] == 0)
    assert np.all(host_seconds(f.ops, 15.0, 8.0)[inside] == 0)
    assert "fused kernels" in " ".join(f.kernel_notes())
    # the data flow survives a round trip through JSON, and so the fusion of a saved trace is the same
    again = Workload.from_json(wl.to_json())
    assert fuse_pointwise(again).ops == f.ops


def test_cli_compiled_is_faster_and_a_bad_mode_is_one_line(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 2, "vocab_size": 1000,
                             "n_positions": 256}))
    out = {}
    for k in ("eager", "compiled"):
        code = run(["predict", str(p), "--gpu", "H100", "-b", "8", "--seq-len", "256", "--precision", "amp-bf16",
                    "--optimizer", "adamw", "--kernels", k, "--json"])
        assert code == 0
        out[k] = json.loads(capsys.readouterr().out)
    assert out["compiled"]["iteration_s"] < out["eager"]["iteration_s"]
    assert out["compiled"]["memory"]["peak_bytes"] < out["eager"]["memory"]["peak_bytes"]
    assert any("fused kernels" in n for n in out["compiled"]["notes"])
    assert any("recomputed in the backward pass" in n for n in out["compiled"]["notes"])
    code = run(["predict", str(p), "--gpu", "H100", "-b", "8", "--kernels", "inductor"])
    err = capsys.readouterr().err
    assert code == 2 and "kernel mode" in err and "compiled" in err and "Traceback" not in err
    # `trace` shows the step as the compiler runs it too: fewer saved activations, said in a note
    acts = {}
    for k in ("eager", "compiled"):
        assert run(["trace", str(p), "-b", "8", "--seq-len", "256", "--precision", "amp-bf16", "--kernels", k,
                    "--json"]) == 0
        wl = json.loads(capsys.readouterr().out)
        acts[k] = wl["memory"]["activation_bytes"]
        assert wl["kernels"] == k
    assert acts["compiled"] < acts["eager"]
    assert run(["trace", str(p), "-b", "8", "--kernels", "compiled"]) == 0
    assert "recomputed in the backward pass" in " ".join(capsys.readouterr().out.split())  # however rich wraps it
    code = run(["trace", str(p), "-b", "8", "--kernels", "inductor"])
    err = capsys.readouterr().err
    assert code == 2 and "kernel mode" in err and "Traceback" not in err


def test_parallel_layouts_take_the_kernel_mode(tmp_path):
    from traincast.predict.options import forecast_from_options

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
                             "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
                             "vocab_size": 2000, "max_position_embeddings": 512}))
    its, mem = {}, {}
    for k in ("eager", "compiled"):
        f = forecast_from_options(str(p), gpu="H100", gpus=8, batch_size=16, seq_len=512, precision="amp-bf16",
                                  optimizer="adamw", tp=2, pp=2, micro_batch=1, kernels=k)
        its[k], mem[k] = f.iteration_s, f.peak_memory_bytes
    assert its["compiled"] < its["eager"]
    assert mem["compiled"] < mem["eager"]


def test_a_compiled_layout_keeps_the_activations_the_partitioner_saves(tmp_path):
    """A compiler recomputes autocast's weight casts from the parameters, so its saved bytes hold none of them:
    a layout of one replica per GPU keeps exactly the compiled trace's saved activations (not those less the
    weight copies, which had left nothing: 0 B of activations for a 7B model)."""
    from traincast.predict.options import forecast_from_options

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
                             "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
                             "vocab_size": 2000, "max_position_embeddings": 512}))
    acts = {}
    for k in ("eager", "compiled"):
        wl = apply_kernels(trace(str(p), batch_size=1, seq_len=512, precision="amp-bf16", optimizer="adamw"), k)
        f = forecast_from_options(str(p), gpu="H100", gpus=2, batch_size=2, seq_len=512, precision="amp-bf16",
                                  optimizer="adamw", zero=3, micro_batch=1, kernels=k)
        acts[k] = (f.memory["activations"], wl.memory.activation_bytes, wl.recomputed_bytes)
    saved, traced, recomputed = acts["compiled"]
    assert recomputed > 0 and saved == pytest.approx(traced, rel=0.01)
    eager_saved, eager_traced, _ = acts["eager"]
    assert 0 < saved < eager_saved < eager_traced  # eager's copies of the weights are counted once, apart


def test_a_workload_without_data_flow_is_refused():
    x, w = _meta(M, K), _meta(K, N)
    _, ops = trace_call(lambda: (x @ w).relu() * 2)
    with pytest.raises(ValueError, match="data flow"):
        fuse_pointwise(_wl([replace(o, src=(), outs=()) for o in ops]))


def test_plan_takes_the_kernel_mode(tmp_path):
    from traincast.plan.pareto import plan

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 2, "vocab_size": 1000,
                             "n_positions": 256}))
    best = {}
    for k in ("eager", "compiled"):
        res = plan(str(p), epochs=1, dataset_size=1000, batch_size=64, gpus=(8,), gpu_types=("A100-SXM4-80GB",),
                   precision="amp-bf16", optimizer="adamw", seq_len=256, kernels=k)
        best[k] = min(c.iteration_s for c in res.configs)
    assert best["compiled"] < best["eager"]


def test_transformer_engine_runs_attention_in_cudnn_at_its_own_rate(tmp_path):
    """--kernels transformer-engine: the compiled mode's fusion, and the half-precision fused attention renamed to
    cuDNN's kernel with the same FLOPs and bytes; on Hopper it is timed at cuDNN's share of the tensor peak
    (efficiency.yaml: 0.53 against FlashAttention-2's 0.33), elsewhere at the same share as flash."""
    from traincast.predict.analytical import AnalyticalPredictor
    from traincast.predict.compose import WorkloadFamily
    from traincast.workload.fusion import apply_kernels

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
                             "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
                             "vocab_size": 2000, "max_position_embeddings": 8192}))
    # flash pinned (--sdpa flash): the comparison is with the kernel PyTorch ran before it preferred cuDNN's
    wl = WorkloadFamily(str(p), optimizer="adamw", precision="amp-bf16", seq_len=8192, sdpa="flash").trace(1)
    comp, te = apply_kernels(wl, "compiled"), apply_kernels(wl, "transformer-engine")
    assert te.kernels == "transformer-engine"
    att = [i for i, o in enumerate(comp.ops) if o.op_class == "attention"]
    assert len(att) == 4  # 2 layers, forward and backward
    assert {comp.ops[i].aten for i in att} == {"_scaled_dot_product_flash_attention",
                                              "_scaled_dot_product_flash_attention_backward"}
    assert {te.ops[i].aten for i in att} == {"_scaled_dot_product_cudnn_attention",
                                            "_scaled_dot_product_cudnn_attention_backward"}
    assert [te.ops[i].flops for i in att] == [comp.ops[i].flops for i in att]
    assert [o for i, o in enumerate(te.ops) if i not in att] == [o for i, o in enumerate(comp.ops) if i not in att]
    assert any("cudnn" in n and "Transformer Engine" in n for n in te.kernel_notes())
    cat = get_catalog()
    pred = AnalyticalPredictor()
    for gpu, ratio in (("H100-SXM5-80GB", 0.33 / 0.53), ("A100-SXM4-80GB", 1.0)):
        dev = cat.device(gpu)
        tc = pred.predict(comp, dev, "amp-bf16").times_s
        tt = pred.predict(te, dev, "amp-bf16").times_s
        # 8,192 tokens, head dim 128: compute-bound, so the time scales with the efficiency
        for i in att:
            assert tt[i] / tc[i] == pytest.approx(ratio, rel=0.02)
        assert sum(tt[i] for i in range(len(tt)) if i not in att) == pytest.approx(
            sum(tc[i] for i in range(len(tc)) if i not in att))


def test_pytorch_sdpa_runs_cudnn_attention_on_hopper_and_flash_elsewhere(tmp_path, capsys):
    """--sdpa auto (the default): on Hopper and data-centre Blackwell current PyTorch's SDPA runs cuDNN's fused
    attention before flash (sdp_utils.cpp, check_prefer_cudnn_attention), so the flash ops of a BF16 trace are timed
    at cuDNN's share of the tensor peak there (Hopper: 0.53 against 0.33) and as flash on an A100; --sdpa flash
    keeps flash everywhere, --sdpa cudnn renames the ops; head dims above 128 stay flash; the forecast says which;
    a bad choice is one line, exit 2."""
    from traincast.cli.main import run
    from traincast.predict.analytical import AnalyticalPredictor
    from traincast.predict.compose import WorkloadFamily, kernel_notes_on

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
                             "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
                             "vocab_size": 2000, "max_position_embeddings": 8192}))
    kw = dict(optimizer="adamw", precision="amp-bf16", seq_len=8192)
    auto = WorkloadFamily(str(p), **kw).trace(1)
    flash = WorkloadFamily(str(p), sdpa="flash", **kw).trace(1)
    cudnn = WorkloadFamily(str(p), sdpa="cudnn", **kw).trace(1)
    att = [i for i, o in enumerate(auto.ops) if o.op_class == "attention"]
    assert len(att) == 4 and auto.sdpa == "auto" and flash.sdpa == "flash"
    assert [auto.ops[i].aten for i in att] == [flash.ops[i].aten for i in att]  # resolved where the GPU is known
    assert {cudnn.ops[i].aten for i in att} == {"_scaled_dot_product_cudnn_attention",
                                               "_scaled_dot_product_cudnn_attention_backward"}
    cat = get_catalog()
    pred = AnalyticalPredictor()
    for gpu, ratio in (("H100-SXM5-80GB", 0.33 / 0.53), ("H200-SXM-141GB", 0.33 / 0.53), ("A100-SXM4-80GB", 1.0)):
        dev = cat.device(gpu)
        ta, tf, tc = (pred.predict(w, dev, "amp-bf16").times_s for w in (auto, flash, cudnn))
        for i in att:
            assert ta[i] / tf[i] == pytest.approx(ratio, rel=0.02)
            assert tc[i] == pytest.approx(ta[i], rel=1e-9)  # (Ampere: cuDNN's kernel has flash's share)
        assert any(n.startswith("attention: cudnn") for n in kernel_notes_on(auto, dev)) == (ratio != 1.0)
        assert not any(n.startswith("attention: cudnn") for n in kernel_notes_on(flash, dev))
    # head dim 256: cuDNN's kernel is not assumed to take it, flash keeps it on Hopper too
    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps({"model_type": "llama", "hidden_size": 512, "intermediate_size": 688,
                                "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
                                "vocab_size": 2000, "max_position_embeddings": 8192}))
    w_auto = WorkloadFamily(str(wide), **kw).trace(1)
    w_flash = WorkloadFamily(str(wide), sdpa="flash", **kw).trace(1)
    dev = cat.device("H100-SXM5-80GB")
    assert pred.predict(w_auto, dev, "amp-bf16").times_s == pred.predict(w_flash, dev, "amp-bf16").times_s
    assert run(["predict", str(p), "--gpu", "H100", "-b", "1", "--seq-len", "1024", "--sdpa", "fast"]) == 2
    err = capsys.readouterr().err
    assert "--sdpa" in err and "'fast'" in err and "flash" in err and "Traceback" not in err
    for cmd in (["parallelize", str(p), "--gpu", "H100", "--gpus", "8", "-b", "8", "--seq-len", "1024"],
                ["plan", str(p), "--epochs", "1", "--dataset-size", "100", "-b", "8", "--gpus", "8", "--seq-len",
                 "1024", "--plot", ""]):
        assert run(cmd + ["--sdpa", "fast"]) == 2
        assert "--sdpa" in capsys.readouterr().err


def _step_ops(forward, backward):
    """The ops of ``forward()`` then ``backward(out)`` on meta tensors, with the data flow between them."""
    from traincast.workload.tracer import _OpRecorder, _Tracker

    rec = _OpRecorder(_Tracker(), "op")
    with rec:
        rec.phase = "forward"
        out = forward()
        rec.phase = "backward"
        backward(out)
    return rec.ops


def test_the_compiled_loss_keeps_the_half_precision_logits_not_the_fp32_log_softmax():
    """A cross-entropy over V classes on T rows of half-precision logits, upcast as Hugging Face and torchtitan do:
    eager autograd keeps the FP32 log-softmax (T x V x 4 bytes) for the backward; a compiler's min-cut partitioner
    keeps the BF16 logits (T x V x 2) and recomputes the log-softmax in the backward (the loss and its
    normaliser, two scalars, are kept either way). So T x V x 2 bytes fewer are saved, the fused forward kernel
    writes neither the FP32 copy nor the log-softmax, and the largest tensor any kernel writes is the logits."""
    T, V, H = 256, 1000, 64
    x = torch.empty(T, H, device="meta", dtype=torch.bfloat16)
    w = torch.empty(V, H, device="meta", dtype=torch.bfloat16, requires_grad=True)
    target = torch.zeros(T, dtype=torch.long, device="meta")
    ops = _step_ops(lambda: torch.nn.functional.cross_entropy((x @ w.t()).float(), target),
                    lambda loss: loss.backward())
    names = [o.aten for o in ops if o.phase == "forward"]
    assert names[-3:] == ["_to_copy", "_log_softmax", "nll_loss_forward"], names
    transient = 2 * max(o.bytes_written for o in ops)  # as the tracer counts it: twice the largest tensor written
    assert transient == 2 * T * V * 4
    eager = replace(_wl(ops), memory=MemoryFootprint(0, 0, 0, 10**9, transient, 1))
    f = fuse_pointwise(eager)
    assert f.recomputed_bytes == T * V * (4 - 2)
    assert f.memory.activation_bytes == 10**9 - T * V * 2
    lsm = next(i for i, o in enumerate(ops) if o.aten == "_log_softmax")
    assert eager.ops[lsm].bytes_written == T * V * 4 and f.ops[lsm].bytes_written == 0
    assert f.ops[lsm - 1].bytes_written == 0  # the FP32 copy stays in the kernel
    assert f.memory.transient_bytes == 2 * T * V * 2  # twice the BF16 logits, the largest tensor written
    assert "recomputed in the backward pass" in " ".join(f.kernel_notes())
    # torch.compile of the blocks only (the loss eager, outside any repeated block): nothing changes here
    blocks = fuse_pointwise(eager, blocks_only=True)
    assert blocks.recomputed_bytes == 0 and blocks.memory == eager.memory and blocks.kernels == "compiled-blocks"


def test_a_norm_keeps_its_input_and_statistics_and_a_dropout_mask_is_kept():
    """An RMSNorm computed in FP32 from a BF16 input, as Llama's is (x.float(), pow, mean, rsqrt, mul, cast back,
    weight), then a dropout and a sum: eager autograd keeps the FP32 copy, the 1/rms, the normalised BF16 tensor
    and the dropout mask; the partitioner keeps only the 1/rms (a reduction's output, T x 4: never recomputed), the
    mask (random: never recomputed; BF16, T x H x 2) and the loss (a BF16 scalar), and recomputes the rest from the
    BF16 input, which the step holds anyway (an input costs nothing to keep)."""
    T, H = 512, 256
    x = torch.empty(T, H, device="meta", dtype=torch.bfloat16, requires_grad=True)
    g = torch.empty(H, device="meta", dtype=torch.bfloat16, requires_grad=True)

    def forward():
        h = x.float()
        r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        y = g * (h * r).to(torch.bfloat16)
        return torch.nn.functional.dropout(y, 0.1, training=True).sum()

    ops = _step_ops(forward, lambda out: out.backward())
    eager = replace(_wl(ops), memory=MemoryFootprint(0, 0, 0, 10**9, 10**9, 1))
    f = fuse_pointwise(eager)
    groups = [g for g in fusion_groups(ops) if ops[g[0]].phase == "forward"]
    consumers = {}
    for j, o in enumerate(ops):
        for p, slot, _b, _off in o.src:
            consumers.setdefault((p, slot), set()).add(j)
    saved = sum(ops[i].outs[s][0] for g in groups for i in g for s in range(len(ops[i].outs))
                if any(ops[j].phase == "backward" for j in consumers.get((i, s), ())))
    assert any("bernoulli" in o.aten for o in ops)
    kept = T * H * 2 + T * 4 + 2
    assert f.recomputed_bytes == saved - kept > 0
