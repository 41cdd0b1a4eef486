"""Single kernels on a lent GPU: PyTorch's native depthwise convolutions, and fused attention by backend.

Two mechanisms of issue 18 and 22 need kernel times no file in ../shared/data has (docs/gpu-accuracy.md):

1. **Depthwise convolutions.** PyTorch runs FP32 and BF16 depthwise convolutions on NCHW tensors with its own
   kernels (``aten/src/ATen/native/cuda/DepthwiseConv2d.cu``), not cuDNN's: the forward one thread per output
   looping over the taps (unrolled for 1x1, 3x3 and 5x5; a generic loop otherwise), the input gradient one
   thread per input element (unrolled for 1/3/5 and strides 1/2), the weight gradient one block of
   ``min(32 x batch, 256)`` threads per (channel, tap), each summing over batch x output pixels. Every distinct
   depthwise layer of the torchvision networks built on them (``MODELS``; shapes from a meta-device forward at
   224 x 224) is timed in its three passes (forward, input gradient, weight gradient, each alone through
   ``aten.convolution_backward``'s output mask), and both gradients as autograd asks for them. Variants, in this
   order (a cut-off run keeps the first): FP32 at batch 64 (the campaigns' FP32 batch), BF16 at 128 and 32 (their
   AMP batches), all NCHW; then FP32 at 64 and BF16 at 128 and 32 channels-last (cuDNN's kernels; the BF16 ones
   added 2026-11-28 after the first run, when ConvNeXt's depthwise convolutions were found to get channels-last
   strided inputs).
2. **Fused attention** (``F.scaled_dot_product_attention``) by backend (flash, memory-efficient, cuDNN), BF16,
   head dim 64 and 128 at width 4096, sequence 1K-16K at 32K tokens a call, causal and not: forward, and forward
   plus backward, giving each backend's share of the tensor peak where ``efficiency.yaml`` has 0.33 (flash on
   Hopper, set from the FlashAttention-3 paper's H100 figures) and 0.53 (cuDNN).

Timing: depthwise passes as ``fp8_gemm_bench._time`` does (calls captured in a CUDA graph, replays timed with
CUDA events, the median); attention with events around each call (milliseconds a call, so the host's dispatch is
a small share). Each row is appended to ``--out`` (JSON lines) as soon as it is measured; rows already there are
skipped, so a second run resumes; ``--deadline`` stops before the lease ends.

Protocol, written before any of these kernels was timed (2026-11-28, before the lease):
- Nothing in the catalog is set from the whole-model campaign rows (``benchmarks/data/gpu_campaign``). A GPU
  depthwise model, if one is built from these kernels, takes its form from the source above (forward and input
  gradient: outputs or inputs x taps at a rate per SM-GHz, unrolled vs generic; weight gradient: C x taps x
  batch x output pixels at a rate per SM-GHz scaled by the share of the GPU's threads its blocks fill), each
  bounded below by the pass's bytes over bandwidth. Its rates are fitted on the dev half of the kernel rows (a
  hash of each layer's key) and scored on the held half; then it is scored once on the campaigns' whole-model
  rows of the depthwise networks (H100 and H200, FP32 and AMP, defaults and with the H200 host profile), before
  and after. It becomes the default for NVIDIA GPUs if its held-half kernel MAPE is under 20% and the whole-model
  MAPE of those rows does not rise on either campaign; otherwise it is reported and left out.
- Attention: the measured step-weighted share of the BF16 tensor peak (forward + backward FLOPs over their time)
  at head dim 128, sequence 4K-16K, is reported beside the catalog's 0.33 / 0.53. A catalog value changes only if
  the measurement differs from it by more than 10% on both causal and non-causal rows; then the published-runs
  figures (``fp8_cp_validation.py``, ``parallel_megatron.py``) are rerun and reported before and after.

Protocol for cuDNN's channels-last kernels, written 2026-11-28 before the fit (issue 18; the FP32 channels-last
rows of ``h200_kernels_2026-11-28.jsonl`` were seen before, in the FLOP-rate roofline's errors and one trial of a
rate per tap, docs/gpu-accuracy.md; the BF16 ones of ``h200_kernels_cl_bf16_2026-11-28b.jsonl`` only as counts):
- Rows: every depthwise row with ``"format": "channels_last"`` and no ``error`` of both files (FP32 at batch 64,
  BF16 at 128 and 32), each with its three passes (forward, input gradient, weight gradient). Split: the hash of
  each row's key that ``--fit`` uses (``zlib.crc32(key) % 2``: 0 dev, 1 held). Nothing is fitted on held rows or on
  whole-model rows.
- Form, from what cuDNN's NHWC depthwise kernels do (channels contiguous: a thread or vector lane per channel of an
  output pixel, a loop over the taps; nothing on tensor cores, so TF32 does not apply), per pass ``p`` (fwd, dgrad,
  wgrad) and dtype class ``d`` (fp32; half: BF16, FP16 taking BF16's rates unmeasured):
  ``E`` the pass's elements (fwd and wgrad: outputs N x C x Ho x Wo; dgrad: inputs N x C x H x W), ``taps`` the
  kernel area, ``big`` 1 for kernels above 3x3 (cuDNN runs other kernels or algorithms for them: the FP32 7x7 rows
  are the slowest per tap); SM-cycles ``E x (a[p,d] + b[p,d] x taps x (1 + g[p] x big))`` over the SMs at the
  clock (as the native kernels: scales with SMs and clock on other NVIDIA GPUs), plus a fixed cost per call
  ``f[p]`` (us: the kernel's ramp and tail; for the weight gradient, its final reduction); the weight gradient also
  at least ``N x Ho x Wo x r`` (ns; one serial reduction over the batch's output pixels per (channel, tap), the
  bound when too few (channel, tap) pairs fill the GPU). Each pass's time is the roofline's: at least its bytes
  over the bandwidth (the ``conv`` memory efficiency), plus the ordinary per-op overhead and kernel floor. 19
  parameters (12 rates, 3 ``g``, 3 ``f``, ``r``), all >= 0, by least squares on log(forecast / measured) over the
  dev rows' passes, the bytes bound included.
- Scores: MAPE and median signed error per pass and dtype class on dev and held halves, of the model and of the
  FLOP-rate roofline it replaces (``conv_depthwise``).
- Adoption: the mechanism becomes the default for channels-last 2-D depthwise convolutions on NVIDIA GPUs if (1)
  its held-half MAPE is under 20% for each pass (all held rows of the pass, both dtype classes together; per dtype
  reported); a pass that misses it keeps today's timing (its share of the op's FLOPs at the ``conv_depthwise``
  efficiency) and the others are adopted alone (forward and input gradient without the weight gradient, say); if
  the forward and input gradient both miss, nothing is adopted; and (2) scored once on the campaigns' whole-model
  rows of the depthwise networks (``gpu_measured.py --models`` as addendum 7: mobilenet_v2, mobilenet_v3_large,
  mnasnet1_0, efficientnet_b0, efficientnet_v2_s, convnext_tiny, shufflenet_v2_x1_0, maxvit_t; H100 and H200, the
  defaults and ``--profile h200_host_profile_2026-11-27.yaml``), before and after, their MAPE rises in none of the
  four. All rows of both campaigns are reported beside, not ruled on. Nothing is retuned after the whole-model rows
  are seen; if (2) fails, the parameters are reported and the mechanism is left off (no values in
  ``efficiency.yaml``).

Protocol for cuDNN's algorithm choice (``--names``), written 2026-11-28 (evening) before any of its rows was measured:
- Why: the whole-model rows (the campaigns, ``traincast bench model``) run with ``torch.backends.cudnn.benchmark``
  on (``measure/timing.py``: cuDNN times its algorithms and keeps the fastest per shape), the kernel rows of the two
  files above with it off (PyTorch's default: cuDNN's heuristics pick). The channels-last weight gradient's fit
  failed the rule (held half 38.8%) with errors that look like an algorithm chosen by shape.
- Rows: the 168 channels-last layer-variants (``--variants 3,4,5``), first every one with the algorithms chosen by
  timing (``cudnn-benchmark``), then by heuristics (``cudnn-heuristic``); each pass timed as before and its GPU
  kernels named (torch.profiler, one call after the timed ones).
- Read and report, nothing set from it: the kernels (names without template arguments) each pass runs, per mode
  and dtype; the median ratio benchmark / heuristic time per pass and dtype class; this run's heuristic rows
  against the earlier files' (the same layers and mode: lease-to-lease repeatability).
- Refit: ``--fit-cl FILE --cl-mode benchmark`` fits the same 19-parameter form on the benchmark-mode rows, the same
  split (the layer's key without its mode), the same adoption rule (each pass's held-half MAPE under 20%; then the
  campaigns' depthwise-network rows, H100 and H200, defaults and with the H200 host profile, worse in none of the
  four). The whole models run in that mode, so parameters that pass replace today's ``dw_cl`` (a pass that fails
  keeps today's treatment: the forward and input gradient their heuristic-mode values if those still pass on the
  benchmark rows' held half, else the FLOP rate). A form per kernel family, if the names suggest one, needs its own
  protocol committed before it is fitted.

Protocol for the weight gradient by kernel family, written 2026-11-28 18:58 UTC before any fit or score of it (issue
18). Seen before: the fifth lease's paragraph of docs/gpu-accuracy.md (the four families' counts over all 168
layer-variants and which layers run the rare ones, held rows included), the old single form's scores (held 33.2%),
and, for this rule, the dev half's kernel names and shapes (no times of any row):
- Rows: the benchmark-mode rows of ``h200_kernels_names_2026-11-28c.jsonl`` (``--cl-mode benchmark``: the whole
  models' mode), the split of ``--fit-cl`` (``zlib.crc32`` of the key without its mode, 0 dev, 1 held). The family
  that ran a row is read from its weight-gradient kernels' names: ``implicit_gemm`` (with ``tensorTransformGeneric``)
  "gemm", ``wgrad2d_grouped_direct_kernel`` "direct", ``wgrad2d_shmem_tiling`` "shmem", anything else the dtype
  class's common family (FP32 ``sm90_xmma_depthwise_convolution_wgrad_tiling``, half ``wgrad2d_c1_k1_nhwc`` + its
  reduction).
- The family rule (:func:`traincast.predict.roofline.cl_wgrad_family`), from the dev half only (87 rows: all 56 BF16
  rows run the common kernel; of 31 FP32 rows 29 run the tiling kernel, the one 7x7 row, C384 at 14x14, the implicit
  GEMM, the one row whose channels are not a multiple of 4, C58 at 56x56 stride 2, the grouped direct kernel):
  half precision (BF16, FP16 unmeasured): the common family, always; FP32 with a kernel above 5x5 (taps > 25): gemm;
  else FP32 with channels not a multiple of 4 (the tiling kernel's 16-byte channel vectors, assumed): direct; else
  the common family. Every shape, measured or not, is classed by it; none goes to "shmem" (no dev row ran it). By the
  paragraph above it will miss the held half's BF16 shmem and direct rows and FP32 direct rows other than those with
  channels not a multiple of 4 (ShuffleNet's 232-channel layers, ConvNeXt's 768-channel 7x7, where held).
- Time forms, per family, SM-cycles over the SMs at the clock (scales with SMs and clock as the other passes) plus
  the weight gradient's call cost ``wgrad_call_us`` (one for all families), each bounded below by the pass's bytes
  over the ``conv`` bandwidth as the roofline does: common, today's form (``E x (a + b x taps x (1 + big x [above
  3x3]))``, rates per dtype class, at least ``N x Ho x Wo x wgrad_pixel_ns``; 7 parameters); direct, ``E x taps x
  wgrad_direct_tap_cycles`` (one loop over the taps per output element, no vectors; one rate for both dtype
  classes: no half row of it in the dev half); gemm, ``E x taps x wgrad_gemm_tap_cycles`` (the TF32 implicit GEMM,
  whose work grows as outputs x taps, mostly wasted on a depthwise layer's one-channel groups) plus its three layout
  transforms, ``2 x 4 x (input + output-gradient elements)`` bytes (each tensor read and written once in FP32; the
  weight's is negligible) over the ``copy`` bandwidth. ``E`` the outputs N x C x Ho x Wo. 9 parameters, all >= 0,
  by least squares on log(forecast / measured) over the dev rows' weight-gradient passes, each row timed as the
  family that ran it (its names); the forward and input gradient keep the catalog's ``dw_cl``. A family whose rate
  is 0 is not modelled: its rows take the common form (today's behaviour, the default until adopted).
- Scores (``--fit-wgrad FILE --cl-mode benchmark``): the weight gradient's MAPE and median signed error on the dev
  and held halves, all rows, FP32 and half, (a) each row classed by the rule (the forecast), (b) classed by the
  kernels that ran (the time forms alone), and per family that ran; the rule's accuracy (rows classed as the family
  that ran) per half; beside, the old single form (the 7 common parameters fitted on every dev row, as ``--fit-cl``).
- Adoption, the rule of the earlier protocols: (1) held-half weight-gradient MAPE, (a), all held rows, under 20%;
  (2) then, with the 9 values in ``efficiency.yaml``, the campaigns' depthwise-network rows (``gpu_measured.py
  --models`` of addendum 7; H100 and H200, the defaults and ``--profile h200_host_profile_2026-11-27.yaml``) scored
  before and after: their MAPE, as printed (one decimal), rises in none of the four. The whole campaigns (no
  ``--models``) reported beside, not ruled on. Nothing retuned after the held rows or the campaigns are seen; if
  (1) or (2) fails, the parameters are reported and left out of ``efficiency.yaml`` (the code kept off by default).

Fit (any machine, ``--fit FILE --gpu NAME``): the eight ``dw_native`` parameters of ``efficiency.yaml`` by least
squares on the log of forecast / measured over the dev half of the NCHW depthwise rows (the three passes of each),
through the roofline's own :func:`traincast.predict.roofline.native_depthwise_s`; prints them, then the MAPE and
median signed error per pass on the dev and held halves, of the kernel model alone and of the whole roofline
time of each pass (bytes over bandwidth and the kernel floor included) with the fitted values and without the
mechanism (``dw_fwd_cycles`` 0: the FLOP-rate roofline of ``conv_depthwise``); and the
attention rows' share of the BF16 tensor peak beside the catalog's efficiencies. ``--fit-cl FILE... --gpu NAME``: the
same for cuDNN's channels-last kernels (the protocol above; ``dw_cl`` of ``efficiency.yaml``, 19 parameters through
:func:`traincast.predict.roofline.cl_depthwise_s`, each pass bounded below by its bytes over the ``conv``
bandwidth), scored per pass and dtype class (fp32, half). ``--fit-wgrad FILE... --gpu NAME``: the weight gradient
by kernel family (the protocol by kernel family; 9 parameters of ``dw_cl``), scored by the rule's family and by the
family that ran.

Usage: python benchmarks/gpu_kernels.py --out kernels.jsonl [--deadline 200]        (on the GPU)
       python benchmarks/gpu_kernels.py --list                                       (the depthwise layers)
       PYTHONPATH=src python benchmarks/gpu_kernels.py --fit kernels.jsonl --gpu H200-SXM-141GB
       PYTHONPATH=src python benchmarks/gpu_kernels.py --fit-cl kernels.jsonl kernels_cl_bf16.jsonl --gpu H200-SXM-141GB
       python benchmarks/gpu_kernels.py --names --variants 3,4,5 --no-attention --out names.jsonl   (on the GPU)
       PYTHONPATH=src python benchmarks/gpu_kernels.py --fit-cl names.jsonl --cl-mode benchmark --gpu H200-SXM-141GB
       PYTHONPATH=src python benchmarks/gpu_kernels.py --fit-wgrad names.jsonl --cl-mode benchmark --gpu H200-SXM-141GB
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODELS = ["mobilenet_v2", "mobilenet_v3_large", "mnasnet1_0", "efficientnet_b0", "efficientnet_v2_s",
          "convnext_tiny", "shufflenet_v2_x1_0", "maxvit_t"]
# (dtype, batch, memory format) in the order measured
DW_VARIANTS = [("fp32", 64, "nchw"), ("bf16", 128, "nchw"), ("bf16", 32, "nchw"), ("fp32", 64, "channels_last"),
               ("bf16", 128, "channels_last"), ("bf16", 32, "channels_last")]
ATTN_BACKENDS = ["flash", "efficient", "cudnn"]
ATTN_SEQS = [1024, 2048, 4096, 8192, 16384]
ATTN_TOKENS = 32768  # per call; --attn-tokens makes a CPU dry run short
ATTN_WIDTH = 4096


def depthwise_layers() -> list[dict]:
    """Every distinct depthwise Conv2d of ``MODELS`` (groups = in = out channels), with the input size it sees at
    224 x 224, found by a forward on the meta device; ``models`` names those that contain it."""
    import torch
    import torchvision

    found: dict[tuple, dict] = {}
    for name in MODELS:
        with torch.device("meta"):
            net = getattr(torchvision.models, name)(weights=None)
        hooks = []

        def hook(mod, inp, _out, name=name):
            x = inp[0]
            k = (mod.in_channels, x.shape[2], x.shape[3], mod.kernel_size[0], mod.kernel_size[1], mod.stride[0],
                 mod.stride[1], mod.padding[0], mod.padding[1], mod.dilation[0], mod.dilation[1])
            row = found.setdefault(k, dict(C=k[0], H=k[1], W=k[2], kh=k[3], kw=k[4], sh=k[5], sw=k[6], ph=k[7],
                                           pw=k[8], dh=k[9], dw=k[10], bias=mod.bias is not None, models=[]))
            if name not in row["models"]:
                row["models"].append(name)

        for m in net.modules():
            if isinstance(m, torch.nn.Conv2d) and m.groups == m.in_channels == m.out_channels and m.groups > 1:
                hooks.append(m.register_forward_hook(hook))
        net.eval()
        with torch.no_grad():
            net(torch.empty(1, 3, 224, 224, device="meta"))
        for h in hooks:
            h.remove()
    return list(found.values())


def layer_key(r: dict) -> str:
    return (f"dw C{r['C']} {r['H']}x{r['W']} k{r['kh']}x{r['kw']} s{r['sh']} p{r['ph']} d{r['dh']} "
            f"{r['dtype']} n{r['N']} {r['format']}")


def held_half(r: dict) -> int:
    """The side of a kernel row in the dev/held split (0 dev, 1 held): ``zlib.crc32`` of its layer's key, a --names
    row's cuDNN mode left out so that a layer stays on one side."""
    import zlib

    return zlib.crc32(r["key"].split(" cudnn-")[0].encode()) % 2


