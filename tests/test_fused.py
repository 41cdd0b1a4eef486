"""Fused kernels (workload/fused.py): cost models against hand formulas, the kernel a CUDA run picks, Mamba traced
through the fused scan (fast, backward a small multiple of forward), and the forecast's note."""

import json
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from traincast.workload import trace
from traincast.workload.fused import FUSED, attended_pairs, attention_kernel, cost_of

M = "meta"


def _t(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device=M)


def test_registry_names_every_kernel_with_help():
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
                 "_scaled_dot_product_efficient_attention", "selective_scan_fwd", "selective_scan_bwd",
                 "causal_conv1d_fwd", "causal_conv1d_bwd", "ssd_chunk_scan_fwd", "_fused_rms_norm",
                 "native_layer_norm", "_log_softmax", "nll_loss_forward"):
        assert name in FUSED and FUSED.entry(name).help


def test_causal_pairs():
    assert attended_pairs(4, 4, False) == 16
    assert attended_pairs(4, 4, True) == 10  # 1 + 2 + 3 + 4
    assert attended_pairs(2, 5, True) == 3  # top-left aligned: query i sees keys 0..i
    assert attended_pairs(5, 2, True) == 1 + 2 + 2 + 2 + 2


def test_flash_attention_forward_and_backward_by_hand():
    b, h, s, d = 2, 8, 128, 64
    q, k, v = _t(b, h, s, d), _t(b, h, s, d), _t(b, h, s, d)
    o, lse = _t(b, h, s, d), _t(b, h, s, dtype=torch.float32)
    fwd = cost_of("_scaled_dot_product_flash_attention", (q, k, v, False, 0.125), {}, (o, lse))
    assert fwd.flops == 4 * b * h * s * s * d  # QK^T and PV
    assert fwd.bytes_read == 3 * b * h * s * d * 2  # Q, K, V read once (bf16)
    assert fwd.bytes_written == b * h * s * d * 2 + b * h * s * 4  # O and the fp32 log-sum-exp
    causal = cost_of("_scaled_dot_product_flash_attention", (q, k, v, True, 0.125), {}, (o, lse))
    assert causal.flops == 4 * b * h * (s * (s + 1) // 2) * d  # about half
    bwd = cost_of("_scaled_dot_product_flash_attention_backward", (o, q, k, v, o, lse, False, 0.125), {},
                  (q, k, v))
    assert bwd.flops == 10 * b * h * s * s * d  # S recomputed, dV, dP, dQ, dK: 2.5x the forward
    assert bwd.bytes_read == 5 * b * h * s * d * 2 + b * h * s * 4  # dO, Q, K, V, O and LSE
    assert bwd.bytes_written == 3 * b * h * s * d * 2


def test_attention_any_batch_dims_and_grouped_query():
    # three leading dims, 8 query heads sharing 2 key/value heads
    q, k, v = _t(2, 3, 8, 16, 32), _t(2, 3, 2, 16, 32), _t(2, 3, 2, 16, 32)
    o, lse = _t(2, 3, 8, 16, 32), _t(2, 3, 8, 16, dtype=torch.float32)
    c = cost_of("_scaled_dot_product_flash_attention", (q, k, v, False, 1.0), {}, (o, lse))
    assert c.flops == 4 * (2 * 3 * 8) * 16 * 16 * 32  # every query head attends
    assert c.bytes_read == (2 * 3 * 8 + 2 * 2 * 3 * 2) * 16 * 32 * 2  # K and V only at their own 2 heads


def test_the_kernel_cuda_picks():
    q = _t(1, 2, 8, 64)
    assert attention_kernel(q, q, q, None) == "flash"
    assert attention_kernel(q.float(), q.float(), q.float(), None) == "memory-efficient"  # fp32
    assert attention_kernel(q, q, q, _t(1, 1, 8, 8)) == "memory-efficient"  # an explicit mask
    big = _t(1, 2, 8, 512)
    assert attention_kernel(big, big, big, None) == "memory-efficient"  # head dim over 256


def test_sdpa_in_a_trace_is_the_fused_kernel_with_gqa_and_causal_halving():
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(64, 64)
            self.kv = nn.Linear(64, 32)

        def forward(self, x):
            b, s, _ = x.shape
            q = self.q(x).view(b, s, 4, 16).transpose(1, 2)
            k, v = self.kv(x).view(b, s, 2, 16).transpose(1, 2).chunk(2, dim=-1)
            k, v = k.repeat(1, 1, 1, 2), v.repeat(1, 1, 1, 2)  # 2 kv heads, 16 wide
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    wl = trace(Attn(), batch_size=2, inputs=(32, 64), precision="amp-bf16")
    att = [o for o in wl.ops if o.op_class == "attention"]
    assert [o.aten for o in att] == ["_scaled_dot_product_flash_attention",
                                     "_scaled_dot_product_flash_attention_backward"]
    assert att[0].dtype == "bf16"  # autocast casts SDPA's inputs
    assert att[0].input_shapes[1] == (2, 2, 32, 16)  # grouped-query keys stay at their 2 heads
    assert att[0].flops == 2 * (2 * 4) * (32 * 33 // 2) * (16 + 16)
    assert att[1].flops == 2 * (2 * 4) * (32 * 33 // 2) * (3 * 16 + 2 * 16)
    # FP32: no flash; the memory-efficient kernel takes no grouped-query heads (PyTorch's sdp_utils.cpp), so SDPA
    # runs its math path: the 2 x 4 x 32 x 32 scores are materialised and soft-maxed, keys repeated to 4 heads
    fp32 = trace(Attn(), batch_size=2, inputs=(32, 64))
    assert not [o for o in fp32.ops if o.aten.startswith("_scaled_dot_product")]
    soft = [o for o in fp32.ops if o.aten in ("_softmax", "_safe_softmax")]
    assert soft and soft[0].output_shapes[0] == (2, 4, 32, 32) and soft[0].dtype == "fp32"
    assert dict(fp32.fused_kernels).get("sdpa_math") == 1
    assert any("math path, 1 per step" in n for n in fp32.kernel_notes())
    # equal heads in FP32: the memory-efficient kernel
    class Mha(Attn):
        def forward(self, x):
            b, s, _ = x.shape
            q = self.q(x).view(b, s, 4, 16).transpose(1, 2)
            return F.scaled_dot_product_attention(q, q, q, is_causal=True)

    mha = trace(Mha(), batch_size=2, inputs=(32, 64))
    assert {o.aten for o in mha.ops if o.op_class == "attention"} == {
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward"}


def test_selective_scan_by_hand():
    b, d, length, n = 2, 32, 64, 16
    u, delta, z = _t(b, d, length), _t(b, d, length), _t(b, d, length)
    A, D, bias = _t(d, n, dtype=torch.float32), _t(d, dtype=torch.float32), _t(d, dtype=torch.float32)
    B, C = _t(b, n, length), _t(b, n, length)
    y = _t(b, d, length)
    fwd = cost_of("selective_scan_fwd", (u, delta, A, B, C, D, z, bias, True), {}, y)
    assert fwd.flops == 9 * b * d * length * n + 2 * b * d * length  # mamba_ssm's own count, D and z terms
    assert fwd.bytes_read == 3 * b * d * length * 2 + 2 * b * n * length * 2 + (d * n + 2 * d) * 4
    assert fwd.bytes_written == b * d * length * 2
    bwd = cost_of("selective_scan_bwd", (y, u, delta, A, B, C, D, z, bias, True), {}, [u, delta, A, B, C, D, z, bias])
    assert bwd.flops == 3 * fwd.flops


def test_causal_conv1d_by_hand():
    b, d, length, w = 2, 32, 64, 4
    x, wt, bias = _t(b, d, length), _t(d, w), _t(d)
    fwd = cost_of("causal_conv1d_fwd", (x, wt, bias, True), {}, _t(b, d, length))
    assert fwd.flops == 2 * b * d * length * w + b * d * length + 4 * b * d * length
    assert fwd.bytes_read == (b * d * length + d * w + d) * 2 and fwd.bytes_written == b * d * length * 2


def test_causal_conv1d_backward_and_masked_attention_by_hand():
    b, d, length, w = 2, 32, 64, 4
    x, wt = _t(b, d, length), _t(d, w)
    bwd = cost_of("causal_conv1d_bwd", (x, x, wt, None, False), {}, [x, wt])
    assert bwd.flops == 4 * b * d * length * w  # dx and dweight, no bias, no activation
    assert bwd.bytes_read == (2 * b * d * length + d * w) * 2 and bwd.bytes_written == (b * d * length + d * w) * 2
    q = _t(2, 4, 16, 8, dtype=torch.float32)
    mask = _t(2, 1, 16, 16, dtype=torch.float32)
    o, lse = _t(2, 4, 16, 8, dtype=torch.float32), _t(2, 4, 16, dtype=torch.float32)
    c = cost_of("_scaled_dot_product_efficient_attention", (q, q, q, mask, False, 1.0), {}, (o, lse))
    assert c.flops == 4 * 2 * 4 * 16 * 16 * 8  # a mask given as a tensor: every pair computed
    assert c.bytes_read == 3 * 2 * 4 * 16 * 8 * 4 + 2 * 16 * 16 * 4  # Q, K, V and the mask


def test_ssd_chunk_scan_by_hand():
    b, length, h, p, g, n, q = 1, 256, 4, 32, 1, 16, 64
    x, dt, A = _t(b, length, h, p), _t(b, length, h), _t(h, dtype=torch.float32)
    B, C = _t(b, length, g, n), _t(b, length, g, n)
    fwd = cost_of("ssd_chunk_scan_fwd", (x, dt, A, B, C, q, None, None, True), {}, _t(b, length, h, p))
    assert fwd.flops == 2 * b * length * (g * q * n + h * q * p + 2 * h * n * p)


def test_norms_and_cross_entropy_by_hand():
    x = _t(8, 128, dtype=torch.float32)
    w = _t(128, dtype=torch.float32)
    c = cost_of("_fused_rms_norm", (x, [128], w, 1e-6), {}, (x, _t(8, 1, dtype=torch.float32)))
    assert c.flops == 4 * 8 * 128 and c.bytes_read == (8 * 128 + 128) * 4 and c.bytes_written == (8 * 128 + 8) * 4
    logits, tgt = _t(8, 1000, dtype=torch.float32), torch.empty(8, dtype=torch.long, device=M)
    c = cost_of("nll_loss_forward", (logits, tgt, None, 1, -100), {}, (_t(), _t()))
    assert c.bytes_read == 8 * (8 + 4)  # one log-probability per target, not the whole vocabulary


def _mamba(tmp_path, **kw):
    cfg = {"model_type": "mamba", "architectures": ["MambaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
           "vocab_size": 1000, "state_size": 16, **kw}
    p = tmp_path / "mamba.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def test_mamba_traces_fast_through_the_fused_scan(tmp_path):
    t0 = time.perf_counter()
    wl = trace(_mamba(tmp_path), batch_size=2, seq_len=512)
    assert time.perf_counter() - t0 < 20  # the sequential reference path loops 512 times per layer
    names = dict(wl.fused_kernels)
    assert names == {"selective_scan_fwd": 2, "selective_scan_bwd": 2, "causal_conv1d_fwd": 2,
                     "causal_conv1d_bwd": 2}
    assert 2.0 <= wl.flops("backward") / wl.flops("forward") <= 3.0
    assert not any(o.aten == "stack" for o in wl.ops)  # no per-position outputs stacked
    assert any("selective scan: mamba_ssm" in n for n in wl.kernel_notes())
    from traincast.workload import Workload

    assert Workload.from_json(wl.to_json()).fused_kernels == wl.fused_kernels


def test_rwkv_traces_through_its_wkv_kernel(tmp_path):
    """RWKV-4's time mixing runs as transformers' CUDA kernel, not its per-position Python loop: one forward and
    one backward WKV kernel per layer, 20 FLOPs per (token, channel) forward and three times that backward, the
    kernel's inputs and output read and written once; the note names the kernel and no Mamba package."""
    B, T, C, L = 2, 256, 64, 2
    p = tmp_path / "rwkv.json"
    p.write_text(json.dumps({"model_type": "rwkv", "hidden_size": C, "num_hidden_layers": L, "vocab_size": 1000,
                             "context_length": T, "attention_hidden_size": C, "intermediate_size": 4 * C}))
    t0 = time.perf_counter()
    wl = trace(str(p), batch_size=B, seq_len=T)
    assert time.perf_counter() - t0 < 20
    assert dict(wl.fused_kernels) == {"rwkv_wkv_fwd": L, "rwkv_wkv_bwd": L}
    fwd = [o for o in wl.ops if o.aten == "rwkv_wkv_fwd"]
    bwd = [o for o in wl.ops if o.aten == "rwkv_wkv_bwd"]
    assert {o.flops for o in fwd} == {20 * B * T * C} and {o.flops for o in bwd} == {60 * B * T * C}
    assert {o.bytes_read for o in fwd} == {4 * (2 * C + 2 * B * T * C)} and {o.bytes_written for o in fwd} == {4 * B * T * C}
    assert len(wl.ops) < 40 * T  # no per-position loop (it ran about 20 ops per position and layer)
    notes = wl.kernel_notes()
    assert any("RWKV WKV: RWKV CUDA kernel" in n for n in notes) and not any("mamba_ssm" in n for n in notes)


def test_mamba2_traces_through_the_chunked_scan(tmp_path):
    cfg = {"model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
           "vocab_size": 1000, "state_size": 16, "num_heads": 4, "head_dim": 32, "n_groups": 1, "chunk_size": 32}
    p = tmp_path / "m2.json"
    p.write_text(json.dumps(cfg))
    wl = trace(str(p), batch_size=2, seq_len=128)
    assert dict(wl.fused_kernels)["ssd_chunk_scan_fwd"] == 2
    assert 1.5 <= wl.flops("backward") / wl.flops("forward") <= 3.0


def test_forecast_names_the_attention_kernel():
    from traincast.predict import forecast

    f = forecast("gpt2", gpu="A100-80GB", batch_size=2, seq_len=128, precision="amp-bf16", scaling=False)
    assert any(n.startswith("attention: flash, fused") for n in f.notes)


def test_kernels_are_in_place_only_in_the_tracing_thread():
    import threading

    from traincast.workload.fused import FusedKernels

    q = torch.randn(1, 2, 4, 8)  # real CPU tensors: another thread's real work
    orig = F.scaled_dot_product_attention
    with FusedKernels():
        seen = []
        th = threading.Thread(target=lambda: seen.append(F.scaled_dot_product_attention(q, q, q).shape))
        th.start()
        th.join()
        assert seen == [q.shape]  # computed for real, not sent to a cost-model op
        with FusedKernels(attention=False):  # nested, attention off: the original
            assert F.scaled_dot_product_attention(q, q, q).shape == q.shape
    assert F.scaled_dot_product_attention is orig
