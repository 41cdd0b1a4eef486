"""The one roofline: FLOPs and bytes to seconds, with named parameters.

Every prediction of an op's time from its FLOPs and bytes goes through this module: the analytical
predictor, the calibration's least squares (``traincast calibrate``), the learned model's baseline and
features, and the analytical times of canonical op rows. There is no second copy of the formula.

Per op::

    time = max(FLOPs / (peak(unit, dtype) x clock x compute[unit][key] x g x winograd x lanes),
               bytes / (bandwidth x memory[class] x memory_scale x cache factor),
               kernel_floor x launches)
           + fresh-page time + layout transposes + overhead x launches

- ``peak(unit, dtype)``: the datasheet peak the op runs at. Which one follows the precision's switches
  (:mod:`traincast.workload.precision`) and the op's traced dtype: half-precision matmuls, convolutions
  and attention on tensor cores; fp32 convolutions on TF32 tensor cores where the device has them and
  the precision allows (PyTorch's default); fp32 GEMMs on full-FP32 matrix units on AMD CDNA; the rest on
  the vector units at the FP32 rate (:func:`compute_unit`).
- ``compute[unit][key]``: the fraction of that peak large kernels of the op's key reach (the key is its
  class; ``conv_grouped`` for grouped convolutions (ResNeXt, RegNet), ``conv_depthwise`` for depthwise ones
  (one input channel per group: MobileNet, EfficientNet, ConvNeXt), ``attention_cudnn`` for cuDNN's fused
  attention (kernel mode ``transformer-engine``; falls back to ``attention`` where not set); ``other`` for
  classes without their own).
- ``g = d / (d + half)`` with ``d`` the smallest of a GEMM's M, N, K: skinny matmuls and convolutions
  with few channels or pixels keep the units busy for a small share of the time; ``gemm_half_dim`` and
  ``conv_half_dim`` (0: off).
- ``memory[class] x memory_scale``: the fraction of the datasheet bandwidth an op class reaches; an op
  whose tensors exceed ``cache_bytes`` (when set) streams from DRAM at ``dram_factor`` times that.
- causal fused attention: the workload already counts the (query, key) pairs its kernels compute, about half
  the dense count (``workload/fused.py``); the roofline takes the op's FLOPs as they are.
- fused attention's ramp with keys per query (``attention_half_keys`` k0 > 0; :func:`attention_keys`): each tile
  of queries pays a fixed cost (loading it, the softmax's last rescale, writing the output) beside work in
  proportion to the keys it attends, so the attention keys' efficiency is ``compute[unit][key] x k / (k + k0)``
  with ``k`` the keys per query (the sequence, or about half of it under a causal mask); the catalog's value is
  the long-sequence one.
- ``launches``: a foreach (multi-tensor) op over n tensors launches ceil(n / ``foreach_chunk``) kernels.
- ``overhead``: ``op_overhead_us`` per launch, or ``light_overhead_us`` (where set: CPUs) for ops that
  are no autograd node (:func:`is_light`).
- fresh-page time: outputs of at least ``fresh_alloc_min_bytes`` are written to pages fresh from the OS
  at ``fresh_alloc_gb_per_s`` (glibc maps large allocations anew on CPUs; GPU caching allocators do not).
- ``clock = min(1, sustained_clock_per_base x base / boost)``: the share of its boost clock (at which the
  datasheet peaks are given) a board holds under sustained load (:meth:`CompiledOps.clock_factor`).
- ``winograd``: ``winograd_speedup`` for fp32 3x3 stride-1 dense convolutions on the vector units
  (:func:`winograd_eligible`; cuDNN's Winograd algorithms do fewer multiplications than the FLOP count), else 1.
- ``lanes = 1 - shared / lanes per SM x (1 - shared_lane_fp32_share)`` on the vector units of GPUs whose FP32
  lanes are partly shared with INT32 (GA10x, AD10x), else 1.
- depthwise convolutions (``depthwise_tap_ref`` > 0: CPUs): their forward pass and input gradient take about
  the same time per output whatever the kernel's area (the vector kernels are bound by loading and storing
  each output, not by its multiply-adds), so their efficiency is ``compute[unit][conv_depthwise] x taps /
  depthwise_tap_ref`` (at most 1), the fitted value holding for kernels of ``depthwise_tap_ref`` taps (9: 3x3).
- slow weight gradients (``depthwise_wgrad_gflops`` > 0: measured at calibration,
  :mod:`traincast.measure.kernels`): the weight gradient of a depthwise kernel larger than 3x3 runs on its own
  path at that rate, after the rest of the op (input gradient) is timed by the roofline; not measured (0), at
  the depthwise efficiency without the per-output scaling. 2-D, non-transposed kernels only.
- depthwise call costs (``depthwise_call_us``, ``depthwise_grad_call_us``: measured at calibration): each call of a
  depthwise convolution (forward) or of its backward costs that much beyond an ordinary op's overhead, whatever
  its size (on this project's CPU about 50 and 100 us, against 5-20 us for a dense convolution).
- PyTorch's native depthwise kernels (``dw_fwd_cycles`` > 0; :func:`native_depthwise_work`): on NVIDIA GPUs a 2-D
  depthwise convolution in FP32 or BF16 on NCHW tensors runs PyTorch's own kernels
  (``aten/src/ATen/native/cuda/DepthwiseConv2d.cu``; cuDNN takes FP16 and channels-last ones), instruction- and
  latency-bound, not the FLOP or byte count. The forward (one thread per output) and the input gradient (one per
  input element) take ``elements x (cycles + tap_cycles x taps) x (1 + generic)`` SM-cycles over the SMs at the
  clock, ``generic`` = ``dw_generic_factor`` for kernels other than square 1x1, 3x3 and 5x5 (a loop not unrolled);
  the weight gradient runs one block of 256 threads per (channel, tap), each of its warps looping over batch items
  and 32 output pixels at a time (``iters`` = ceil(batch / 8) x ceil(pixels / 32)): ``max(1, waves) x (iters x
  (dw_wgrad_iter_ns + dw_wgrad_iter_block_ns x min(8, blocks per SM)) + dw_wgrad_block_us)``, ``waves`` = blocks
  / (8 x SMs). The op's compute time is their sum (its bytes over bandwidth still bound it below). Set from
  ``benchmarks/gpu_kernels.py``'s kernel timings on an H200 (docs/gpu-accuracy.md).
- cuDNN's channels-last depthwise kernels (``dw_cl``, any rate > 0; :func:`cl_depthwise_work`): on NVIDIA GPUs a 2-D
  depthwise convolution whose input is channels-last (``OpRecord.layout`` ``nhwc``: ``--memory-format
  channels_last``, or NCHW-shaped tensors with channels-last strides, as ConvNeXt's) goes to cuDNN's NHWC kernels
  whatever its dtype (``use_cudnn_depthwise``): channels contiguous, a loop over the taps (no tensor cores, assumed). Each pass
  (forward: outputs; input gradient: input elements; weight gradient: outputs) takes ``elements x (cycles +
  tap_cycles x taps x (1 + big x [kernel above 3x3]))`` SM-cycles over the SMs at the clock, plus ``call_us``; the
  rates per pass for FP32 and for half precision (``half_``; FP16 takes BF16's, not measured); the weight gradient
  at least ``batch x output pixels x wgrad_pixel_ns`` (a serial reduction per (channel, tap)). A pass whose two
  rates for the op's dtype class are 0 keeps the FLOP-rate roofline for its share (2 x elements x taps FLOPs): the
  catalog's weight gradient, which cuDNN runs with algorithms picked by shape and this form does not fit (38.8% MAPE
  on the held kernel rows against the protocol's 20%). The op's compute time is the sum (its bytes over bandwidth
  still bound it below). Set from ``benchmarks/gpu_kernels.py --fit-cl`` on an H200 (docs/gpu-accuracy.md).
  The weight gradient by kernel family (``wgrad_direct_tap_cycles``, ``wgrad_gemm_tap_cycles``; 0: not modelled,
  the family's layers take the common form above): cuDNN runs other kernels for some shapes
  (:func:`cl_wgrad_family`): FP32 kernels above 5x5 an implicit GEMM on TF32 tensor cores between layout transforms
  (``outputs x taps x wgrad_gemm_tap_cycles`` SM-cycles, plus ``2 x 4 x (input + output-gradient elements)`` bytes
  at the copy bandwidth), FP32 layers whose channels are not a multiple of 4 a direct kernel (``outputs x taps x
  wgrad_direct_tap_cycles``); each plus ``wgrad_call_us`` (``gpu_kernels.py``'s protocol by kernel family). Not
  in the catalog: fitted on an H200's layers it missed the protocol's 20% on the held half (26.4%).
- layout transposes: a convolution on NVIDIA tensor cores with NCHW activations moves its tensors twice more in
  NCHW<->NHWC transpose kernels, at the copy bandwidth, times ``nchw_transpose`` (1: NCHW, 0: channels_last).
- PyTorch's native batch norm (``bn_native_gelems_per_block`` > 0; :func:`native_batch_norm_passes`): on NVIDIA
  GPUs a training batch norm whose input is BF16 (or FP16 with FP16 weights) does not go to cuDNN
  (``_select_batch_norm_backend``) but to PyTorch's own kernels, which, on NCHW tensors, reduce each channel
  with one thread block of 512 threads: the statistics pass of the forward and both passes of the fused
  backward kernel run at ``min(bandwidth, blocks x rate per block)``, ``blocks = min(channels, 4 x SMs)``
  resident, ``rate`` = ``bn_native_gelems_per_block`` elements/s per block (latency-bound loads: 512 in flight
  per block). The forward's normalisation pass is an ordinary element-wise kernel (the roofline's time of the
  op); the backward's traffic is all in its two per-channel passes.
- FP8 GEMMs on tensor cores: their efficiency is the tensor matmul efficiency x ``fp8_matmul_ratio`` (FP8 GEMMs
  reach a smaller share of their datasheet peak than BF16 ones; 1 where not measured).

Use: ``params = RooflineParams.for_device(device)``; ``c = compile_ops(workload.ops, device, precision,
params)`` turns the ops into arrays once (dtype routing, GEMM dimensions, launch counts, fresh bytes);
``c.times(params)`` is the per-op seconds under any parameters (an optimiser calls it many times with
``params.with_values(...)``). Parameters have a YAML form (:meth:`RooflineParams.to_table`, the layout of
``hardware/data/efficiency.yaml``) for device profiles and a vector form (:meth:`RooflineParams.vector`,
:meth:`RooflineParams.with_vector`) for optimisers.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

import numpy as np

from pydantic import Field

from traincast.hardware.catalog import efficiency_table
from traincast.hardware.records import Device
from traincast.schema import Document, NonNegativeFloat, PositiveFloat, parse
from traincast.workload.layout import BATCH_NORM_BACKWARD, BATCH_NORM_FORWARD
from traincast.workload.precision import get_precision
from traincast.workload.records import OP_CLASSES

UNITS = ("simt", "tensor")
COMPUTE_KEYS = ("matmul", "conv", "conv_grouped", "conv_depthwise", "attention", "norm", "reduction", "pool", "other",
                "attention_cudnn")
MEMORY_CLASSES = ("default",) + OP_CLASSES
TENSOR_CLASSES = ("matmul", "conv", "attention")  # the classes that may run on tensor / matrix units
# a key without its own efficiency takes its parent's (and so on), then ``other``
_PARENT = {"conv_depthwise": "conv_grouped", "conv_grouped": "conv", "attention_cudnn": "attention"}
_SCALARS = ("memory_scale", "kernel_floor_us", "op_overhead_us", "light_overhead_us", "step_overhead_ms",
            "foreach_chunk", "gemm_half_dim", "conv_half_dim", "fresh_alloc_min_bytes", "fresh_alloc_gb_per_s",
            "cache_bytes", "dram_factor", "winograd_speedup", "sustained_clock_per_base", "shared_lane_fp32_share",
            "nchw_transpose", "host_forward_us", "host_backward_us", "depthwise_tap_ref", "depthwise_wgrad_gflops",
            "depthwise_call_us", "depthwise_grad_call_us", "bn_native_gelems_per_block", "fp8_matmul_ratio",
            "dw_fwd_cycles", "dw_fwd_tap_cycles", "dw_dgrad_cycles", "dw_dgrad_tap_cycles", "dw_generic_factor",
            "dw_wgrad_iter_ns", "dw_wgrad_iter_block_ns", "dw_wgrad_block_us", "attention_half_keys")
# PyTorch's native depthwise kernels (module doc): the YAML table ``dw_native`` holds them without the prefix
DW_NATIVE = ("fwd_cycles", "fwd_tap_cycles", "dgrad_cycles", "dgrad_tap_cycles", "generic_factor", "wgrad_iter_ns",
              "wgrad_iter_block_ns", "wgrad_block_us")
# cuDNN's channels-last depthwise kernels (module doc): the YAML table ``dw_cl`` holds them without the ``dwcl_``
# prefix; per pass, SM-cycles per element and per tap for FP32 and for half precision (``half``), the extra share of
# the tap cycles for kernels above 3x3 (``big``), a fixed cost per call, and the weight gradient's serial reduction
DW_CL_PASSES = ("fwd", "dgrad", "wgrad")
DW_CL = tuple(f"{p}_{k}" for p in DW_CL_PASSES for k in ("cycles", "tap_cycles", "half_cycles", "half_tap_cycles")) + \
    tuple(f"{p}_big" for p in DW_CL_PASSES) + tuple(f"{p}_call_us" for p in DW_CL_PASSES) + ("wgrad_pixel_ns",) + \
    ("wgrad_direct_tap_cycles", "wgrad_gemm_tap_cycles")
# the weight gradient's kernel families (cl_wgrad_family): the dtype class's common kernel, the direct one, the GEMM
CL_WGRAD_FAMILIES = ("common", "direct", "gemm")
_SCALARS = _SCALARS + tuple(f"dwcl_{k}" for k in DW_CL)

ITEMSIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int64": 8, "int32": 4, "int8": 1,
            "uint8": 1, "bool": 1}


# --- the formula ------------------------------------------------------------------------
def roofline_terms(flops, nbytes, peak_flops_per_s, bandwidth_bytes_per_s) -> tuple[np.ndarray, np.ndarray]:
    """(compute seconds, memory seconds) over arrays: FLOPs / peak (0 for ops without FLOPs), bytes / bandwidth."""
    flops = np.asarray(flops, dtype=float)
    t_c = np.divide(flops, peak_flops_per_s, out=np.zeros_like(flops), where=flops > 0)
    return t_c, np.asarray(nbytes, dtype=float) / bandwidth_bytes_per_s


def roofline_s(flops, nbytes, peak_flops_per_s, bandwidth_bytes_per_s, floor_s=0.0, launches=1.0, over_s=0.0,
               fresh_s=0.0, with_bound: bool = False):
    """The formula over arrays: ``max(flops / peak, bytes / bandwidth, floor x launches) + fresh + overhead x
    launches`` (``peak`` and ``bandwidth`` already scaled by their efficiencies). With ``with_bound``, also
    what bounds each op: ``compute``, ``memory`` or ``latency``."""
    t_c, t_m = roofline_terms(flops, nbytes, peak_flops_per_s, bandwidth_bytes_per_s)
    t_f = np.asarray(floor_s, dtype=float) * launches
    t = np.maximum(np.maximum(t_c, t_m), t_f)
    total = t + fresh_s + np.asarray(over_s, dtype=float) * launches
    if not with_bound:
        return total
    bound = np.where((t == t_c) & (t_c > 0), "compute", np.where(t == t_m, "memory", "latency"))
    return total, bound.tolist()


def gemm_factors(dmin: np.ndarray, half) -> np.ndarray:
    """``d / (d + half)`` per op (``half`` per op or one number; ``dmin`` inf for ops that are not GEMMs)."""
    dmin = np.asarray(dmin, dtype=float)
    inf = np.isinf(dmin)
    d = np.where(inf, 1.0, dmin)
    return np.where(inf | (np.asarray(half) == 0), 1.0, d / (d + half))


def gemm_factor(d: float, half: float) -> float:
    return float(gemm_factors(np.array([d]), half)[0])


# --- parameters -----------------------------------------------------------------------------
class _Fresh(Document):
    min_bytes: NonNegativeFloat = 0.0
    gb_per_s: NonNegativeFloat = 0.0


class _DwNative(Document):
    fwd_cycles: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    fwd_tap_cycles: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    dgrad_cycles: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    dgrad_tap_cycles: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    generic_factor: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 0.0
    wgrad_iter_ns: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    wgrad_iter_block_ns: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    wgrad_block_us: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0


_DwClValue = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]


class _DwCl(Document):
    """``dw_cl``: cuDNN's channels-last depthwise kernels (:data:`DW_CL`)."""

    fwd_cycles: _DwClValue = 0.0
    fwd_tap_cycles: _DwClValue = 0.0
    fwd_half_cycles: _DwClValue = 0.0
    fwd_half_tap_cycles: _DwClValue = 0.0
    dgrad_cycles: _DwClValue = 0.0
    dgrad_tap_cycles: _DwClValue = 0.0
    dgrad_half_cycles: _DwClValue = 0.0
    dgrad_half_tap_cycles: _DwClValue = 0.0
    wgrad_cycles: _DwClValue = 0.0
    wgrad_tap_cycles: _DwClValue = 0.0
    wgrad_half_cycles: _DwClValue = 0.0
    wgrad_half_tap_cycles: _DwClValue = 0.0
    fwd_big: _DwClValue = 0.0
    dgrad_big: _DwClValue = 0.0
    wgrad_big: _DwClValue = 0.0
    fwd_call_us: _DwClValue = 0.0
    dgrad_call_us: _DwClValue = 0.0
    wgrad_call_us: _DwClValue = 0.0
    wgrad_pixel_ns: _DwClValue = 0.0
    wgrad_direct_tap_cycles: _DwClValue = 0.0
    wgrad_gemm_tap_cycles: _DwClValue = 0.0