def _timer(device: str):
    if device == "cuda":
        from fp8_gemm_bench import _time

        return lambda fn: _time(fn, 2, 5, per_graph=5)

    def cpu(fn):  # a dry run of the pipeline on a machine without a GPU
        fn()
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3, "cpu"

    return cpu


def depthwise_passes(layer: dict, dtype: str, n: int, fmt: str, device: str) -> tuple[dict, dict]:
    """One depthwise layer's input, weight and output gradient (random, ``fmt`` memory format, on ``device``: "meta"
    for a trace) and its passes as calls: (the row's fields with the output size, {"fwd", "dgrad", "wgrad", "bwd":
    the call}); each gradient alone through ``aten.convolution_backward``'s output mask, "bwd" both."""
    import torch
    import torch.nn.functional as F

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    mf = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
    c = layer["C"]
    x = torch.randn(n, c, layer["H"], layer["W"], device=device, dtype=dt).contiguous(memory_format=mf)
    w = torch.randn(c, 1, layer["kh"], layer["kw"], device=device, dtype=dt).contiguous(memory_format=mf)
    stride, pad, dil = [layer["sh"], layer["sw"]], [layer["ph"], layer["pw"]], [layer["dh"], layer["dw"]]
    y = F.conv2d(x, w, None, stride, pad, dil, c)
    gy = torch.randn_like(y)
    bwd = torch.ops.aten.convolution_backward

    def back(mask):
        return lambda: bwd(gy, x, w, None, stride, pad, dil, False, [0, 0], c, mask)

    row = dict(layer, dtype=dtype, N=n, format=fmt, Ho=y.shape[2], Wo=y.shape[3])
    return row, {"fwd": lambda: F.conv2d(x, w, None, stride, pad, dil, c), "dgrad": back([True, False, False]),
                 "wgrad": back([False, True, False]), "bwd": back([True, True, False])}


