"""The analytical predictor: PALEO's per-op model, done as a roofline.

Per op: ``max(FLOPs / (peak(dtype) x compute efficiency(class) x g),
bytes / (bandwidth x memory efficiency(class)), kernel floor) + fresh-page cost
+ op overhead``; a fixed cost per step. The op overhead is ``op_overhead_us``
per launch, or ``light_overhead_us`` (where the device's table or profile has
one: CPUs) for ops that are no autograd node, gradient accumulation and a
foreach op's per-tensor steps: an op of a training step pays for autograd
recording and the backward engine, which these do not.

``g = d / (d + half)`` with ``d`` the smallest of a GEMM's M, N, K: skinny
matmuls (a fully connected layer at batch 4, a 128-wide transformer) and
convolutions with few channels or few output pixels keep the vector units or
tensor cores busy for a small share of the time; ``gemm_half_dim`` (matmuls)
and ``conv_half_dim`` (dense convolutions seen as im2col GEMMs) are the sizes
at which they reach half their class's efficiency (0 turns the term off).

The fresh-page cost: an output tensor of at least ``fresh_alloc.min_bytes`` is
written to memory the allocator has just taken from the operating system (on
CPUs glibc maps and unmaps allocations above 32 MiB every time, so every write
to them faults pages in), at ``fresh_alloc.gb_per_s``. GPUs' caching allocators
reuse memory, so their table has no such term.

``cache: {bytes, dram_factor}``: an op whose tensors add up to more than the
last-level cache streams from DRAM, at ``dram_factor`` times the bandwidth of
ops that stay in cache (a calibrated CPU profile fits it; off by default).

Compute and memory are a roofline (the larger wins), not PALEO's sum.
Efficiencies come per device generation from the catalog's ``efficiency.yaml``
and can be overridden by a calibrated device profile.

Precision follows PyTorch defaults: in ``fp32`` mode cuDNN convolutions use
TF32 tensor cores where the device has them (``torch.backends.cudnn.allow_tf32``
is True by default) while matmuls stay FP32 (``torch.backends.cuda.matmul.
allow_tf32`` is False); ``tf32`` puts both on TF32; ``amp-*`` traces carry the
half-precision dtypes autocast gives each op.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np

from traincast.hardware.catalog import efficiency_table
from traincast.hardware.records import Device
from traincast.predict.base import OpTimes
from traincast.workload.records import Workload

_TENSOR_CLASSES = ("matmul", "conv", "attention")


def conv_groups(op) -> int:
    """Groups of a traced convolution (1 for ordinary, = channels for depthwise)."""
    try:
        if op.aten == "convolution":
            return int(op.args[-1])
        if op.aten == "convolution_backward":
            return int(op.args[6])
    except (IndexError, TypeError, ValueError):
        pass
    return 1


def compute_key(op) -> str:
    """The efficiency key of an op: its class, or ``conv_grouped`` for grouped/depthwise convolutions,
    which reach a small fraction of the peak of dense ones."""
    if op.op_class == "conv" and conv_groups(op) > 1:
        return "conv_grouped"
    return op.op_class


def gemm_dims(aten: str, shapes, out_shapes=None) -> tuple[int, int, int] | None:
    """(M, N, K) of the GEMM a matmul or a dense convolution is (per batch entry
    for batched matmuls; a convolution as im2col: M = batch x output pixels,
    N = output channels, K = input channels x kernel area). ``linear``,
    ``matmul`` and ``conv2d`` name layer-campaign samples. None for other ops
    and for grouped convolutions (their own efficiency class)."""
    try:
        if aten in ("convolution", "conv2d", "convolution_backward"):
            if aten == "convolution_backward":  # (grad_out, input, weight)
                out, x, w = shapes[0], shapes[1], shapes[2]
            else:
                x, w, out = shapes[0], shapes[1], (out_shapes or [None])[0]
            if out is None or x[1] != w[1]:  # grouped: input channels != weight's channels per group
                return None
            return int(out[0] * math.prod(out[2:])), int(w[0]), int(w[1] * math.prod(w[2:]))
        if aten in ("addmm", "baddbmm"):
            a, b = shapes[1], shapes[2]
        elif aten in ("mm", "bmm", "_scaled_mm", "matmul"):
            a, b = shapes[0], shapes[1]
        elif aten == "linear":  # input (..., K), weight (N, K)
            a = shapes[0]
            m = math.prod(a[:-1]) if len(a) > 1 else 1
            return int(m), int(shapes[1][0]), int(a[-1])
        else:
            return None
        m = a[-2] if len(a) > 1 else 1
        n = b[-1] if len(b) > 1 else 1
        return int(m), int(n), int(a[-1])
    except (IndexError, TypeError, ValueError):
        return None


def gemm_min_dim(op) -> float:
    """The smallest GEMM dimension of a matmul or dense convolution (inf for other ops)."""
    if op.op_class not in ("matmul", "conv"):
        return math.inf
    d = gemm_dims(op.aten, op.input_shapes, op.output_shapes)
    return float(min(d)) if d else math.inf


_ITEMSIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int64": 8, "int32": 4, "int8": 1,
             "uint8": 1, "bool": 1}


def fresh_output_bytes(aten: str, output_shapes, bytes_written: float, min_bytes: float, dtype: str = "") -> float:
    """Bytes an op writes into output tensors of at least ``min_bytes`` (0 for in-place ops)."""
    if not min_bytes or aten.endswith("_") or not output_shapes:
        return 0.0
    numels = [math.prod(s) for s in output_shapes]
    total = sum(numels)
    if total <= 0:
        return 0.0
    # records keep the first 4 output shapes: size them by dtype, never above what the op writes
    per_elem = _ITEMSIZE.get(dtype, bytes_written / total)
    fresh = sum(n * per_elem for n in numels if n * per_elem >= min_bytes)
    return float(min(fresh, bytes_written))


def gemm_factor(d: float, half: float) -> float:
    return 1.0 if not half or math.isinf(d) else d / (d + half)


def gemm_factors(dmin: np.ndarray, half) -> np.ndarray:
    """``gemm_factor`` over arrays (``half`` per op or one number; dmin inf for ops that are not GEMMs)."""
    inf = np.isinf(dmin)
    d = np.where(inf, 1.0, dmin)
    return np.where(inf | (np.asarray(half) == 0), 1.0, d / (d + half))


def launches_of(op, chunk: int) -> int:
    """Kernel launches of an op: a foreach op over n tensors launches ceil(n / chunk) kernels."""
    return math.ceil(op.n_tensors / chunk) if op.n_tensors > 1 else 1


_NO_GRAD_DTYPES = frozenset({"int64", "int32", "int8", "uint8", "bool", "none"})


def is_light(op) -> bool:
    """Ops the framework runs without the cost of an autograd node: gradient accumulation
    in the backward pass (the engine adds a second gradient into the first), the
    per-tensor steps of a foreach optimizer op, and ops on integer or boolean tensors,
    which autograd never records (batch norm's ``num_batches_tracked += 1``)."""
    return (op.phase == "backward" and op.aten in ("add", "add_")) or op.n_tensors > 1 or op.dtype in _NO_GRAD_DTYPES


def op_overheads_s(ops, p: dict) -> np.ndarray:
    """Overhead per launch of each op (seconds): ``op_overhead_us``, or ``light_overhead_us`` (where
    the table has one) for ``is_light`` ops."""
    heavy = float(p["op_overhead_us"]) * 1e-6
    light = p.get("light_overhead_us")
    if light is None:
        return np.full(len(ops), heavy)
    return np.array([float(light) * 1e-6 if is_light(o) else heavy for o in ops])


def measured_terms(p: dict) -> tuple[float, float, float, float]:
    """(fresh-page threshold bytes, page-in rate B/s, last-level cache bytes, DRAM factor) of a parameter table."""
    fa = p.get("fresh_alloc") or {}
    cache = p.get("cache") or {}
    return (float(fa.get("min_bytes", 0) or 0), float(fa.get("gb_per_s", 0) or 0) * 1e9,
            float(cache.get("bytes", 0) or 0), float(cache.get("dram_factor", 1.0)))


def roofline_s(flops, nbytes, peak, bw, floor_s, launches, over_s, fresh_s, with_bound: bool = False):
    """The per-op formula, over arrays: ``max(flops / peak, bytes / bw, floor x launches) + fresh-page
    time + overhead x launches``, ``peak`` and ``bw`` already scaled by their efficiencies. The
    predictor and the calibration fit both call it. With ``with_bound``, also what bounds each op."""
    t_c = np.divide(flops, peak, out=np.zeros_like(np.asarray(flops, dtype=float)), where=np.asarray(flops) > 0)
    t_m = nbytes / bw
    t_f = floor_s * launches
    t = np.maximum(np.maximum(t_c, t_m), t_f)
    total = t + fresh_s + over_s * launches
    if not with_bound:
        return total
    bound = np.where((t == t_c) & (t_c > 0), "compute", np.where(t == t_m, "memory", "latency"))
    return total, bound.tolist()


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def efficiencies_for(device: Device, overrides: dict | None = None) -> dict:
    table = efficiency_table()
    eff = _merge(table["defaults"], table["generations"].get(device.generation, {}))
    return _merge(eff, overrides or {})


@dataclass
class AnalyticalPredictor:
    """Roofline per op. ``overrides`` replaces catalog efficiencies (calibrated profiles)."""

    overrides: dict = field(default_factory=dict)
    name: str = "analytical"

    def params(self, device: Device) -> dict:
        return efficiencies_for(device, self.overrides)

    def _compute_dtype(self, op_class: str, dtype: str, device: Device, precision: str) -> tuple[str, str]:
        """(peak dtype, simt|tensor) an op of this class and dtype runs at."""
        if op_class not in _TENSOR_CLASSES:
            return "fp32", "simt"
        if dtype in ("fp16", "bf16") and device.has_tensor_cores:
            peak = device.fp16_tflops if dtype == "fp16" else device.bf16_tflops
            if peak:
                return dtype, "tensor"
            return "fp32", "simt"
        if dtype in ("fp16", "bf16"):
            return dtype, "simt"
        if device.fp32_matrix_tflops and precision != "fp32-strict":
            return "fp32_matrix", "tensor"  # full FP32 on matrix units: what rocBLAS/MIOpen use on AMD CDNA
        if device.tf32_tflops:
            if precision == "tf32" or (op_class == "conv" and precision != "fp32-strict"):
                return "tf32", "tensor"
        return "fp32", "simt"

    def predict(self, workload: Workload, device: Device, precision: str = "fp32") -> OpTimes:
        from traincast.predict import rnn

        return rnn.predict(self, workload, device, precision)

    def predict_traced(self, workload: Workload, device: Device, precision: str = "fp32") -> OpTimes:
        """Per-op times of the ops as traced (on a GPU, ``predict`` then times recurrent layers as cuDNN
        runs them: :mod:`traincast.predict.rnn`)."""
        p = self.params(device)
        chunk = max(1, int(p.get("foreach_chunk", 64)))
        halves = {"matmul": float(p.get("gemm_half_dim", 0) or 0), "conv": float(p.get("conv_half_dim", 0) or 0)}
        fa_min, fa_rate, cache_bytes, dram_factor = measured_terms(p)
        mem = p["memory"]
        ops = workload.ops
        n = len(ops)
        flops, nbytes, peak, bw = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
        gfac, launches, fresh_s = np.ones(n), np.ones(n), np.zeros(n)
        rates: dict[tuple, tuple[float, float]] = {}  # (compute key, dtype) -> (peak x eff, bandwidth x eff)
        for i, op in enumerate(ops):
            ck = compute_key(op)
            key = (ck, op.dtype)
            if key not in rates:
                dt, unit = self._compute_dtype(op.op_class, op.dtype, device, precision)
                effs = p["compute"][unit]
                eff_c = effs.get(ck) or effs.get(op.op_class) or effs.get("other", 0.5)
                rates[key] = (device.peak_flops_per_s(dt) * eff_c,
                              device.memory_bandwidth_bytes_per_s * mem.get(op.op_class, mem["default"]))
            peak[i], bw[i] = rates[key]
            flops[i], nbytes[i] = op.flops, op.bytes_total
            half = halves.get(op.op_class, 0.0)
            if half:
                gfac[i] = gemm_factor(gemm_min_dim(op), half)
            launches[i] = launches_of(op, chunk)
            if fa_rate:
                fresh_s[i] = fresh_output_bytes(op.aten, op.output_shapes, op.bytes_written, fa_min, op.dtype) / fa_rate
        if cache_bytes:
            bw = np.where(nbytes > cache_bytes, bw * dram_factor, bw)
        t, bound = roofline_s(flops, nbytes, peak * gfac, bw, p["kernel_floor_us"] * 1e-6, launches,
                              op_overheads_s(ops, p), fresh_s, with_bound=True)
        return OpTimes(self.name, tuple(t.tolist()), tuple(bound), p["step_overhead_ms"] * 1e-3)