class _Cache(Document):
    bytes: NonNegativeFloat = 0.0
    dram_factor: PositiveFloat = 1.0


_Eff = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class RooflineTable(Document):
    """The YAML form of the roofline's parameters (``efficiency.yaml``'s per-generation entries, a device
    profile's ``overrides``): every field optional, each bounded."""

    compute: dict[Literal["simt", "tensor"], dict[Literal[COMPUTE_KEYS], _Eff]] = {}  # type: ignore[valid-type]
    memory: dict[Literal[MEMORY_CLASSES], _Eff] = {}  # type: ignore[valid-type]
    memory_scale: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] = 1.0
    kernel_floor_us: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    op_overhead_us: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    light_overhead_us: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] | None = None
    step_overhead_ms: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    foreach_chunk: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    gemm_half_dim: NonNegativeFloat = 0.0
    conv_half_dim: NonNegativeFloat = 0.0
    fresh_alloc: _Fresh | None = None
    cache: _Cache | None = None
    winograd_speedup: Annotated[float, Field(ge=1, le=4, allow_inf_nan=False)] = 1.0
    sustained_clock_per_base: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] = 0.0
    shared_lane_fp32_share: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 1.0
    nchw_transpose: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    host_forward_us: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    host_backward_us: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    depthwise_tap_ref: Annotated[float, Field(ge=0, le=1024, allow_inf_nan=False)] = 0.0
    depthwise_wgrad_gflops: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    depthwise_call_us: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    depthwise_grad_call_us: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    bn_native_gelems_per_block: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    fp8_matmul_ratio: Annotated[float, Field(gt=0, le=2, allow_inf_nan=False)] = 1.0
    dw_native: _DwNative | None = None
    dw_cl: _DwCl | None = None
    attention_half_keys: Annotated[float, Field(ge=0, le=1e7, allow_inf_nan=False)] = 0.0