def _timed(row: dict, calls: dict, timer) -> dict:
    """``row`` with each pass's ms (``fwd_ms``, ``dgrad_ms``, ``wgrad_ms``, ``bwd_ms``) and how it was timed."""
    timing = set()
    for name, fn in calls.items():
        row[f"{name}_ms"], how = timer(fn)
        timing.add(how)
    row["timing"] = "/".join(sorted(timing))
    return row


def measure_depthwise(layer: dict, dtype: str, n: int, fmt: str, device: str, timer) -> dict:
    return _timed(*depthwise_passes(layer, dtype, n, fmt, device), timer)


def _kernels(fn, device: str) -> list[list]:
    """[kernel name, device us] of every GPU kernel one call of ``fn`` runs, from torch.profiler (after the call has
    run once, so cuDNN's autotuning is not in it); on a machine without a GPU, the aten ops' names and CPU us."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
    if device != "cuda":
        return [[e.name, round(float(e.self_cpu_time_total), 2)] for e in prof.events() if e.name.startswith("aten::")]
    out = [[e.name, round(float(getattr(e, "device_time", None) or e.cuda_time), 2)] for e in prof.events()
           if e.device_type == DeviceType.CUDA]
    if not out:  # a profiler that keeps device events apart: the aggregate of non-aten names with device time
        out = [[a.key, round(float(a.self_device_time_total), 2)] for a in prof.key_averages()
               if a.self_device_time_total > 0 and not a.key.startswith(("aten::", "cuda"))]
    return out


def measure_names(layer: dict, dtype: str, n: int, fmt: str, device: str, timer, mode: str) -> dict:
    """One depthwise layer's three passes with cuDNN's algorithm chosen by its heuristics (``mode`` "heuristic":
    ``torch.backends.cudnn.benchmark`` off, PyTorch's default, the mode of :func:`measure_depthwise`) or by timing
    them (``"benchmark"``: on, the mode ``traincast bench`` and the campaigns measure whole models in): each pass's
    time as :func:`measure_depthwise` takes it, and the kernels it runs (names and device us, one call)."""
    import torch

    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = mode == "benchmark"
    try:
        row, calls = depthwise_passes(layer, dtype, n, fmt, device)
        _timed(row, calls, timer)
        row["kernels"] = {p: _kernels(calls[p], device) for p in ("fwd", "dgrad", "wgrad")}
    finally:
        torch.backends.cudnn.benchmark = before
    row["cudnn_mode"] = mode
    return row


def measure_attention(backend: str, d: int, s: int, causal: bool, device: str, tokens: int = ATTN_TOKENS) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kind = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    h, b = ATTN_WIDTH // d, max(1, tokens // s)
    dt = torch.bfloat16
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=dt, requires_grad=True) for _ in range(3))
    g = torch.randn(b, h, s, d, device=device, dtype=dt)
    fwd_flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    row = dict(backend=backend, D=d, S=s, B=b, H=h, causal=causal, fwd_flops=fwd_flops, bwd_flops=2.5 * fwd_flops)
    fw, bw = [], []
    with sdpa_kernel([kind]):
        for i in range(6):
            q.grad = k.grad = v.grad = None
            if device == "cuda":
                e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
                e[0].record()
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                e[1].record()
                out.backward(g)
                e[2].record()
                e[2].synchronize()
                t = (e[0].elapsed_time(e[1]), e[1].elapsed_time(e[2]))
            else:
                t0 = time.perf_counter()
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                t1 = time.perf_counter()
                out.backward(g)
                t = ((t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3)
            if i:  # the first call is a warm-up
                fw.append(t[0])
                bw.append(t[1])
    row.update(fwd_ms=statistics.median(fw), bwd_ms=statistics.median(bw))
    row["fwd_tflops"] = fwd_flops / row["fwd_ms"] / 1e9
    row["bwd_tflops"] = row["bwd_flops"] / row["bwd_ms"] / 1e9
    return row


def attn_key(r: dict) -> str:
    return f"attn {r['backend']} D{r['D']} S{r['S']} {'causal' if r['causal'] else 'full'}"


def _passes(r: dict) -> list[tuple[str, tuple, float, float, float]]:
    """(pass, native_depthwise_work row, measured ms, bytes, FLOPs: 2 per tap of each output, input element or
    weight-gradient product) of each pass of a measured depthwise row."""
    import math

    n, c, h, w, ho, wo = r["N"], r["C"], r["H"], r["W"], r["Ho"], r["Wo"]
    taps = r["kh"] * r["kw"]
    gen = int(not (r["kh"] == r["kw"] and r["kh"] in (1, 3, 5)))
    el = 2 if r["dtype"] == "bf16" else 4
    out, inp = n * c * ho * wo, n * c * h * w
    iters = math.ceil(n / max(1, min(n, 8))) * math.ceil(ho * wo / 32)
    return [("fwd", (out, 0, taps, gen, 0, 0), r["fwd_ms"], el * (out + inp), 2.0 * out * taps),
            ("dgrad", (0, inp, taps, gen, 0, 0), r["dgrad_ms"], el * (out + inp), 2.0 * inp * taps),
            ("wgrad", (0, 0, taps, gen, c * taps, iters), r["wgrad_ms"], el * (out + inp), 2.0 * out * taps)]


def fit(path: Path, gpu: str) -> int:

    import numpy as np
    from scipy.optimize import least_squares

    from traincast.hardware.catalog import get_catalog
    from traincast.predict.roofline import DW_NATIVE, CompiledOps, RooflineParams, native_depthwise_s

    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    dw = [r for r in rows if r["key"].startswith("dw") and r.get("format") == "nchw" and "error" not in r]
    device = get_catalog().device(gpu)
    base = RooflineParams.for_device(device)
    ghz = device.boost_clock_mhz / 1e3 * CompiledOps.from_arrays([1.0], [1.0], ["conv"], device).clock_factor(base)
    names = [f"dw_{k}" for k in DW_NATIVE]
    dev = [r for r in dw if held_half(r) == 0]
    held = [r for r in dw if held_half(r) == 1]

    def table(rs):
        """Per pass of rows ``rs``: kinds, work rows, measured ms, bytes, FLOPs, dtypes."""
        ps = [(p, r["dtype"]) for r in rs for p in _passes(r)]
        return ([p[0] for p, _ in ps], np.array([p[1] for p, _ in ps], float), np.array([p[2] for p, _ in ps]),
                np.array([p[3] for p, _ in ps]), np.array([p[4] for p, _ in ps]), [dt for _, dt in ps])

    def model_ms(params, work):
        return native_depthwise_s(work, device.sm_count, ghz, params) * 1e3

    _, work_d, ms_d, *_ = table(dev)
    x0 = np.array([1.7, 0.1, 3.5, 0.1, 0.4, 90.0, 40.0, 5.0])
    sol = least_squares(lambda x: np.log(model_ms(base.with_vector(names, x), work_d) / ms_d), x0,
                        bounds=(0, np.inf))
    params = base.with_vector(names, sol.x)
    print(f"{len(dw)} NCHW depthwise rows measured on {rows[0].get('device', gpu)}; {len(dev)} dev, {len(held)} held; "
          f"forecast for {gpu} ({device.sm_count} SMs at {ghz:.3f} GHz)")
    print("dw_native (efficiency.yaml):")
    for nm, v in zip(names, sol.x):
        print(f"  {nm[3:]}: {v:.4g}")
    for half, rs in (("dev", dev), ("held", held)):
        kinds, work, ms, nbytes, flops, dtypes = table(rs)
        own = model_ms(params, work)
        # FP32 convolutions on TF32 tensor cores (PyTorch's default), BF16 ones as autocast gives them
        conv = CompiledOps.from_arrays(flops, nbytes, ["conv"] * len(ms), device, precision="amp-bf16", dtype=dtypes,
                                       key=["conv_depthwise"] * len(ms), dw_work=work)
        whole = conv.times(params) * 1e3
        before = conv.times(base.with_values({"dw_fwd_cycles": 0.0})) * 1e3
        for label, f in (("kernel model", own), ("roofline, fitted", whole), ("roofline, without", before)):
            err = f / ms - 1
            parts = []
            for k in ("fwd", "dgrad", "wgrad"):
                e = np.array([x for x, kk in zip(err, kinds) if kk == k])
                parts.append(f"{k} {100 * np.mean(np.abs(e)):5.1f}% ({100 * np.median(e):+5.1f}%)")
            print(f"{half:4s} n={len(rs):3d} {label:17s} MAPE (median signed): " + ", ".join(parts))
    attn = [r for r in rows if r["key"].startswith("attn") and "error" not in r]
    if attn:
        fit_attention_ramp(attn, device, base)
        peak = device.peak_flops_per_s("bf16")
        eff = base.compute["tensor"]
        print(f"attention, share of the BF16 tensor peak ({peak / 1e12:.0f} TFLOP/s); catalog: attention "
              f"{eff['attention']:.2f}, attention_cudnn {eff['attention_cudnn']:.2f}")
        for r in attn:
            step = (r["fwd_flops"] + r["bwd_flops"]) / ((r["fwd_ms"] + r["bwd_ms"]) * 1e-3) / peak
            print(f"  {r['key']:32s} fwd {r['fwd_tflops']:5.0f} bwd {r['bwd_tflops']:5.0f} TFLOP/s  step {step:.3f}")
    return 0


def _cl_passes(r: dict, family: int | None = None) -> list[tuple[str, tuple, float, float, float]]:
    """(pass, cl_depthwise_work row, measured ms, bytes, FLOPs: 2 per tap of each element) of each pass of a
    measured channels-last depthwise row; the weight gradient's kernel family ``family``, or by the roofline's rule
    (:func:`traincast.predict.roofline.cl_wgrad_family`)."""
    from traincast.predict.roofline import cl_wgrad_family

    n, c, h, w, ho, wo = r["N"], r["C"], r["H"], r["W"], r["Ho"], r["Wo"]
    taps = r["kh"] * r["kw"]
    big, half = int(taps > 9), int(r["dtype"] != "fp32")
    el = 2 if half else 4
    out, inp = n * c * ho * wo, n * c * h * w
    fam = cl_wgrad_family(bool(half), c, taps) if family is None else family
    return [("fwd", (out, 0, 0, taps, big, half, 0, 0, 0), r["fwd_ms"], el * (out + inp), 2.0 * out * taps),
            ("dgrad", (0, inp, 0, taps, big, half, 0, 0, 0), r["dgrad_ms"], el * (out + inp), 2.0 * inp * taps),
            ("wgrad", (0, 0, out, taps, big, half, n * ho * wo, fam, inp), r["wgrad_ms"], el * (out + inp),
             2.0 * out * taps)]


def wgrad_family_ran(r: dict) -> str:
    """The weight-gradient kernel family a --names row ran, from its kernels' names (the protocol by kernel
    family): "gemm", "direct", "shmem", or the dtype class's common family ("tiling" FP32, "c1k1" half)."""
    names = " ".join(k[0] for k in r["kernels"]["wgrad"])
    if "implicit_gemm" in names:
        return "gemm"
    if "wgrad2d_grouped_direct_kernel" in names:
        return "direct"
    if "wgrad2d_shmem_tiling" in names:
        return "shmem"
    return "tiling" if r["dtype"] == "fp32" else "c1k1"