def check_table(table, where: str) -> dict:
    """``table`` validated as a (partial) :class:`RooflineTable`; returns it as given (SpecError otherwise)."""
    parse(RooflineTable, table, where)
    return dict(table)


def _merge(base: dict, over: Mapping | None) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


@dataclass(frozen=True)
class RooflineParams:
    """The roofline's parameters, all named. ``compute[unit][key]`` and ``memory[class]`` are fractions of the
    datasheet peak and bandwidth; the rest as in the module's docstring. Build with :meth:`for_device` or
    :meth:`from_table`; change with :meth:`with_values` / :meth:`with_vector` (the record is immutable)."""

    compute: Mapping[str, Mapping[str, float]]
    memory: Mapping[str, float]
    memory_scale: float = 1.0
    kernel_floor_us: float = 0.0
    op_overhead_us: float = 0.0
    light_overhead_us: float | None = None
    step_overhead_ms: float = 0.0
    foreach_chunk: int = 1
    gemm_half_dim: float = 0.0
    conv_half_dim: float = 0.0
    fresh_alloc_min_bytes: float = 0.0
    fresh_alloc_gb_per_s: float = 0.0
    cache_bytes: float = 0.0
    dram_factor: float = 1.0
    winograd_speedup: float = 1.0
    sustained_clock_per_base: float = 0.0
    shared_lane_fp32_share: float = 1.0
    nchw_transpose: float = 0.0
    host_forward_us: float = 0.0
    host_backward_us: float = 0.0
    depthwise_tap_ref: float = 0.0
    depthwise_wgrad_gflops: float = 0.0
    depthwise_call_us: float = 0.0
    depthwise_grad_call_us: float = 0.0
    bn_native_gelems_per_block: float = 0.0
    fp8_matmul_ratio: float = 1.0
    dw_fwd_cycles: float = 0.0
    dw_fwd_tap_cycles: float = 0.0
    dw_dgrad_cycles: float = 0.0
    dw_dgrad_tap_cycles: float = 0.0
    dw_generic_factor: float = 0.0
    dw_wgrad_iter_ns: float = 0.0
    dw_wgrad_iter_block_ns: float = 0.0
    dw_wgrad_block_us: float = 0.0
    attention_half_keys: float = 0.0
    # cuDNN's channels-last depthwise kernels (DW_CL; module doc)
    dwcl_fwd_cycles: float = 0.0
    dwcl_fwd_tap_cycles: float = 0.0
    dwcl_fwd_half_cycles: float = 0.0
    dwcl_fwd_half_tap_cycles: float = 0.0
    dwcl_dgrad_cycles: float = 0.0
    dwcl_dgrad_tap_cycles: float = 0.0
    dwcl_dgrad_half_cycles: float = 0.0
    dwcl_dgrad_half_tap_cycles: float = 0.0
    dwcl_wgrad_cycles: float = 0.0
    dwcl_wgrad_tap_cycles: float = 0.0
    dwcl_wgrad_half_cycles: float = 0.0
    dwcl_wgrad_half_tap_cycles: float = 0.0
    dwcl_fwd_big: float = 0.0
    dwcl_dgrad_big: float = 0.0
    dwcl_wgrad_big: float = 0.0
    dwcl_fwd_call_us: float = 0.0
    dwcl_dgrad_call_us: float = 0.0
    dwcl_wgrad_call_us: float = 0.0
    dwcl_wgrad_pixel_ns: float = 0.0
    dwcl_wgrad_direct_tap_cycles: float = 0.0
    dwcl_wgrad_gemm_tap_cycles: float = 0.0
    _arrays: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        comp = np.array([[float(self.compute[u][k]) for k in COMPUTE_KEYS] for u in UNITS])
        mem = np.array([float(self.memory[c]) for c in MEMORY_CLASSES])
        object.__setattr__(self, "_arrays", (comp, mem))

    # --- construction --------------------------------------------------------------
    @classmethod
    def from_table(cls, table: Mapping) -> "RooflineParams":
        """From the YAML form (``efficiency.yaml``'s layout; keys may be missing: a compute key falls back to
        its parent and then ``other``, a memory class to ``default``)."""
        comp_t = table.get("compute") or {}
        compute = {}
        for u in UNITS:
            src = comp_t.get(u) or {}
            if "other" not in src:
                raise ValueError(f"the roofline table has no compute.{u}.other efficiency")
            row = {}
            for k in COMPUTE_KEYS:
                key, v = k, src.get(k)
                while v is None and key in _PARENT:
                    key = _PARENT[key]
                    v = src.get(key)
                row[k] = float(src["other"] if v is None else v)
            compute[u] = row
        mem_t = table.get("memory") or {}
        memory = {c: float(mem_t.get(c, mem_t["default"])) for c in MEMORY_CLASSES}
        fa = table.get("fresh_alloc") or {}
        cache = table.get("cache") or {}
        light = table.get("light_overhead_us")
        dw = table.get("dw_native") or {}
        dwcl = table.get("dw_cl") or {}
        return cls(
            compute=compute, memory=memory, memory_scale=float(table.get("memory_scale", 1.0)),
            kernel_floor_us=float(table.get("kernel_floor_us", 0.0)), op_overhead_us=float(table.get("op_overhead_us", 0.0)),
            light_overhead_us=None if light is None else float(light),
            step_overhead_ms=float(table.get("step_overhead_ms", 0.0)),
            foreach_chunk=max(1, int(table.get("foreach_chunk", 1))),
            gemm_half_dim=float(table.get("gemm_half_dim") or 0.0), conv_half_dim=float(table.get("conv_half_dim") or 0.0),
            fresh_alloc_min_bytes=float(fa.get("min_bytes") or 0.0), fresh_alloc_gb_per_s=float(fa.get("gb_per_s") or 0.0),
            cache_bytes=float(cache.get("bytes") or 0.0), dram_factor=float(cache.get("dram_factor", 1.0)),
            winograd_speedup=float(table.get("winograd_speedup", 1.0)),
            sustained_clock_per_base=float(table.get("sustained_clock_per_base", 0.0)),
            shared_lane_fp32_share=float(table.get("shared_lane_fp32_share", 1.0)),
            nchw_transpose=float(table.get("nchw_transpose", 0.0)),
            host_forward_us=float(table.get("host_forward_us", 0.0)),
            host_backward_us=float(table.get("host_backward_us", 0.0)),
            depthwise_tap_ref=float(table.get("depthwise_tap_ref", 0.0)),
            depthwise_wgrad_gflops=float(table.get("depthwise_wgrad_gflops", 0.0)),
            depthwise_call_us=float(table.get("depthwise_call_us", 0.0)),
            depthwise_grad_call_us=float(table.get("depthwise_grad_call_us", 0.0)),
            bn_native_gelems_per_block=float(table.get("bn_native_gelems_per_block", 0.0)),
            fp8_matmul_ratio=float(table.get("fp8_matmul_ratio", 1.0)),
            **{f"dw_{k}": float(dw.get(k, 0.0)) for k in DW_NATIVE},
            attention_half_keys=float(table.get("attention_half_keys", 0.0)),
            **{f"dwcl_{k}": float(dwcl.get(k, 0.0)) for k in DW_CL},
        )

    @classmethod
    def for_device(cls, device: Device, overrides: Mapping | None = None) -> "RooflineParams":
        """The catalog's defaults for ``device``'s generation (``efficiency.yaml``), with ``overrides`` (a partial
        or whole YAML form, e.g. a calibrated device profile's) on top."""
        table = efficiency_table()
        merged = _merge(table["defaults"], table["generations"].get(device.generation, {}))
        return cls.from_table(_merge(merged, overrides))

    def to_table(self) -> dict:
        """The YAML form (every parameter written out)."""
        d = {"compute": {u: dict(self.compute[u]) for u in UNITS}, "memory": dict(self.memory),
             "memory_scale": self.memory_scale, "kernel_floor_us": self.kernel_floor_us,
             "op_overhead_us": self.op_overhead_us, "step_overhead_ms": self.step_overhead_ms,
             "foreach_chunk": self.foreach_chunk, "gemm_half_dim": self.gemm_half_dim,
             "conv_half_dim": self.conv_half_dim, "winograd_speedup": self.winograd_speedup,
             "sustained_clock_per_base": self.sustained_clock_per_base,
             "shared_lane_fp32_share": self.shared_lane_fp32_share, "nchw_transpose": self.nchw_transpose,
             "host_forward_us": self.host_forward_us, "host_backward_us": self.host_backward_us,
             "depthwise_tap_ref": self.depthwise_tap_ref, "depthwise_wgrad_gflops": self.depthwise_wgrad_gflops,
             "depthwise_call_us": self.depthwise_call_us, "depthwise_grad_call_us": self.depthwise_grad_call_us,
             "bn_native_gelems_per_block": self.bn_native_gelems_per_block,
             "fp8_matmul_ratio": self.fp8_matmul_ratio, "attention_half_keys": self.attention_half_keys}
        if self.light_overhead_us is not None:
            d["light_overhead_us"] = self.light_overhead_us
        if self.fresh_alloc_min_bytes or self.fresh_alloc_gb_per_s:
            d["fresh_alloc"] = {"min_bytes": self.fresh_alloc_min_bytes, "gb_per_s": self.fresh_alloc_gb_per_s}
        if self.dw_fwd_cycles:
            d["dw_native"] = {k: getattr(self, f"dw_{k}") for k in DW_NATIVE}
        if self.dw_cl_on:
            d["dw_cl"] = {k: getattr(self, f"dwcl_{k}") for k in DW_CL}
        if self.cache_bytes:
            d["cache"] = {"bytes": self.cache_bytes, "dram_factor": self.dram_factor}
        return d

    # --- named values and the vector form ------------------------------------------
    @staticmethod
    def names() -> tuple[str, ...]:
        """Every scalar parameter's name: ``compute.<unit>.<key>``, ``memory.<class>``, and the scalars."""
        return (tuple(f"compute.{u}.{k}" for u in UNITS for k in COMPUTE_KEYS)
                + tuple(f"memory.{c}" for c in MEMORY_CLASSES) + _SCALARS)

    def value(self, name: str) -> float | None:
        parts = name.split(".")
        if parts[0] == "compute" and len(parts) == 3:
            return float(self.compute[parts[1]][parts[2]])
        if parts[0] == "memory" and len(parts) == 2:
            return float(self.memory[parts[1]])
        if name in _SCALARS:
            return getattr(self, name)
        raise KeyError(f"no roofline parameter {name!r}")

    def with_values(self, values: Mapping[str, float]) -> "RooflineParams":
        """A copy with the named parameters set (names as :meth:`names`)."""
        compute = {u: dict(self.compute[u]) for u in UNITS}
        memory = dict(self.memory)
        scalars = {}
        for name, v in values.items():
            parts = name.split(".")
            if parts[0] == "compute" and len(parts) == 3 and parts[1] in compute and parts[2] in compute[parts[1]]:
                compute[parts[1]][parts[2]] = float(v)
            elif parts[0] == "memory" and len(parts) == 2 and parts[1] in memory:
                memory[parts[1]] = float(v)
            elif name in _SCALARS:
                scalars[name] = int(round(v)) if name == "foreach_chunk" else (None if v is None else float(v))
            else:
                raise KeyError(f"no roofline parameter {name!r}")
        return replace(self, compute=compute, memory=memory, **scalars)

    def vector(self, names: Sequence[str]) -> np.ndarray:
        return np.array([self.value(n) for n in names], dtype=float)

    def with_vector(self, names: Sequence[str], x) -> "RooflineParams":
        return self.with_values(dict(zip(names, (float(v) for v in x))))

    @property
    def dw_cl_on(self) -> bool:
        """Whether cuDNN's channels-last depthwise kernels are modelled (any of their rates set)."""
        return (any(getattr(self, f"dwcl_{p}_{k}") > 0 for p in DW_CL_PASSES
                    for k in ("cycles", "tap_cycles", "half_cycles", "half_tap_cycles"))
                or self.dwcl_wgrad_direct_tap_cycles > 0 or self.dwcl_wgrad_gemm_tap_cycles > 0)

    # --- arrays for times() ------------------------------------------------------------
    @property
    def compute_matrix(self) -> np.ndarray:
        """(units x compute keys) efficiencies."""
        return self._arrays[0]

    @property
    def memory_vector(self) -> np.ndarray:
        return self._arrays[1]