def _cl_fit_setup(paths: list[Path], gpu: str, mode: str | None, zero: list[str], need_kernels: bool = False):
    """What ``--fit-cl`` and ``--fit-wgrad`` fit on: (every row read, the channels-last depthwise rows timed in cuDNN
    mode ``mode`` (with their kernels' names where ``need_kernels``), the device, its catalog parameters with the
    ``zero`` ones set to 0, the clock in GHz and the ``conv`` bandwidth the roofline gives it, the dev half, the held
    half)."""
    from traincast.hardware.catalog import get_catalog
    from traincast.predict.roofline import CompiledOps, RooflineParams

    rows = [json.loads(x) for path in paths for x in path.read_text().splitlines() if x.strip()]
    cl = [r for r in rows if r["key"].startswith("dw") and r.get("format") == "channels_last" and "error" not in r
          and r.get("cudnn_mode") == mode and (not need_kernels or "kernels" in r)]
    device = get_catalog().device(gpu)
    off = RooflineParams.for_device(device).with_values({nm: 0.0 for nm in zero})
    ghz = device.boost_clock_mhz / 1e3 * CompiledOps.from_arrays([1.0], [1.0], ["conv"], device).clock_factor(off)
    bw = device.memory_bandwidth_bytes_per_s * off.memory["conv"] * off.memory_scale
    return (rows, cl, device, off, ghz, bw, [r for r in cl if held_half(r) == 0],
            [r for r in cl if held_half(r) == 1])