# --- compiling ops to arrays ------------------------------------------------------------------
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


def _conv_weight(op):
    """The weight shape (out channels, in channels per group, kernel...) of a traced convolution or its backward."""
    shapes = op.input_shapes
    idx = 2 if op.aten == "convolution_backward" else 1
    return shapes[idx] if len(shapes) > idx else None


def prefers_cudnn_sdpa(device: Device) -> bool:
    """Whether current PyTorch's SDPA runs cuDNN's fused attention first on ``device``: NVIDIA sm90, sm100 and sm103
    (``check_prefer_cudnn_attention`` in ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``: cuDNN newer
    than 9.15, compute capability 9.0, 10.0 or 10.3), the catalog's Hopper and Blackwell boards; the order is cuDNN,
    flash, memory-efficient, math."""
    return device.vendor == "NVIDIA" and device.generation in ("hopper", "blackwell")


def sdpa_runs_cudnn(sdpa: str, device: Device) -> bool:
    """Whether a workload with SDPA choice ``sdpa`` (``Workload.sdpa``) runs its flash / memory-efficient SDPA ops
    as cuDNN's on ``device``: ``auto`` where PyTorch prefers cuDNN there (``cudnn`` renamed the ops already)."""
    return sdpa == "auto" and prefers_cudnn_sdpa(device)


# the fused attention ops PyTorch's SDPA runs as cuDNN's where it prefers cuDNN (half precision; head dims equal, a
# multiple of 8 and at most 128, the shapes cuDNN's kernel takes on every version: else flash keeps them)
_SDPA_TO_CUDNN = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
                  "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward")


def cudnn_takes_sdpa_op(op) -> bool:
    """Whether ``op`` is a fused SDPA kernel PyTorch would run as cuDNN's where it prefers cuDNN (its shapes read
    where the trace has them; an interpolated op without shapes is taken)."""
    if op.aten not in _SDPA_TO_CUDNN or op.dtype not in ("fp16", "bf16"):
        return False
    n = 4 if op.aten.endswith("_backward") else 3  # (dout,) q, k, v
    dims = {s[-1] for s in op.input_shapes[:n] if s}
    return not dims or all(d % 8 == 0 and d <= 128 for d in dims)


def compute_key(op, cudnn_sdpa: bool = False) -> str:
    """The efficiency key of an op: ``conv_depthwise`` for depthwise convolutions (one input channel per group)
    and ``conv_grouped`` for other grouped ones (both a small fraction of dense ones' peak), ``attention_cudnn`` for
    cuDNN's fused attention (and, with ``cudnn_sdpa``, for the SDPA kernels PyTorch runs as cuDNN's on a GPU where
    it prefers them: :func:`prefers_cudnn_sdpa`), its class where the class has a key, else ``other``."""
    if op.op_class == "conv" and conv_groups(op) > 1:
        w = _conv_weight(op)
        return "conv_depthwise" if w is not None and len(w) > 1 and w[1] == 1 else "conv_grouped"
    if op.op_class == "attention" and ("cudnn_attention" in op.aten or (cudnn_sdpa and cudnn_takes_sdpa_op(op))):
        return "attention_cudnn"
    return key_of_class(op.op_class)


def _conv_setting(op, i: int, default):
    """Argument ``i`` of a traced convolution or its backward, counted as aten's non-tensor arguments with the bias
    slot first: (bias, stride, padding, dilation, transposed, output padding, groups[, output mask]). The tracer
    records a forward's bias only when it is None (a bias tensor is an input, not an argument): a forward with a
    bias has six arguments, and the bias slot is put back here."""
    args = op.args or ()
    if op.aten == "convolution" and len(args) == 6:
        args = (None, *args)
    try:
        return args[i]
    except (IndexError, TypeError):
        return default


def winograd_eligible(op) -> bool:
    """Whether cuDNN may run a convolution (or its backward) with a Winograd algorithm: dense (one group), 3x3
    kernel, stride 1, dilation 1, not transposed. Such convolutions do fewer multiplications than the direct
    count of their FLOPs (F(4x4, 3x3) needs 36 products per 16 outputs instead of 144); the roofline times them
    at ``winograd_speedup`` times their class's rate where they run in fp32 on the vector units. The traced
    args of ``convolution`` and ``convolution_backward`` hold stride, padding, dilation, transposed, output
    padding and groups at positions 1-6. An op without shapes (a workload interpolated between two batch sizes
    keeps the args, not the shapes) is taken for 3x3 when its padding is (1, 1), as a same-size 3x3 convolution's."""
    if op.op_class != "conv" or op.aten not in ("convolution", "convolution_backward") or conv_groups(op) != 1:
        return False
    stride, dilation, transposed = _conv_setting(op, 1, None), _conv_setting(op, 3, None), _conv_setting(op, 4, True)
    if not (isinstance(stride, (list, tuple)) and isinstance(dilation, (list, tuple))):
        return False  # args not in the layout above (an op recorded with other arguments): not counted as Winograd
    if not (tuple(stride) == (1, 1) and tuple(dilation) == (1, 1)) or transposed:
        return False
    w = _conv_weight(op)
    if w is None:
        return not op.input_shapes and tuple(_conv_setting(op, 2, ()) or ()) == (1, 1)
    return len(w) == 4 and tuple(w[2:]) == (3, 3)


def depthwise_taps(op) -> int:
    """The kernel area of a 2-D depthwise convolution (or its backward): 9 for 3x3; 0 for every other op (1-D and
    3-D depthwise kernels, e.g. Mamba's causal conv1d, were not measured and keep the plain depthwise key)."""
    if op.op_class != "conv" or compute_key(op) != "conv_depthwise":
        return 0
    w = _conv_weight(op)
    return int(math.prod(w[2:])) if w is not None and len(w) == 4 else 0


def depthwise_wgrad_flops(op) -> float:
    """FLOPs of the weight gradient of a 2-D depthwise convolution with a kernel larger than 3x3 (more than 9
    taps), when its backward computes one (``output_mask[1]``): 2 x grad_output elements x kernel area. 0
    otherwise, and for transposed convolutions (whose weight gradient runs over the input; not measured)."""
    if op.aten != "convolution_backward" or _conv_setting(op, 4, False):
        return 0.0
    taps = depthwise_taps(op)
    mask = _conv_setting(op, 7, (1, 1, 1))
    if taps <= 9 or not (isinstance(mask, (list, tuple)) and len(mask) > 1 and mask[1]):
        return 0.0
    try:
        return float(2 * math.prod(op.input_shapes[0]) * taps)
    except (IndexError, TypeError):
        return 0.0


_HALF_MODEL_PRECISIONS = ("fp16", "bf16")  # the model's own weights in half precision


def native_batch_norm_passes(op, precision: str) -> tuple[int, int, float]:
    """(passes, channels, elements) of a training batch norm that PyTorch runs with its own per-channel CUDA
    kernels on an NVIDIA GPU: a BF16 input (cuDNN's batch norm is not used for BF16), or an FP16 input whose
    weights are FP16 too (a model in half precision); NCHW layout (channels-last tensors take other kernels).
    ``passes``: 1 for the forward (its statistics pass; the normalisation pass is element-wise), 2 for the
    backward (one fused kernel: a reduction pass, then the input gradient). (0, 0, 0) for every other op."""
    fwd, bwd = op.aten in BATCH_NORM_FORWARD, op.aten in BATCH_NORM_BACKWARD
    if not (fwd or bwd) or op.layout == "nhwc" or not op.input_shapes:
        return 0, 0, 0.0
    if not (op.dtype == "bf16" or (op.dtype == "fp16" and precision in _HALF_MODEL_PRECISIONS)):
        return 0, 0, 0.0
    x = op.input_shapes[0]
    if not isinstance(x, (tuple, list)) or len(x) < 2:
        return 0, 0, 0.0
    return (1 if fwd else 2), int(x[1]), float(math.prod(x))


_NO_DW_WORK = (0.0, 0.0, 0, 0, 0.0, 0.0)


def native_depthwise_work(op) -> tuple[float, float, int, int, float, float]:
    """The work of PyTorch's native CUDA depthwise kernels in a traced op (module doc): (forward outputs,
    input-gradient elements, taps, generic, weight-gradient blocks, iterations per block). An FP32 or BF16 2-D
    depthwise convolution (or its backward) on NCHW tensors, not transposed; zeros for every other op (FP16 and
    channels-last depthwise convolutions go to cuDNN: ``use_cudnn_depthwise`` in ATen's ``Convolution.cpp``).
    ``generic``: 1 for a kernel other than square 1x1, 3x3 or 5x5 (its loop is not unrolled). The weight gradient
    launches one block per (output channel, tap) of ``min(32 x batch, 256)`` threads; each warp loops over
    ceil(batch / warps) batch items and ceil(output pixels / 32) pixels."""
    taps = depthwise_taps(op)
    if (not taps or op.layout == "nhwc" or op.dtype not in ("fp32", "bf16") or _conv_setting(op, 4, False)
            or op.aten not in ("convolution", "convolution_backward")):
        return _NO_DW_WORK
    w = _conv_weight(op)
    generic = int(not (w[2] == w[3] and w[2] in (1, 3, 5)))
    try:
        if op.aten == "convolution":
            return float(math.prod(op.output_shapes[0])), 0.0, taps, generic, 0.0, 0.0
        mask = _conv_setting(op, 7, (1, 1, 1))
        gy, x = op.input_shapes[0], op.input_shapes[1]
        dgrad = float(math.prod(x)) if mask[0] else 0.0
        blocks = iters = 0.0
        if mask[1]:
            n = int(gy[0])
            warps = max(1, min(n, 8))
            blocks = float(gy[1] * taps)
            iters = float(math.ceil(n / warps) * math.ceil(gy[2] * gy[3] / 32))
        return 0.0, dgrad, taps, generic, blocks, iters
    except (IndexError, TypeError):
        return _NO_DW_WORK


def native_depthwise_s(work: np.ndarray, sm_count: float, ghz: float, params: "RooflineParams") -> np.ndarray:
    """Seconds of the native depthwise kernels of each row of ``work`` (rows of :func:`native_depthwise_work`) on a
    GPU of ``sm_count`` SMs at ``ghz`` (module doc); zeros where the parameters are not set."""
    work = np.atleast_2d(np.asarray(work, dtype=float))
    if not params.dw_fwd_cycles or not sm_count or not ghz or work.size == 0:
        return np.zeros(len(work))
    out, dgrad, taps, generic, blocks, iters = work.T
    slow = 1.0 + generic * params.dw_generic_factor
    cycles = (out * (params.dw_fwd_cycles + params.dw_fwd_tap_cycles * taps)
              + dgrad * (params.dw_dgrad_cycles + params.dw_dgrad_tap_cycles * taps)) * slow
    per_sm = blocks / sm_count
    wgrad_ns = np.where(blocks > 0, np.maximum(1.0, per_sm / 8.0) * (
        iters * (params.dw_wgrad_iter_ns + params.dw_wgrad_iter_block_ns * np.minimum(8.0, per_sm))
        + params.dw_wgrad_block_us * 1e3), 0.0)
    return cycles / (sm_count * ghz * 1e9) + wgrad_ns * 1e-9


_NO_CL_WORK = (0.0, 0.0, 0.0, 0, 0, 0, 0.0, 0, 0.0)


def cl_wgrad_family(half: bool, channels: int, taps: int) -> int:
    """The kernel family cuDNN runs for a channels-last depthwise weight gradient (an index into
    :data:`CL_WGRAD_FAMILIES`), by the rule of ``benchmarks/gpu_kernels.py``'s protocol by kernel family (read from
    the dev half of an H200's layers with their kernels named): half precision the common kernel
    (``wgrad2d_c1_k1_nhwc`` and its reduction) always; FP32 kernels above 5x5 an implicit GEMM on TF32 tensor cores
    between layout transforms (2); other FP32 layers whose channels are not a multiple of 4 (the tiling kernel's
    16-byte channel vectors, assumed) the direct kernel (1); every other shape, measured or not, the common kernel
    (FP32: ``sm90_xmma_depthwise_convolution_wgrad_tiling``; 0)."""
    if half:
        return 0
    if taps > 25:
        return 2
    return 1 if channels % 4 else 0


def cl_depthwise_work(op) -> tuple[float, float, float, int, int, int, float, int, float]:
    """The work of cuDNN's channels-last depthwise kernels in a traced op (module doc): (forward outputs,
    input-gradient elements, weight-gradient outputs, taps, big, half, weight-gradient pixels, weight-gradient
    family, weight-gradient input elements). A 2-D depthwise convolution (or its backward) in FP32, BF16 or FP16
    whose input is channels-last (``op.layout`` ``nhwc``: PyTorch sends it to cuDNN whatever its dtype,
    ``use_cudnn_depthwise``), not transposed; zeros for every other op (NCHW ones are :func:`native_depthwise_work`'s,
    or cuDNN's NCHW kernels for FP16, not modelled). ``big``: 1 for a kernel above 3x3; ``half``: 1 for BF16 and
    FP16; the weight gradient's pixels are batch x output pixels (the reduction of each (channel, tap)), its family
    :func:`cl_wgrad_family`'s, its input elements those the GEMM family's layout transforms move beside the output
    gradient."""
    taps = depthwise_taps(op)
    if (not taps or op.layout != "nhwc" or op.dtype not in ("fp32", "bf16", "fp16") or _conv_setting(op, 4, False)
            or op.aten not in ("convolution", "convolution_backward")):
        return _NO_CL_WORK
    big, half = int(taps > 9), int(op.dtype != "fp32")
    try:
        if op.aten == "convolution":
            return float(math.prod(op.output_shapes[0])), 0.0, 0.0, taps, big, half, 0.0, 0, 0.0
        mask = _conv_setting(op, 7, (1, 1, 1))
        gy, x = op.input_shapes[0], op.input_shapes[1]
        dgrad = float(math.prod(x)) if mask[0] else 0.0
        if not mask[1]:
            return 0.0, dgrad, 0.0, taps, big, half, 0.0, 0, 0.0
        family = cl_wgrad_family(bool(half), int(gy[1]), taps)
        return (0.0, dgrad, float(math.prod(gy)), taps, big, half, float(gy[0] * gy[2] * gy[3]), family,
                float(math.prod(x)))
    except (IndexError, TypeError):
        return _NO_CL_WORK