def _best_fit(resid, starts):
    """The least-squares solution (parameters >= 0) of ``resid`` of least cost over the ``starts``."""
    import numpy as np
    from scipy.optimize import least_squares

    best = None
    for x0 in starts:
        sol = least_squares(resid, x0, bounds=(0, np.inf), x_scale="jac")
        if best is None or sol.cost < best.cost:
            best = sol
    return best


def fit_cl(paths: list[Path], gpu: str, mode: str | None = None) -> int:
    """cuDNN's channels-last depthwise kernels (the protocol above): the 19 ``dw_cl`` parameters by least squares on
    the log of forecast / measured over the dev half of the channels-last rows' passes (each bounded below by its
    bytes over the ``conv`` bandwidth), through :func:`traincast.predict.roofline.cl_depthwise_s`; then MAPE and
    median signed error per pass and dtype class on both halves, of that model, of the roofline's whole time of the
    pass with it, and of the FLOP-rate roofline without it."""

    import numpy as np

    from traincast.predict.roofline import DW_CL, CompiledOps, cl_depthwise_s

    names = [f"dwcl_{k}" for k in DW_CL if k not in WGRAD_FAMILY_RATES]  # the 19 of the protocol
    rows, cl, device, off, ghz, bw, dev, held = _cl_fit_setup(paths, gpu, mode, [f"dwcl_{k}" for k in DW_CL])

    def table(rs):
        """Per pass of rows ``rs``: kinds, work rows, measured ms, bytes, FLOPs, dtypes."""
        ps = [(p, r["dtype"]) for r in rs for p in _cl_passes(r)]
        return ([p[0] for p, _ in ps], np.array([p[1] for p, _ in ps], float), np.array([p[2] for p, _ in ps]),
                np.array([p[3] for p, _ in ps], float), np.array([p[4] for p, _ in ps]), [dt for _, dt in ps])

    def model_ms(params, work, nbytes):
        return np.maximum(cl_depthwise_s(work, device.sm_count, ghz, params)[0], nbytes / bw) * 1e3

    _, work_d, ms_d, bytes_d, *_ = table(dev)

    def resid(x):
        return np.log(model_ms(off.with_vector(names, x), work_d, bytes_d) / ms_d)

    # starts: per pass (cycles, tap cycles) FP32 and half, big shares, call costs (us), the reduction (ns/pixel)
    best = _best_fit(resid, [np.concatenate([np.array([0.5, 0.2, 0.5, 0.2] * 3) * scale,
                                             [0.5, 0.5, 0.5], [2.0, 2.0, 2.0], [0.01 * scale]])
                             for scale in (0.3, 1.0, 3.0)])
    params = off.with_vector(names, best.x)
    dt_of = {r["dtype"] for r in cl}
    print(f"{len(cl)} channels-last depthwise rows ({', '.join(sorted(dt_of))}) measured on "
          f"{rows[0].get('device', gpu)}; {len(dev)} dev, {len(held)} held; forecast for {gpu} ({device.sm_count} "
          f"SMs at {ghz:.3f} GHz, bytes at {bw / 1e9:.0f} GB/s); dev cost {best.cost:.4g}")
    print("dw_cl (efficiency.yaml):")
    for nm, v in zip(names, best.x):
        print(f"  {nm[5:]}: {v:.4g}")
    for half, rs in (("dev", dev), ("held", held)):
        kinds, work, ms, nbytes, flops, dtypes = table(rs)
        own = model_ms(params, work, nbytes)
        conv = CompiledOps.from_arrays(flops, nbytes, ["conv"] * len(ms), device, precision="amp-bf16", dtype=dtypes,
                                       key=["conv_depthwise"] * len(ms), dwcl_work=work)
        whole = conv.times(params) * 1e3
        before = conv.times(off) * 1e3
        for label, f in (("kernel model", own), ("roofline, fitted", whole), ("roofline, without", before)):
            err = f / ms - 1
            for dcls in ("all", "fp32", "half"):
                parts = []
                for k in ("fwd", "dgrad", "wgrad"):
                    e = np.array([x for x, kk, dt in zip(err, kinds, dtypes) if kk == k
                                  and (dcls == "all" or (dt == "fp32") == (dcls == "fp32"))])
                    parts.append(f"{k} {100 * np.mean(np.abs(e)):5.1f}% ({100 * np.median(e):+5.1f}%)")
                nrow = sum(1 for r in rs if dcls == "all" or (r["dtype"] == "fp32") == (dcls == "fp32"))
                print(f"{half:4s} {dcls:4s} n={nrow:3d} {label:17s} MAPE (median signed): " + ", ".join(parts))
    return 0