def cl_depthwise_s(work, sm_count: float, ghz: float, params: "RooflineParams",
                   copy_bytes_per_s: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, other FLOPs) of cuDNN's channels-last depthwise kernels for each row of ``work`` (rows of
    :func:`cl_depthwise_work`) on a GPU of ``sm_count`` SMs at ``ghz`` (module doc): the seconds of the passes the
    parameters model, and the FLOPs (2 per tap of each element) of the passes they do not (both rates of the pass
    and dtype class 0), which the FLOP-rate roofline times. A weight gradient of the direct or GEMM family takes that
    family's time where its rate is set (the GEMM's layout transforms at ``copy_bytes_per_s``; not counted where it
    is 0), the common form otherwise. Zeros where the mechanism is off."""
    work = np.atleast_2d(np.asarray(work, dtype=float))
    n = len(work)
    if not params.dw_cl_on or not sm_count or not ghz or work.size == 0:
        return np.zeros(n), np.zeros(n)
    fe, de, we, taps, big, half, pixels, family, wg_in = work.T
    half = half > 0
    sec, rest = np.zeros(n), np.zeros(n)
    sm_hz = sm_count * ghz * 1e9
    for p, elems in zip(DW_CL_PASSES, (fe, de, we)):
        a = np.where(half, getattr(params, f"dwcl_{p}_half_cycles"), getattr(params, f"dwcl_{p}_cycles"))
        b = np.where(half, getattr(params, f"dwcl_{p}_half_tap_cycles"), getattr(params, f"dwcl_{p}_tap_cycles"))
        cycles = elems * (a + b * taps * (1.0 + getattr(params, f"dwcl_{p}_big") * big))
        call = getattr(params, f"dwcl_{p}_call_us") * 1e-6
        t = cycles / sm_hz + call
        on = (a + b > 0) & (elems > 0)
        if p == "wgrad":  # at least one serial reduction over the batch's output pixels per (channel, tap)
            t = np.maximum(t, pixels * params.dwcl_wgrad_pixel_ns * 1e-9)
            # the other kernel families (module doc), where their rate is set
            direct = (family == 1) & (params.dwcl_wgrad_direct_tap_cycles > 0) & (elems > 0)
            gemm = (family == 2) & (params.dwcl_wgrad_gemm_tap_cycles > 0) & (elems > 0)
            moved = 8.0 * (wg_in + elems) / copy_bytes_per_s if copy_bytes_per_s > 0 else 0.0
            t = np.where(direct, elems * taps * params.dwcl_wgrad_direct_tap_cycles / sm_hz + call, t)
            t = np.where(gemm, elems * taps * params.dwcl_wgrad_gemm_tap_cycles / sm_hz + moved + call, t)
            on = on | direct | gemm
        sec = sec + np.where(on, t, 0.0)
        rest = rest + np.where(~on & (elems > 0), 2.0 * elems * taps, 0.0)
    return sec, rest


def attention_keys(op) -> float:
    """Keys per query of a fused attention op (forward or backward): the key sequence, or under a causal mask the
    mean of the keys each query sees (:func:`traincast.workload.fused.attended_pairs` / queries); 0 for other ops
    and where the shapes are unknown."""
    if op.op_class != "attention":
        return 0.0
    shapes = op.input_shapes or ()
    kpos = 2 if "backward" in op.aten else 1  # the backward's inputs: grad_out, q, k, v
    try:
        sq, sk = int(shapes[0][-2]), int(shapes[kpos][-2])
    except (IndexError, TypeError, ValueError):
        return 0.0
    from traincast.workload.fused import attended_pairs

    causal = any(a is True for a in (op.args or ()))
    return attended_pairs(sq, sk, causal) / sq if sq > 0 else 0.0


def key_of_class(op_class: str) -> str:
    return op_class if op_class in COMPUTE_KEYS else "other"


def gemm_dims(aten: str, shapes, out_shapes=None) -> tuple[int, int, int] | None:
    """(M, N, K) of the GEMM a matmul or a convolution is (per batch entry for batched matmuls; a convolution
    as im2col: M = batch x output pixels, N = output channels, K = input channels x kernel area; a grouped
    convolution as ``groups`` GEMMs of N / groups output and K / groups input channels each). ``linear``,
    ``matmul`` and ``conv2d`` name layer-campaign samples. None for other ops and for depthwise convolutions
    (one input channel per group: no GEMM, their own efficiency key)."""
    try:
        if aten in ("convolution", "conv2d", "convolution_backward"):
            if aten == "convolution_backward":  # (grad_out, input, weight)
                out, x, w = shapes[0], shapes[1], shapes[2]
            else:
                x, w, out = shapes[0], shapes[1], (out_shapes or [None])[0]
            if out is None or w[1] < 1 or x[1] % w[1]:
                return None
            groups = x[1] // w[1]  # input channels / the weight's channels per group
            if groups > 1 and w[1] == 1:
                return None  # depthwise
            return int(out[0] * math.prod(out[2:])), int(w[0] // groups), int(w[1] * math.prod(w[2:]))
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


def fresh_output_bytes(aten: str, output_shapes, bytes_written: float, min_bytes: float, dtype: str = "") -> float:
    """Bytes an op writes into output tensors of at least ``min_bytes`` (0 for in-place ops)."""
    if not min_bytes or aten.endswith("_") or not output_shapes:
        return 0.0
    numels = [math.prod(s) for s in output_shapes]
    total = sum(numels)
    if total <= 0:
        return 0.0
    # records keep the first 4 output shapes: size them by dtype, never above what the op writes
    per_elem = ITEMSIZE.get(dtype, bytes_written / total)
    fresh = sum(n * per_elem for n in numels if n * per_elem >= min_bytes)
    return float(min(fresh, bytes_written))


def fresh_bytes(ops: Sequence, min_bytes: float) -> list[float]:
    """:func:`fresh_output_bytes` of each op at ``min_bytes`` (all 0 where it is 0: no fresh-page term)."""
    return [fresh_output_bytes(o.aten, o.output_shapes, o.bytes_written, min_bytes, o.dtype) if min_bytes else 0.0
            for o in ops]


def launches_of(op, chunk: int) -> int:
    """Kernel launches of an op: a foreach op over n tensors launches ceil(n / chunk) kernels; an op inside a
    fused kernel (``fusion == 2``, workload/fusion.py) none of its own."""
    if op.fusion == 2:
        return 0
    return math.ceil(op.n_tensors / chunk) if op.n_tensors > 1 else 1


_NO_GRAD_DTYPES = frozenset({"int64", "int32", "int8", "uint8", "bool", "none"})


def is_light(op) -> bool:
    """Ops the framework runs without the cost of an autograd node: gradient accumulation in the backward
    pass (the engine adds a second gradient into the first), the per-tensor steps of a foreach optimizer
    op, and ops on integer or boolean tensors, which autograd never records."""
    return (op.phase == "backward" and op.aten in ("add", "add_")) or op.n_tensors > 1 or op.dtype in _NO_GRAD_DTYPES


def op_overheads_s(ops: Sequence, params: RooflineParams) -> np.ndarray:
    """Overhead of one launch of each op (seconds): ``op_overhead_us``, or ``light_overhead_us`` (where the
    parameters have one) for :func:`is_light` ops."""
    heavy = params.op_overhead_us * 1e-6
    if params.light_overhead_us is None:
        return np.full(len(ops), heavy)
    return np.array([params.light_overhead_us * 1e-6 if is_light(o) else heavy for o in ops])


def compute_unit(op_class: str, dtype: str, device: Device, precision: str = "fp32") -> tuple[str, str]:
    """(peak dtype, ``simt`` | ``tensor``) an op of this class and traced dtype runs at on ``device``."""
    if op_class not in TENSOR_CLASSES:
        return "fp32", "simt"
    if dtype == "fp8":  # FP8 GEMMs (precisions with an FP8 recipe): the recipe's peak (fp8 or mxfp8)
        rec = get_precision(precision).fp8
        peak_name = rec.device_peak if rec is not None else "fp8"
        check_precision(device, precision)
        return peak_name, "tensor"
    if dtype in ("fp16", "bf16"):
        if device.has_tensor_cores:
            peak = device.fp16_tflops if dtype == "fp16" else device.bf16_tflops
            return (dtype, "tensor") if peak else ("fp32", "simt")
        return dtype, "simt"
    prec = get_precision(precision)
    if device.fp32_matrix_tflops and prec.fp32_matrix:
        return "fp32_matrix", "tensor"  # full FP32 on matrix units: what rocBLAS/MIOpen use on AMD CDNA
    if device.tf32_tflops and prec.tf32_for(op_class):
        return "tf32", "tensor"
    return "fp32", "simt"


def mfu_peak(wl, device: Device, precision: str) -> tuple[str, float]:
    """(name, FLOP/s) of the dense peak MFU is taken against: that of the units that run most of the step's
    forward and backward FLOPs (``compute_unit`` per op: TF32 for a CNN's convolutions under PyTorch's default
    FP32, BF16 under autocast); under FP8 recipes the BF16 / FP16 peak, so that FP8 and BF16 runs of a model read
    on one scale."""
    prec = get_precision(precision)
    if prec.fp8 is not None:
        name = compute_unit("matmul", prec.autocast or prec.params or "bf16", device, precision)[0]
        return name, float(device.peak_flops_per_s(name))
    by: dict[str, float] = {}
    for op in wl.ops:
        if op.phase in ("forward", "backward") and op.flops:
            name = compute_unit(op.op_class, op.dtype, device, precision)[0]
            by[name] = by.get(name, 0.0) + op.flops
    name = max(by, key=by.get) if by else "fp32"
    return name, float(device.peak_flops_per_s(name))


def check_precision(device: Device, precision: str) -> None:
    """ConfigError when ``device`` cannot run ``precision``: FP8 needs FP8 tensor cores (the catalog's ``fp8``
    peak: Hopper, Ada, Blackwell), MXFP8 block-scaled ones (``mxfp8``: Blackwell)."""
    from traincast.errors import ConfigError

    prec = get_precision(precision)
    if prec.fp8 is None:
        return
    need = prec.fp8.device_peak
    if not getattr(device, f"{need}_tflops", None):
        has = [n for n in ("fp8", "mxfp8") if getattr(device, f"{n}_tflops", None)]
        what = "MXFP8 (block-scaled FP8) tensor cores (Blackwell)" if need == "mxfp8" else \
            "FP8 tensor cores (Hopper, Ada Lovelace, Blackwell)"
        alt = ("--precision fp8" if "fp8" in has else "--precision amp-bf16" if getattr(device, "bf16_tflops", None)
               else "--precision amp-fp16")
        raise ConfigError(f"--precision {prec.name} needs {what}; {device.name} has none: use {alt}")


_GEMM_KIND = {"matmul": 1, "conv": 2}  # which half dimension applies: gemm_half_dim, conv_half_dim


@dataclass(frozen=True, eq=False)
class CompiledOps:
    """Ops as arrays for :meth:`times` (built by :func:`compile_ops` or :meth:`from_arrays`)."""

    flops: np.ndarray
    bytes: np.ndarray
    peak_flops_per_s: np.ndarray  # the datasheet peak of the unit and dtype each op runs at
    unit: np.ndarray  # index into UNITS
    key: np.ndarray  # index into COMPUTE_KEYS
    mem_class: np.ndarray  # index into MEMORY_CLASSES
    gemm: np.ndarray  # 0: no half dimension, 1: gemm_half_dim, 2: conv_half_dim
    dmin: np.ndarray  # smallest GEMM dimension (inf: not a GEMM)
    n_tensors: np.ndarray
    light: np.ndarray  # bool: no autograd node (light overhead where the parameters have one)
    fresh_bytes: np.ndarray
    fresh_min_bytes: float  # the threshold fresh_bytes were counted with
    bandwidth_bytes_per_s: float
    winograd: np.ndarray | None = None  # bool: a Winograd-eligible fp32 convolution on the vector units
    transpose_bytes: np.ndarray | None = None  # bytes an NCHW tensor-core convolution's layout transposes move
    clock_ratio: float = 0.0  # base / boost clock of the device (0: the catalog gives no base clock)
    shared_lane_frac: float = 0.0  # FP32 lanes per SM shared with INT32 / all FP32 lanes per SM
    taps: np.ndarray | None = None  # kernel area of depthwise convolutions (0: other ops)
    slow_wgrad_flops: np.ndarray | None = None  # FLOPs of depthwise weight gradients of kernels above 3x3
    dw_call: np.ndarray | None = None  # 1: a depthwise convolution, 2: its backward, 0: other ops
    bn_passes: np.ndarray | None = None  # passes of PyTorch's per-channel batch-norm kernels (1 fwd, 2 bwd, 0)
    bn_elems: np.ndarray | None = None  # elements of their input
    bn_blocks: np.ndarray | None = None  # their resident thread blocks: min(channels, 4 x SMs)
    bn_itemsize: float = 2.0  # bytes per element of those inputs (BF16/FP16)
    fp8_gemm: np.ndarray | None = None  # bool: an FP8 GEMM on tensor cores
    dw_work: np.ndarray | None = None  # rows of native_depthwise_work (NVIDIA GPUs with such ops only)
    dwcl_work: np.ndarray | None = None  # rows of cl_depthwise_work (NVIDIA GPUs with such ops only)
    attn_keys: np.ndarray | None = None  # keys per query of fused attention ops (0: other ops)
    sm_count: float = 0.0
    boost_ghz: float = 0.0

    def __len__(self) -> int:
        return len(self.flops)

    @classmethod
    def from_arrays(cls, flops, nbytes, op_class: Iterable[str], device: Device, *, precision: str = "fp32",
                    dtype="fp32", key: Iterable[str] | None = None, dmin=None, n_tensors=None, light=None,
                    fresh_bytes=None, fresh_min_bytes: float = 0.0, winograd=None,
                    conv_bytes=None, taps=None, slow_wgrad_flops=None, dw_call=None,
                    bn=None, dw_work=None, dwcl_work=None, attn_keys=None) -> "CompiledOps":
        """From per-op arrays (canonical op rows, layer-campaign samples): ``op_class`` per op, ``dtype`` one
        for all or per op, ``key`` the efficiency key where it is not the class's; ``winograd`` (bool per op):
        the convolutions :func:`winograd_eligible` (counted only where they run in fp32 on the vector units);
        ``conv_bytes``: each convolution's bytes (read and written), of which an NCHW convolution on NVIDIA
        tensor cores moves twice again in its layout transposes (0 elsewhere); ``taps`` and ``slow_wgrad_flops``:
        :func:`depthwise_taps` and :func:`depthwise_wgrad_flops` per op; ``dw_call``: 1 for a depthwise
        convolution's forward, 2 for its backward, 0 for other ops; ``bn``: :func:`native_batch_norm_passes` per
        op (counted on NVIDIA GPUs only; a backward's own bytes are then in its passes, not in ``nbytes``);
        ``dw_work``: :func:`native_depthwise_work` per op and ``dwcl_work``: :func:`cl_depthwise_work` per op (both
        counted on NVIDIA GPUs only); ``attn_keys``:
        :func:`attention_keys` per op."""
        flops = np.asarray(flops, dtype=float)
        n = len(flops)
        classes = list(op_class)
        dtypes = [dtype] * n if isinstance(dtype, str) else list(dtype)
        keys = list(key) if key is not None else [key_of_class(c) for c in classes]
        units, peaks = np.empty(n, dtype=int), np.empty(n)
        fp32_simt = np.zeros(n, dtype=bool)
        for i, (c, dt) in enumerate(zip(classes, dtypes)):
            pdt, unit = compute_unit(c, dt, device, precision)
            units[i], peaks[i] = UNITS.index(unit), device.peak_flops_per_s(pdt)
            fp32_simt[i] = unit == "simt" and pdt == "fp32"
        wino = fp32_simt & (np.zeros(n, dtype=bool) if winograd is None else np.asarray(winograd, dtype=bool))
        fp8_gemm = (units == UNITS.index("tensor")) & np.array([dt == "fp8" and c == "matmul"
                                                               for c, dt in zip(classes, dtypes)], dtype=bool)
        tensor_conv = (units == UNITS.index("tensor")) & np.array([c == "conv" for c in classes], dtype=bool)
        nvidia_gpu = device.kind == "gpu" and device.vendor.lower() == "nvidia"
        tbytes = (2.0 * np.asarray(conv_bytes, dtype=float) * tensor_conv if conv_bytes is not None and nvidia_gpu
                  else np.zeros(n))
        lanes = device.fp32_lanes_per_sm
        base = device.base_clock_mhz
        bn_passes = bn_elems = bn_blocks = None
        if bn is not None and nvidia_gpu and device.sm_count:
            passes = np.array([b[0] for b in bn], dtype=float)
            if passes.any():
                bn_passes, bn_elems = passes, np.array([b[2] for b in bn], dtype=float)
                bn_blocks = np.minimum(np.array([b[1] for b in bn], dtype=float), 4.0 * device.sm_count)
        dw = None
        if dw_work is not None and nvidia_gpu and device.sm_count and device.boost_clock_mhz:
            dw = np.asarray(dw_work, dtype=float).reshape(n, 6)
            dw = dw if dw[:, :2].any() or dw[:, 4].any() else None
        dwcl = None
        if dwcl_work is not None and nvidia_gpu and device.sm_count and device.boost_clock_mhz:
            dwcl = np.asarray(dwcl_work, dtype=float).reshape(n, len(_NO_CL_WORK))
            dwcl = dwcl if dwcl[:, :3].any() else None
        return cls(
            flops=flops, bytes=np.asarray(nbytes, dtype=float), peak_flops_per_s=peaks, unit=units,
            key=np.array([COMPUTE_KEYS.index(k) for k in keys], dtype=int),
            mem_class=np.array([MEMORY_CLASSES.index(c) if c in MEMORY_CLASSES else 0 for c in classes], dtype=int),
            gemm=np.array([_GEMM_KIND.get(c, 0) for c in classes], dtype=int),
            dmin=np.full(n, np.inf) if dmin is None else np.asarray(dmin, dtype=float),
            n_tensors=np.ones(n) if n_tensors is None else np.asarray(n_tensors, dtype=float),
            light=np.zeros(n, dtype=bool) if light is None else np.asarray(light, dtype=bool),
            fresh_bytes=np.zeros(n) if fresh_bytes is None else np.asarray(fresh_bytes, dtype=float),
            fresh_min_bytes=float(fresh_min_bytes), bandwidth_bytes_per_s=device.memory_bandwidth_bytes_per_s,
            winograd=wino, transpose_bytes=tbytes,
            clock_ratio=float(base / device.boost_clock_mhz) if base and device.boost_clock_mhz else 0.0,
            shared_lane_frac=float(min(1.0, device.fp32_int32_shared_lanes_per_sm / lanes)) if lanes else 0.0,
            taps=np.zeros(n) if taps is None else np.asarray(taps, dtype=float),
            slow_wgrad_flops=np.zeros(n) if slow_wgrad_flops is None else np.asarray(slow_wgrad_flops, dtype=float),
            dw_call=np.zeros(n, dtype=int) if dw_call is None else np.asarray(dw_call, dtype=int),
            bn_passes=bn_passes, bn_elems=bn_elems, bn_blocks=bn_blocks,
            fp8_gemm=fp8_gemm if fp8_gemm.any() else None,
            dw_work=dw, dwcl_work=dwcl, sm_count=float(device.sm_count), boost_ghz=float(device.boost_clock_mhz) / 1e3,
            attn_keys=(np.asarray(attn_keys, dtype=float) if attn_keys is not None and np.any(attn_keys) else None),
        )

    def clock_factor(self, params: RooflineParams) -> float:
        """The share of its boost clock the device holds under sustained load: ``min(1, sustained_clock_per_base
        x base / boost)``; 1 where either is unknown (0 for ``sustained_clock_per_base`` turns it off).

        A board's base clock is the clock it holds at its power limit under the heaviest load; lighter loads (FP32
        math, a training step's mix of math and memory-bound kernels) draw less power, so it clocks higher, up to
        its boost clock: a fixed multiple of the base clock is the most a power-limited board sustains (70-75 W
        boards: T4, L4; the A100 PCIe's 765 MHz base x 1.85 reaches its 1410 MHz boost clock)."""
        c = params.sustained_clock_per_base
        return min(1.0, c * self.clock_ratio) if c > 0 and self.clock_ratio > 0 else 1.0

    def times(self, params: RooflineParams, *, warm_cache: float = 1.0, with_bound: bool = False):
        """Seconds of each op under ``params`` (with ``with_bound``: and what bounds each).

        ``warm_cache``: bandwidth factor of ops whose tensors fit the cache (``params.cache_bytes``; every op
        when it is 0): a single op timed alone in a loop finds its inputs there (calibration's layer samples)."""
        if params.fresh_alloc_gb_per_s and float(params.fresh_alloc_min_bytes) != self.fresh_min_bytes:
            raise ValueError("compiled with another fresh_alloc_min_bytes than these parameters have; compile again")
        eff0 = params.compute_matrix[self.unit, self.key]
        eff = eff0
        if params.depthwise_tap_ref > 0 and self.taps is not None:
            eff = np.where(self.taps > 0, np.minimum(1.0, eff0 * self.taps / params.depthwise_tap_ref), eff0)
        if params.attention_half_keys > 0 and self.attn_keys is not None:
            k = self.attn_keys
            eff = np.where(k > 0, eff * k / np.maximum(k + params.attention_half_keys, 1e-30), eff)
        flops = self.flops
        half = np.where(self.gemm == 1, params.gemm_half_dim, np.where(self.gemm == 2, params.conv_half_dim, 0.0))
        scale = self.peak_flops_per_s * gemm_factors(self.dmin, half) * self.clock_factor(params)  # at efficiency 1
        peak = scale * eff
        if self.winograd is not None and params.winograd_speedup != 1.0:
            peak = np.where(self.winograd, peak * params.winograd_speedup, peak)
        if self.fp8_gemm is not None and params.fp8_matmul_ratio != 1.0:
            peak = np.where(self.fp8_gemm, peak * params.fp8_matmul_ratio, peak)
        if self.shared_lane_frac and params.shared_lane_fp32_share < 1.0:
            # FP32 lanes shared with INT32 do FP32 math a share of their cycles (address and loop arithmetic of
            # the kernel take the rest): the vector units reach (1 - shared x (1 - share)) of the datasheet peak
            simt = self.unit == UNITS.index("simt")
            peak = np.where(simt, peak * (1.0 - self.shared_lane_frac * (1.0 - params.shared_lane_fp32_share)), peak)
        big = self.bytes > params.cache_bytes if params.cache_bytes else np.zeros(len(self), dtype=bool)
        bw = (self.bandwidth_bytes_per_s * params.memory_vector[self.mem_class] * params.memory_scale
              * np.where(big, params.dram_factor, warm_cache))
        chunk = max(1, int(params.foreach_chunk))
        # n_tensors 0: an op inside a fused kernel (workload/fusion.py), no launch of its own
        launches = np.where(self.n_tensors > 1, np.ceil(self.n_tensors / chunk), np.where(self.n_tensors < 1, 0.0, 1.0))
        heavy = params.op_overhead_us * 1e-6
        over = (np.where(self.light, params.light_overhead_us * 1e-6, heavy) if params.light_overhead_us is not None
                else np.full(len(self), heavy))
        rate = params.fresh_alloc_gb_per_s * 1e9
        fresh_s = self.fresh_bytes / rate if rate else 0.0
        native = None
        if params.dw_fwd_cycles > 0 and self.dw_work is not None:
            # PyTorch's native depthwise kernels (module doc): their time is the op's compute time; they read NCHW
            # tensors as they are (no layout transposes)
            native = native_depthwise_s(self.dw_work, self.sm_count, self.boost_ghz * self.clock_factor(params), params)
            native = np.where(self.flops > 0, native, 0.0)
        own = native  # ops timed by their own kernels' model (0: the roofline's FLOP rate)
        # the copy kernels' bandwidth: layout transposes, and the GEMM-family depthwise weight gradient's transforms
        copy_bw = self.bandwidth_bytes_per_s * params.memory_vector[MEMORY_CLASSES.index("copy")] * params.memory_scale
        if params.dw_cl_on and self.dwcl_work is not None:
            # cuDNN's channels-last depthwise kernels (module doc): the passes modelled by their own time, the others
            # (a pass whose rates are 0) at the FLOP rate; channels-last tensors need no layout transposes
            cl, cl_rest = cl_depthwise_s(self.dwcl_work, self.sm_count, self.boost_ghz * self.clock_factor(params),
                                         params, copy_bw)
            cl = np.where((self.flops > 0) & (cl > 0), cl + cl_rest / np.maximum(peak, 1e-30), 0.0)
            own = cl if own is None else np.where(cl > 0, cl, own)  # NCHW (native) and NHWC ops are apart
        if self.transpose_bytes is not None and params.nchw_transpose > 0:
            # NCHW <-> NHWC transposes around each tensor-core convolution: separate copy kernels
            tb = self.transpose_bytes if native is None else np.where(native > 0, 0.0, self.transpose_bytes)
            fresh_s = fresh_s + params.nchw_transpose * tb / copy_bw
        if (params.depthwise_call_us or params.depthwise_grad_call_us) and self.dw_call is not None:
            per_call = np.array([0.0, params.depthwise_call_us, params.depthwise_grad_call_us]) * 1e-6
            fresh_s = fresh_s + per_call[self.dw_call]
        nbytes = self.bytes
        if params.bn_native_gelems_per_block > 0 and self.bn_passes is not None:
            # PyTorch's per-channel batch-norm passes: one resident block per channel, each bound by its loads'
            # latency, at most the op's bandwidth (module doc); a backward's traffic is all in its two passes
            rate = np.minimum(bw / self.bn_itemsize, self.bn_blocks * params.bn_native_gelems_per_block * 1e9)
            fresh_s = fresh_s + self.bn_passes * self.bn_elems / np.maximum(rate, 1e-30)
            nbytes = np.where(self.bn_passes == 2, 0.0, nbytes)
        slow = self.slow_wgrad_flops
        if own is not None:
            on = own > 0
            peak = np.where(on, flops / np.where(on, own, 1.0), peak)
            slow = np.where(on, 0.0, slow) if slow is not None else None
        if ((params.depthwise_wgrad_gflops > 0 or params.depthwise_tap_ref > 0) and slow is not None
                and slow.any()):
            # weight gradients of kernels above 3x3 run on their own path after the rest of the op (its input
            # gradient, which the roofline times): at the measured rate, or (not measured) at the depthwise
            # efficiency without the per-output scaling, which does not hold for them
            flops = flops - slow
            rate = (params.depthwise_wgrad_gflops * 1e9 if params.depthwise_wgrad_gflops > 0
                    else scale * eff0)
            fresh_s = fresh_s + slow / rate
        return roofline_s(flops, nbytes, peak, bw, params.kernel_floor_us * 1e-6, launches, over, fresh_s,
                          with_bound=with_bound)


def compile_ops(ops: Sequence, device: Device, precision: str, params: RooflineParams,
                sdpa: str = "auto") -> CompiledOps:
    """Traced ops (``OpRecord``s) as arrays: each op's unit and peak (by dtype and precision), efficiency key,
    memory class, GEMM dimension, tensors per launch, light flag and fresh output bytes (counted at
    ``params.fresh_alloc_min_bytes``). ``sdpa``: the workload's attention kernel choice (``Workload.sdpa``; ``auto``
    runs the SDPA kernels as cuDNN's where PyTorch prefers them on ``device``)."""
    min_bytes = params.fresh_alloc_min_bytes if params.fresh_alloc_gb_per_s else 0.0
    cudnn = sdpa_runs_cudnn(sdpa, device)
    taps = [depthwise_taps(o) for o in ops]
    return CompiledOps.from_arrays(
        [o.flops for o in ops], [o.bytes_total for o in ops], [o.op_class for o in ops], device,
        precision=precision, dtype=[o.dtype for o in ops], key=[compute_key(o, cudnn) for o in ops],
        dmin=[gemm_min_dim(o) for o in ops], n_tensors=[0 if o.fusion == 2 else o.n_tensors for o in ops],
        light=[is_light(o) for o in ops],
        winograd=[winograd_eligible(o) for o in ops],
        conv_bytes=[o.bytes_total if o.op_class == "conv" and o.layout != "nhwc" else 0.0 for o in ops],
        taps=taps, slow_wgrad_flops=[depthwise_wgrad_flops(o) for o in ops],
        dw_call=[(2 if o.aten == "convolution_backward" else 1) if t else 0 for o, t in zip(ops, taps)],
        bn=[native_batch_norm_passes(o, precision) for o in ops],
        dw_work=[native_depthwise_work(o) for o in ops],
        dwcl_work=[cl_depthwise_work(o) for o in ops],
        attn_keys=[attention_keys(o) for o in ops],
        fresh_bytes=fresh_bytes(ops, min_bytes),
        fresh_min_bytes=min_bytes,
    )