# the weight gradient by kernel family (the protocol by kernel family): the common form's 7 parameters, the other
# families' rates, and the family index (cl_wgrad_family's) of each family a row ran
WGRAD_COMMON = ("wgrad_cycles", "wgrad_tap_cycles", "wgrad_half_cycles", "wgrad_half_tap_cycles", "wgrad_big",
                "wgrad_call_us", "wgrad_pixel_ns")
WGRAD_FAMILY_RATES = ("wgrad_direct_tap_cycles", "wgrad_gemm_tap_cycles")
FAMILY_INDEX = {"tiling": 0, "c1k1": 0, "shmem": 0, "direct": 1, "gemm": 2}


def fit_wgrad(paths: list[Path], gpu: str, mode: str | None = "benchmark") -> int:
    """The channels-last weight gradient by kernel family (the protocol above): the 9 parameters (the common form's
    7, the direct and GEMM families' rates) by least squares on the log of forecast / measured over the dev half's
    weight-gradient passes, each row timed as the family its kernels' names say it ran, through
    :func:`traincast.predict.roofline.cl_depthwise_s` (bounded below by the pass's bytes over the ``conv``
    bandwidth); then MAPE and median signed error on both halves, all, FP32 and half rows: each row classed by the
    roofline's rule (:func:`traincast.predict.roofline.cl_wgrad_family`, the forecast) and by the family that ran,
    per family that ran, the rule's accuracy, the old single form (the 7 common parameters fitted on every dev
    row) and the roofline's whole time of the pass with the fit and without it (the FLOP rate)."""

    import numpy as np

    from traincast.predict.roofline import MEMORY_CLASSES, CompiledOps, cl_depthwise_s

    common = [f"dwcl_{k}" for k in WGRAD_COMMON]
    names = common + [f"dwcl_{k}" for k in WGRAD_FAMILY_RATES]
    # the catalog's forward and input gradient kept (not used: weight-gradient rows only)
    rows, cl, device, off, ghz, bw, dev, held = _cl_fit_setup(paths, gpu, mode, names, need_kernels=True)
    copy_bw = device.memory_bandwidth_bytes_per_s * off.memory_vector[MEMORY_CLASSES.index("copy")] * off.memory_scale

    def table(rs, by):
        """Weight-gradient work rows (family by the rule, by the kernels that ran, or all common), measured ms,
        bytes, FLOPs, dtypes, the family that ran."""
        ps = [_cl_passes(r, None if by == "rule" else 0 if by == "common" else FAMILY_INDEX[wgrad_family_ran(r)])[2]
              for r in rs]
        return (np.array([p[1] for p in ps], float), np.array([p[2] for p in ps]), np.array([p[3] for p in ps], float),
                np.array([p[4] for p in ps]), [r["dtype"] for r in rs], [wgrad_family_ran(r) for r in rs])

    def model_ms(params, work, nbytes):
        return np.maximum(cl_depthwise_s(work, device.sm_count, ghz, params, copy_bw)[0], nbytes / bw) * 1e3

    def solve(nms, work, ms, nbytes, starts):
        return _best_fit(lambda x: np.log(model_ms(off.with_vector(nms, x), work, nbytes) / ms), starts)

    def starts(n):
        """Starts, as ``--fit-cl``'s: rates (cycles, tap cycles) FP32 and half, big share, call us, reduction ns,
        the direct and GEMM families' tap cycles; the first ``n``."""
        return [np.array([0.5 * s, 0.2 * s, 0.5 * s, 0.2 * s, 0.5, 2.0, 0.01 * s, 1.0 * s, 1.0 * s][:n])
                for s in (0.3, 1.0, 3.0)]

    work_d, ms_d, bytes_d, *_ = table(dev, "ran")
    fam = solve(names, work_d, ms_d, bytes_d, starts(9))
    work_o, *_ = table(dev, "common")
    old = solve(common, work_o, ms_d, bytes_d, starts(7))
    fitted, single = off.with_vector(names, fam.x), off.with_vector(common, old.x)
    print(f"{len(cl)} channels-last depthwise rows (cudnn mode {mode}) measured on {rows[0].get('device', gpu)}; "
          f"{len(dev)} dev, {len(held)} held; forecast for {gpu} ({device.sm_count} SMs at {ghz:.3f} GHz, bytes at "
          f"{bw / 1e9:.0f} GB/s, copies at {copy_bw / 1e9:.0f} GB/s); dev cost {fam.cost:.4g} (old single form "
          f"{old.cost:.4g})")
    print("dw_cl weight gradient by kernel family (efficiency.yaml):")
    for nm, v in zip(names, fam.x):
        print(f"  {nm[5:]}: {v:.4g}")
    print("old single form (the 7 common parameters on every dev row): " +
          ", ".join(f"{nm[5:]} {v:.4g}" for nm, v in zip(common, old.x)))

    def line(label, err, dtypes):
        parts = []
        for dcls in ("all", "fp32", "half"):
            e = np.array([x for x, dt in zip(err, dtypes) if dcls == "all" or (dt == "fp32") == (dcls == "fp32")])
            parts.append(f"{dcls} n={len(e):3d} {100 * np.mean(np.abs(e)):5.1f}% ({100 * np.median(e):+5.1f}%)"
                         if len(e) else f"{dcls} n=  0")
        print(f"  {label:30s} " + ", ".join(parts))

    for half, rs in (("dev", dev), ("held", held)):
        work_r, ms, nbytes, flops, dtypes, ran = table(rs, "rule")
        work_k, *_ = table(rs, "ran")
        work_c, *_ = table(rs, "common")
        ok = [int(w[7]) == FAMILY_INDEX[f] and f != "shmem" for w, f in zip(work_r, ran)]
        print(f"{half}: weight gradient MAPE (median signed); the rule's family right on {sum(ok)} of {len(rs)} rows "
              f"({100 * sum(ok) / len(rs):.1f}%)")
        by_rule = model_ms(fitted, work_r, nbytes) / ms - 1
        by_ran = model_ms(fitted, work_k, nbytes) / ms - 1
        line("by family, the rule's", by_rule, dtypes)
        line("by family, the one that ran", by_ran, dtypes)
        line("old single form", model_ms(single, work_c, nbytes) / ms - 1, dtypes)
        conv = CompiledOps.from_arrays(flops, nbytes, ["conv"] * len(ms), device, precision="amp-bf16", dtype=dtypes,
                                       key=["conv_depthwise"] * len(ms), dwcl_work=work_r)
        line("roofline, by the rule's family", conv.times(fitted) * 1e3 / ms - 1, dtypes)
        line("roofline, without (FLOP rate)", conv.times(off) * 1e3 / ms - 1, dtypes)
        for f in ("tiling", "c1k1", "direct", "gemm", "shmem"):
            idx = [i for i, x in enumerate(ran) if x == f]
            if idx:
                r_e, k_e = by_rule[idx], by_ran[idx]
                print(f"    ran {f:6s} n={len(idx):3d}: rule's family {100 * np.mean(np.abs(r_e)):6.1f}% "
                      f"({100 * np.median(r_e):+6.1f}%), family that ran {100 * np.mean(np.abs(k_e)):6.1f}% "
                      f"({100 * np.median(k_e):+6.1f}%); classed right {sum(ok[i] for i in idx)}")
    return 0


def fit_attention_ramp(attn: list[dict], device, base) -> None:
    """``attention_half_keys`` (gpu_measured.py's addendum 8): k0 of ``eff x k / (k + k0)``, k the keys per query,
    fitted on the dev half of the head-dim-128 flash and cuDNN rows with the catalog's long-sequence efficiencies
    kept; each row's step (forward + backward) timed by the roofline as the attention ops it is."""

    import numpy as np
    from scipy.optimize import minimize_scalar

    from traincast.predict.roofline import CompiledOps
    from traincast.workload.fused import attended_pairs

    rows = [r for r in attn if r["backend"] in ("flash", "cudnn")]

    def compiled(rs):
        """Each row's forward and backward attention ops, compiled once (they do not depend on the parameters)."""
        flops, nbytes, keys, kpq = [], [], [], []
        for r in rs:
            k = attended_pairs(r["S"], r["S"], r["causal"]) / r["S"]
            nb = 2.0 * 4 * r["B"] * r["H"] * r["S"] * r["D"]
            flops += [r["fwd_flops"], r["bwd_flops"]]
            nbytes += [nb, 2 * nb]
            keys += ["attention_cudnn" if r["backend"] == "cudnn" else "attention"] * 2
            kpq += [k, k]
        return CompiledOps.from_arrays(flops, nbytes, ["attention"] * len(flops), device, precision="amp-bf16",
                                       dtype="bf16", key=keys, attn_keys=kpq)

    def times(params, ops):
        """Each row's forward + backward ms."""
        return ops.times(params).reshape(-1, 2).sum(1) * 1e3

    def ms(rs):
        return np.array([r["fwd_ms"] + r["bwd_ms"] for r in rs])

    d128 = [r for r in rows if r["D"] == 128]
    dev = [r for r in d128 if held_half(r) == 0]
    held = [r for r in d128 if held_half(r) == 1]
    off = base.with_values({"attention_half_keys": 0.0})
    dev_ops = compiled(dev)
    res = minimize_scalar(lambda k0: float(np.sum(np.log(times(off.with_values({"attention_half_keys": k0}), dev_ops)
                                                          / ms(dev)) ** 2)), bounds=(0.0, 4096.0), method="bounded")
    fitted = off.with_values({"attention_half_keys": res.x})
    print(f"attention_half_keys (efficiency.yaml, Hopper): {res.x:.0f} keys, fitted on {len(dev)} dev rows "
          f"(flash and cuDNN, head dim 128); catalog's long-sequence efficiencies kept")
    for label, rs in (("dev", dev), ("held", held), ("head dim 64 (not fitted)", [r for r in rows if r["D"] == 64])):
        ops = compiled(rs)
        for name, params in (("without the ramp", off), ("with it", fitted)):
            e = times(params, ops) / ms(rs) - 1
            print(f"  {label:24s} n={len(rs):2d} {name:16s} MAPE {100 * np.mean(np.abs(e)):5.1f}% "
                  f"(median {100 * np.median(e):+5.1f}%)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("kernels.jsonl"))
    ap.add_argument("--deadline", type=float, default=0.0, help="seconds from start after which no row starts")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--list", action="store_true", help="print the depthwise layers and stop")
    ap.add_argument("--fit", type=Path, help="a measurement file: fit and score the depthwise kernel model")
    ap.add_argument("--fit-cl", type=Path, nargs="+", help="measurement files: fit and score the channels-last "
                    "(cuDNN) depthwise kernel model on their channels-last rows")
    ap.add_argument("--fit-wgrad", type=Path, nargs="+", help="measurement files (--names rows): fit and score the "
                    "channels-last weight gradient by kernel family")
    ap.add_argument("--gpu", default="H200-SXM-141GB", help="the catalog GPU the measurements were taken on")
    ap.add_argument("--attn-tokens", type=int, default=ATTN_TOKENS, help="tokens per attention call")
    ap.add_argument("--variants", default="", help="comma-separated indices into DW_VARIANTS (default: all)")
    ap.add_argument("--no-attention", action="store_true", help="depthwise rows only")
    ap.add_argument("--limit", type=int, default=0, help="at most this many rows of each kind (a dry run)")
    ap.add_argument("--names", action="store_true", help="channels-last depthwise rows with cuDNN's kernels named, "
                    "algorithms chosen by timing (cudnn.benchmark) then by heuristics (the protocol of 2026-11-28)")
    ap.add_argument("--cl-mode", choices=["heuristic", "benchmark"], default=None,
                    help="--fit-cl on the --names rows of this cuDNN mode (default: the rows without a mode)")
    a = ap.parse_args(argv)
    if a.fit:
        return fit(a.fit, a.gpu)
    if a.fit_cl:
        return fit_cl(a.fit_cl, a.gpu, a.cl_mode)
    if a.fit_wgrad:
        return fit_wgrad(a.fit_wgrad, a.gpu, a.cl_mode or "benchmark")
    start = time.perf_counter()
    layers = depthwise_layers()
    if a.list:
        for r in layers:
            print(json.dumps(r))
        print(f"{len(layers)} distinct depthwise layers in {len(MODELS)} networks")
        return 0
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device (use --device cpu for a dry run)", file=sys.stderr)
        return 2
    done = set()
    if a.out.exists():
        for line in a.out.read_text().splitlines():
            if line.strip():
                done.add(json.loads(line)["key"])
    timer = _timer(a.device)
    todo: list[tuple[str, object]] = []
    pick = {int(x) for x in a.variants.split(",") if x.strip()} or set(range(len(DW_VARIANTS)))
    for mode in ("benchmark", "heuristic") if a.names else ():
        for i, (dtype, n, fmt) in enumerate(DW_VARIANTS):
            for r in layers[: a.limit or None] if fmt == "channels_last" and i in pick else []:
                todo.append((layer_key(dict(r, dtype=dtype, N=n, format=fmt)) + f" cudnn-{mode}",
                             ("names", r, dtype, n, fmt, mode)))
    for i, (dtype, n, fmt) in enumerate(DW_VARIANTS if not a.names else ()):
        for r in layers[: a.limit or None] if i in pick else []:
            todo.append((layer_key(dict(r, dtype=dtype, N=n, format=fmt)), ("dw", r, dtype, n, fmt)))
        if i == 0 and not a.no_attention:  # attention after the first depthwise variant: cheap, and wanted by issue 22
            for backend in ATTN_BACKENDS:
                for d in (128, 64):
                    for s in ATTN_SEQS[: a.limit or None]:
                        for causal in (True, False):
                            r = dict(backend=backend, D=d, S=s, causal=causal)
                            todo.append((attn_key(r), ("attn", backend, d, s, causal)))
    with a.out.open("a") as f:
        for i, (key, job) in enumerate(todo):
            if key in done:
                continue
            if a.deadline and time.perf_counter() - start > a.deadline:
                print(f"deadline: stopped before row {i + 1} of {len(todo)}", flush=True)
                break
            try:
                row = (measure_depthwise(*job[1:], a.device, timer) if job[0] == "dw"
                       else measure_names(*job[1:5], a.device, timer, job[5]) if job[0] == "names"
                       else measure_attention(*job[1:], a.device, a.attn_tokens))
            except (RuntimeError, ValueError) as e:  # an unsupported backend/shape, out of memory: a row, not a stop
                row = dict(error=str(e).splitlines()[0][:300])
                if a.device == "cuda":
                    torch.cuda.empty_cache()
            row["key"] = key
            f.write(json.dumps(row) + "\n")
            f.flush()
            msg = row.get("error") or " ".join(f"{k}={row[k]:.3f}" for k in row if k.endswith("_ms"))
            if "kernels" in row:
                msg += " wgrad: " + ", ".join(f"{nm[:60]} {us}" for nm, us in row["kernels"]["wgrad"][:3])
            print(f"[{time.perf_counter() - start:6.1f}s] {key}: {msg}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
