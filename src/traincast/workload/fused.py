"""Fused kernels: what training runs where one GPU kernel does the work of many eager ops, and what it costs.

Modelled on ``torch.utils.flop_counter``'s decorator registry: :data:`FUSED` maps the name of an op the trace
records to a cost model, FLOPs and HBM bytes from the shapes of the op's tensors::

    @register_fused("_scaled_dot_product_flash_attention", family="attention", implementation="flash", ...)
    def _flash_fwd(q, k, v, is_causal, scale, *, out) -> Cost: ...

The kernels the trace cannot run as PyTorch ops on the meta device are ``traincast::`` custom ops (a meta
implementation, an autograd formula whose backward is the kernel's backward op), put in place of the eager code
while a step is traced, the way the real run chooses them:

- **attention** (``F.scaled_dot_product_attention``): PyTorch's CUDA choice, flash first (fp16/bf16, no explicit
  mask, head dims equal and at most 256, grouped-query attention natively), else memory-efficient (fp32, masks,
  other head dims), except for grouped-query heads, which the memory-efficient kernel does not take: PyTorch's math
  path then (scores materialised); causal masks halve the work; any number of batch dims;
- **selective scan** and **causal conv1d** of Mamba layers (Hugging Face ``transformers`` Mamba and the hybrids
  built on its ``mamba_selective_scan`` / ``causal_conv1d_fn``): the ``mamba_ssm`` / ``causal-conv1d`` CUDA
  kernels, which every Mamba training run installs (without them transformers falls back to a Python loop over
  the sequence, hundreds of times slower; the forecast says which it assumed);
- **SSD chunked scan** of Mamba-2 layers (``mamba2_chunk_scan``): ``mamba_ssm``'s chunked state-space-duality
  kernels.

Fused norms and cross-entropy are PyTorch's own kernels (``native_layer_norm``, ``_fused_rms_norm``,
``_log_softmax`` + ``nll_loss``); their cost models are registered here too, so every kernel that fuses work has
its formula in one place, with tests against hand formulas (``tests/test_fused.py``).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from traincast.registry import Registry


@dataclass(frozen=True)
class Cost:
    flops: int
    bytes_read: int
    bytes_written: int


@dataclass(frozen=True)
class FusedKernel:
    name: str  # the op name the trace records
    family: str  # attention | selective scan | causal conv1d | SSD chunk scan | norm | cross-entropy
    implementation: str  # flash | memory-efficient | mamba_ssm | causal-conv1d | PyTorch
    op_class: str  # the class predictors time it as (attention, matmul, norm, reduction, elementwise)
    cost: Callable[..., Cost]  # (*tensors and arguments of the op, out=its output) -> Cost


FUSED: Registry[FusedKernel] = Registry("fused kernel")


def register_fused(name: str, *, family: str, implementation: str, op_class: str, help: str = ""):
    """Decorator: the cost model of the op recorded as ``name``."""

    def deco(fn: Callable[..., Cost]) -> Callable[..., Cost]:
        FUSED.add(name, FusedKernel(name, family, implementation, op_class, fn), help=help)
        return fn

    return deco


def nbytes(*ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts if isinstance(t, Tensor))


def _flat(out) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    return []


def cost_of(name: str, args, kwargs, out) -> Cost | None:
    """The registered cost of a recorded op (None where ``name`` has no cost model)."""
    if name not in FUSED:
        return None
    return FUSED.get(name).cost(*args, out=out, **kwargs)


# --- attention ----------------------------------------------------------------------------------------
def attended_pairs(sq: int, sk: int, is_causal: bool) -> int:
    """(query, key) pairs a kernel computes: all of them, or under a causal mask (PyTorch's, aligned top-left:
    query i sees keys 0..i) the sum of min(i + 1, Sk) over the queries: S(S+1)/2 for a square mask."""
    if not is_causal:
        return sq * sk
    full = min(sq, sk)
    return full * (full + 1) // 2 + max(sq - sk, 0) * sk


def attention_flops(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, backward: bool = False) -> int:
    """``q``: (..., Hq, Sq, D), ``k``: (..., Hkv, Sk, D), ``v``: (..., Hkv, Sk, Dv); every leading dim is a batch.
    Forward: S = QK^T and O = PV, 2 FLOPs per multiply-add: 2 x pairs x (D + Dv) per query head. Backward
    (flash and memory-efficient alike): S recomputed (D), dV = P^T dO (Dv), dP = dO V^T (Dv), dQ = dS K (D),
    dK = dS^T Q (D): 2 x pairs x (3D + 2Dv), 2.5x the forward for D = Dv."""
    heads = math.prod(q.shape[:-2])
    pairs = attended_pairs(q.shape[-2], k.shape[-2], is_causal)
    d, dv = q.shape[-1], v.shape[-1]
    per = (3 * d + 2 * dv) if backward else (d + dv)
    return 2 * heads * pairs * per


def _attn_fwd_cost(q, k, v, *rest, out, is_causal=False, **_) -> Cost:
    mask = next((t for t in rest if isinstance(t, Tensor)), None)
    causal = bool(is_causal) or any(r is True for r in rest)
    o, lse = out
    return Cost(attention_flops(q, k, v, causal), nbytes(q, k, v, mask), nbytes(o, lse))


def _attn_bwd_cost(dout, q, k, v, o, lse, *rest, out, is_causal=False, **_) -> Cost:
    mask = next((t for t in rest if isinstance(t, Tensor)), None)
    causal = bool(is_causal) or any(r is True for r in rest)
    # reads Q, K, V, O, dO, LSE (and the mask); the row sums D = rowsum(dO * O) are read back per key block
    return Cost(attention_flops(q, k, v, causal, backward=True), nbytes(dout, q, k, v, o, lse, mask),
                nbytes(*_flat(out)))


register_fused("_scaled_dot_product_flash_attention", family="attention", implementation="flash",
               op_class="attention", help="FlashAttention-2 forward: Q, K, V read once, O and the row "
               "log-sum-exp written; no S x S matrix in memory")(_attn_fwd_cost)
register_fused("_scaled_dot_product_flash_attention_backward", family="attention", implementation="flash",
               op_class="attention", help="FlashAttention-2 backward, recomputing S = QK^T")(_attn_bwd_cost)
register_fused("_scaled_dot_product_efficient_attention", family="attention", implementation="memory-efficient",
               op_class="attention", help="memory-efficient (xFormers) attention forward, masks allowed")(
    _attn_fwd_cost)
register_fused("_scaled_dot_product_efficient_attention_backward", family="attention",
               implementation="memory-efficient", op_class="attention",
               help="memory-efficient attention backward, recomputing S")(_attn_bwd_cost)
register_fused("_scaled_dot_product_cudnn_attention", family="attention", implementation="cudnn",
               op_class="attention", help="cuDNN's fused attention forward (Transformer Engine's FusedAttention, "
               "PyTorch's cuDNN SDPA backend): the same reads, writes and FLOPs as flash")(_attn_fwd_cost)
register_fused("_scaled_dot_product_cudnn_attention_backward", family="attention", implementation="cudnn",
               op_class="attention", help="cuDNN's fused attention backward, recomputing S")(_attn_bwd_cost)


def _lse_shape(q: Tensor) -> tuple[int, ...]:
    return tuple(q.shape[:-1])


@torch.library.custom_op("traincast::_scaled_dot_product_flash_attention", mutates_args=())
def flash_attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@flash_attention.register_fake
def _(q, k, v, is_causal, scale):
    return q.new_empty(q.shape[:-1] + (v.shape[-1],)), q.new_empty(_lse_shape(q), dtype=torch.float32)


@torch.library.custom_op("traincast::_scaled_dot_product_flash_attention_backward", mutates_args=())
def flash_attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                             is_causal: bool, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@flash_attention_backward.register_fake
def _(dout, q, k, v, out, lse, is_causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _flash_setup(ctx, inputs, output):
    q, k, v, is_causal, scale = inputs
    ctx.save_for_backward(q, k, v, *output)
    ctx.is_causal, ctx.scale = is_causal, scale


def _flash_bwd(ctx, dout, _dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.traincast._scaled_dot_product_flash_attention_backward(
        dout, q, k, v, out, lse, ctx.is_causal, ctx.scale)
    return dq, dk, dv, None, None


flash_attention.register_autograd(_flash_bwd, setup_context=_flash_setup)


@torch.library.custom_op("traincast::_scaled_dot_product_efficient_attention", mutates_args=())
def efficient_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool,
                        scale: float) -> tuple[Tensor, Tensor]:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@efficient_attention.register_fake
def _(q, k, v, attn_mask, is_causal, scale):
    return q.new_empty(q.shape[:-1] + (v.shape[-1],)), q.new_empty(_lse_shape(q), dtype=torch.float32)


@torch.library.custom_op("traincast::_scaled_dot_product_efficient_attention_backward", mutates_args=())
def efficient_attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                                 attn_mask: Tensor | None, is_causal: bool,
                                 scale: float) -> tuple[Tensor, Tensor, Tensor]:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@efficient_attention_backward.register_fake
def _(dout, q, k, v, out, lse, attn_mask, is_causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _eff_setup(ctx, inputs, output):
    q, k, v, mask, is_causal, scale = inputs
    ctx.save_for_backward(q, k, v, *output)
    ctx.mask, ctx.is_causal, ctx.scale = mask, is_causal, scale


def _eff_bwd(ctx, dout, _dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.traincast._scaled_dot_product_efficient_attention_backward(
        dout, q, k, v, out, lse, ctx.mask, ctx.is_causal, ctx.scale)
    return dq, dk, dv, None, None, None


efficient_attention.register_autograd(_eff_bwd, setup_context=_eff_setup)


def attention_kernel(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None) -> str:
    """Which fused kernel PyTorch's CUDA SDPA picks for these inputs (its priority: flash, then memory-efficient):
    ``flash`` for fp16/bf16 inputs without an explicit mask and with equal head dims of at most 256, else
    ``memory-efficient``."""
    if (q.dtype in (torch.float16, torch.bfloat16) and attn_mask is None and q.shape[-1] == k.shape[-1] == v.shape[-1]
            and q.shape[-1] <= 256):
        return "flash"
    return "memory-efficient"


def fused_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` as the fused kernel a CUDA run picks (dropout is fused in the kernel and
    costs nothing extra here)."""
    from traincast.workload import autocast

    half = autocast.current_dtype()
    if half is not None:  # autocast casts SDPA's inputs (torch's lower-precision list)
        query, key, value = (t.to(half) if t.is_floating_point() and t.dtype != half else t
                             for t in (query, key, value))
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(half)
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    if attn_mask is not None and attn_mask.dtype == torch.bool and is_causal is False:
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device)  # the additive form
    def math_path():  # scores materialised, softmax, dropout and the second product as separate kernels
        _TRACING.math_attention += 1
        return torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, bool(is_causal), None, scale=scale,
            enable_gqa=key.shape[-3] != query.shape[-3])[0]

    if not (query.shape[:-3] == key.shape[:-3] == value.shape[:-3]):
        # batch dimensions that broadcast (Blip-2's Q-Former in Granite Speech: one set of queries against every
        # window's keys): both fused kernels require equal batch sizes (sdp_utils.cpp,
        # check_batch_size_and_num_heads_dense), so SDPA runs its math path, whose matmuls broadcast them
        return math_path()
    kind = attention_kernel(query, key, value, attn_mask)
    if kind == "flash":
        return flash_attention(query, key, value, bool(is_causal), scale)[0]
    if key.shape[-3] != query.shape[-3]:
        # grouped-query heads (enable_gqa) where flash cannot run (FP32, a mask, other head dims): PyTorch's
        # memory-efficient kernel takes no grouped-query heads (sdp_utils.cpp, its dense constraints:
        # check_batch_size_and_num_heads_dense<false /*supports_grouped_query_attention*/>), so SDPA falls back
        # to its math path
        return math_path()
    if attn_mask is not None:
        attn_mask = attn_mask.to(query.dtype)
    return efficient_attention(query, key, value, attn_mask, bool(is_causal), scale)[0]


# --- Mamba: selective scan and causal conv1d ----------------------------------------------------------------
def selective_scan_flops(u: Tensor, A: Tensor, *, with_d: bool, with_z: bool) -> int:
    """Forward FLOPs of the selective scan as ``mamba_ssm`` counts them (``selective_scan_flop_jit``):
    9 per (batch, channel, position, state) -- discretise A and B, update the state, read it out through C --
    plus one per (batch, channel, position) for the D skip and one for the z gate."""
    b, d, length = u.shape
    n = A.shape[-1]
    return 9 * b * d * length * n + (b * d * length if with_d else 0) + (b * d * length if with_z else 0)


def _scan_fwd_cost(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, *, out) -> Cost:
    flops = selective_scan_flops(u, A, with_d=D is not None, with_z=z is not None)
    return Cost(flops, nbytes(u, delta, A, B, C, D, z, delta_bias), nbytes(*_flat(out)))


def _scan_bwd_cost(dout, u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, *, out) -> Cost:
    # the backward kernel re-runs the forward scan (1x) and a reverse scan producing du, ddelta, dA, dB, dC (2x)
    flops = 3 * selective_scan_flops(u, A, with_d=D is not None, with_z=z is not None)
    return Cost(flops, nbytes(dout, u, delta, A, B, C, D, z, delta_bias), nbytes(*_flat(out)))


register_fused("selective_scan_fwd", family="selective scan", implementation="mamba_ssm", op_class="elementwise",
               help="Mamba selective scan forward (mamba_ssm CUDA kernel): u, delta, B, C, z read once, y written; "
               "states stay in SRAM")(_scan_fwd_cost)
register_fused("selective_scan_bwd", family="selective scan", implementation="mamba_ssm", op_class="elementwise",
               help="Mamba selective scan backward: forward scan recomputed, reverse scan for the gradients")(
    _scan_bwd_cost)


@torch.library.custom_op("traincast::selective_scan_fwd", mutates_args=())
def selective_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None, z: Tensor | None,
                   delta_bias: Tensor | None, delta_softplus: bool) -> Tensor:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@selective_scan.register_fake
def _(u, delta, A, B, C, D, z, delta_bias, delta_softplus):
    return torch.empty_like(u)


@torch.library.custom_op("traincast::selective_scan_bwd", mutates_args=())
def selective_scan_backward(dout: Tensor, u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
                            D: Tensor | None, z: Tensor | None, delta_bias: Tensor | None,
                            delta_softplus: bool) -> list[Tensor]:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@selective_scan_backward.register_fake
def _(dout, u, delta, A, B, C, D, z, delta_bias, delta_softplus):
    # du, ddelta, dA (fp32), dB, dC, then dD, dz, ddelta_bias for the optional inputs given
    return [torch.empty_like(t, dtype=torch.float32 if t is A else t.dtype)
            for t in (u, delta, A, B, C, D, z, delta_bias) if t is not None]


def _scan_setup(ctx, inputs, output):
    u, delta, A, B, C, D, z, delta_bias, softplus = inputs
    ctx.present = [t is not None for t in (D, z, delta_bias)]
    ctx.save_for_backward(u, delta, A, B, C, *(t for t in (D, z, delta_bias) if t is not None))
    ctx.softplus = softplus


def _scan_bwd(ctx, dout):
    saved = list(ctx.saved_tensors)
    u, delta, A, B, C = saved[:5]
    rest = iter(saved[5:])
    D, z, delta_bias = (next(rest) if p else None for p in ctx.present)
    grads = iter(torch.ops.traincast.selective_scan_bwd(dout, u, delta, A, B, C, D, z, delta_bias, ctx.softplus))
    du, dd, da, db, dc = (next(grads) for _ in range(5))
    dD, dz, ddb = (next(grads) if p else None for p in ctx.present)
    return du, dd, da.to(A.dtype), db, dc, dD, dz, ddb, None


selective_scan.register_autograd(_scan_bwd, setup_context=_scan_setup)


def _conv_fwd_cost(x, weight, bias=None, activation=False, *, out) -> Cost:
    b, d, length = x.shape
    w = weight.shape[-1]
    flops = 2 * b * d * length * w + (b * d * length if bias is not None else 0) + (4 * b * d * length if activation else 0)
    return Cost(flops, nbytes(x, weight, bias), nbytes(out))


def _conv_bwd_cost(dout, x, weight, bias=None, activation=False, *, out) -> Cost:
    b, d, length = x.shape
    w = weight.shape[-1]
    # dx and dweight: one multiply-add each per (batch, channel, position, tap); the activation recomputed
    flops = 4 * b * d * length * w + (b * d * length if bias is not None else 0) + (
        2 * b * d * length * w + 6 * b * d * length if activation else 0)
    return Cost(flops, nbytes(dout, x, weight, bias), nbytes(*_flat(out)))


register_fused("causal_conv1d_fwd", family="causal conv1d", implementation="causal-conv1d", op_class="elementwise",
               help="depthwise causal conv1d with fused SiLU (causal-conv1d CUDA kernel)")(_conv_fwd_cost)
register_fused("causal_conv1d_bwd", family="causal conv1d", implementation="causal-conv1d", op_class="elementwise",
               help="causal conv1d backward: dx, dweight, dbias, the activation recomputed")(_conv_bwd_cost)


@torch.library.custom_op("traincast::causal_conv1d_fwd", mutates_args=())
def causal_conv1d(x: Tensor, weight: Tensor, bias: Tensor | None, activation: bool) -> Tensor:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@causal_conv1d.register_fake
def _(x, weight, bias, activation):
    return torch.empty_like(x)


@torch.library.custom_op("traincast::causal_conv1d_bwd", mutates_args=())
def causal_conv1d_backward(dout: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None,
                           activation: bool) -> list[Tensor]:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@causal_conv1d_backward.register_fake
def _(dout, x, weight, bias, activation):
    return [torch.empty_like(t) for t in (x, weight, bias) if t is not None]


def _conv_setup(ctx, inputs, output):
    x, weight, bias, activation = inputs
    ctx.has_bias, ctx.activation = bias is not None, activation
    ctx.save_for_backward(x, weight, *((bias,) if bias is not None else ()))


def _conv_bwd(ctx, dout):
    x, weight, *b = ctx.saved_tensors
    grads = torch.ops.traincast.causal_conv1d_bwd(dout, x, weight, b[0] if b else None, ctx.activation)
    return grads[0], grads[1], (grads[2] if ctx.has_bias else None), None


causal_conv1d.register_autograd(_conv_bwd, setup_context=_conv_setup)


# --- Mamba-2: the SSD chunked scan ----------------------------------------------------------------------------
def ssd_flops(x: Tensor, B: Tensor, chunk_size: int) -> int:
    """Forward FLOPs of ``mamba_ssm``'s chunked SSD scan for x (b, L, H, P), B and C (b, L, G, N), chunks of Q:
    C B^T within each chunk (2 L Q N per group), the chunk states B^T x (2 L N P per head), the diagonal
    blocks' (C B^T o decay) x (2 L Q P per head) and the off-diagonal read-out C states (2 L N P per head)."""
    b, length, h, p = x.shape
    g, n = B.shape[-2], B.shape[-1]
    q = min(int(chunk_size), length)
    return 2 * b * length * (g * q * n + h * q * p + 2 * h * n * p)


def _ssd_fwd_cost(x, dt, A, B, C, chunk_size, D=None, dt_bias=None, dt_softplus=False, *, out) -> Cost:
    b, length, h, p = x.shape
    n_chunks = -(-length // max(int(chunk_size), 1))
    states = b * n_chunks * h * p * B.shape[-1] * 4  # fp32 chunk states written and read back
    return Cost(ssd_flops(x, B, chunk_size), nbytes(x, dt, A, B, C, D, dt_bias) + states, nbytes(out) + states)


def _ssd_bwd_cost(dout, x, dt, A, B, C, chunk_size, D=None, dt_bias=None, dt_softplus=False, *, out) -> Cost:
    b, length, h, p = x.shape
    n_chunks = -(-length // max(int(chunk_size), 1))
    states = b * n_chunks * h * p * B.shape[-1] * 4
    # each forward product has two gradient products; the chunk states are recomputed (2 L N P per head)
    flops = 2 * ssd_flops(x, B, chunk_size) + 2 * b * length * h * p * B.shape[-1]
    return Cost(flops, nbytes(dout, x, dt, A, B, C, D, dt_bias) + 2 * states, nbytes(*_flat(out)) + states)


register_fused("ssd_chunk_scan_fwd", family="SSD chunk scan", implementation="mamba_ssm", op_class="matmul",
               help="Mamba-2 chunked state-space-duality scan forward (mamba_ssm Triton kernels)")(_ssd_fwd_cost)
register_fused("ssd_chunk_scan_bwd", family="SSD chunk scan", implementation="mamba_ssm", op_class="matmul",
               help="Mamba-2 chunked scan backward")(_ssd_bwd_cost)


@torch.library.custom_op("traincast::ssd_chunk_scan_fwd", mutates_args=())
def ssd_chunk_scan(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int, D: Tensor | None,
                   dt_bias: Tensor | None, dt_softplus: bool) -> Tensor:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@ssd_chunk_scan.register_fake
def _(x, dt, A, B, C, chunk_size, D, dt_bias, dt_softplus):
    return torch.empty_like(x)


@torch.library.custom_op("traincast::ssd_chunk_scan_bwd", mutates_args=())
def ssd_chunk_scan_backward(dout: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
                            D: Tensor | None, dt_bias: Tensor | None, dt_softplus: bool) -> list[Tensor]:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@ssd_chunk_scan_backward.register_fake
def _(dout, x, dt, A, B, C, chunk_size, D, dt_bias, dt_softplus):
    return [torch.empty_like(t) for t in (x, dt, A, B, C, D, dt_bias) if t is not None]


def _ssd_setup(ctx, inputs, output):
    x, dt, A, B, C, chunk, D, dt_bias, softplus = inputs
    ctx.present = [t is not None for t in (D, dt_bias)]
    ctx.chunk, ctx.softplus = chunk, softplus
    ctx.save_for_backward(x, dt, A, B, C, *(t for t in (D, dt_bias) if t is not None))


def _ssd_bwd(ctx, dout):
    saved = list(ctx.saved_tensors)
    x, dt, A, B, C = saved[:5]
    rest = iter(saved[5:])
    D, dt_bias = (next(rest) if p else None for p in ctx.present)
    grads = iter(torch.ops.traincast.ssd_chunk_scan_bwd(dout, x, dt, A, B, C, ctx.chunk, D, dt_bias, ctx.softplus))
    dx, ddt, da, db, dc = (next(grads) for _ in range(5))
    dD, ddb = (next(grads) if p else None for p in ctx.present)
    return dx, ddt, da, db, dc, None, dD, ddb, None


ssd_chunk_scan.register_autograd(_ssd_bwd, setup_context=_ssd_setup)


# --- PyTorch's own fused kernels: norms and cross-entropy -------------------------------------------------
def _rows_cols(x: Tensor, normalized: int) -> tuple[int, int]:
    cols = math.prod(x.shape[-normalized:]) if normalized else x.shape[-1]
    return x.numel() // max(cols, 1), cols


@register_fused("native_layer_norm", family="norm", implementation="PyTorch", op_class="norm",
                help="LayerNorm forward: x read once, y and the per-row mean and 1/std written")
def _ln_fwd(x, normalized_shape, weight=None, bias=None, eps=1e-5, *, out) -> Cost:
    return Cost(8 * x.numel(), nbytes(x, weight, bias), nbytes(*_flat(out)))


@register_fused("native_layer_norm_backward", family="norm", implementation="PyTorch", op_class="norm",
                help="LayerNorm backward: dy, x, mean, 1/std read; dx, dweight, dbias written")
def _ln_bwd(dy, x, normalized_shape, mean, rstd, weight=None, bias=None, output_mask=None, *, out) -> Cost:
    return Cost(12 * x.numel(), nbytes(dy, x, mean, rstd, weight, bias), nbytes(*_flat(out)))


@register_fused("_fused_rms_norm", family="norm", implementation="PyTorch", op_class="norm",
                help="RMSNorm forward (F.rms_norm, nn.RMSNorm): x read once, y and the per-row 1/rms written")
def _rms_fwd(x, normalized_shape, weight=None, eps=None, *, out) -> Cost:
    return Cost(4 * x.numel(), nbytes(x, weight), nbytes(*_flat(out)))


@register_fused("_fused_rms_norm_backward", family="norm", implementation="PyTorch", op_class="norm",
                help="RMSNorm backward")
def _rms_bwd(dy, x, normalized_shape, rstd, weight=None, output_mask=None, *, out) -> Cost:
    return Cost(8 * x.numel(), nbytes(dy, x, rstd, weight), nbytes(*_flat(out)))


@register_fused("_log_softmax", family="cross-entropy", implementation="PyTorch", op_class="reduction",
                help="cross-entropy, part 1: log-softmax over the classes in one pass (max, sum of exp, "
                "subtract), logits read once, log-probabilities written")
def _lsm_fwd(x, dim, half_to_float=False, *, out) -> Cost:
    return Cost(5 * x.numel(), nbytes(x), nbytes(out))


@register_fused("nll_loss_forward", family="cross-entropy", implementation="PyTorch", op_class="reduction",
                help="cross-entropy, part 2: one log-probability gathered per target")
def _nll_fwd(x, target, weight=None, reduction=1, ignore_index=-100, *, out) -> Cost:
    # FLOPs: one per logit, as workload/costs.py has always counted this (memory-bound: the count hardly matters);
    # bytes: one log-probability read per target, not the whole vocabulary
    rows = target.numel()
    return Cost(x.numel(), rows * (target.element_size() + x.element_size()) + nbytes(weight), nbytes(*_flat(out)))


# --- torchvision's detection kernels: RoIAlign and non-maximum suppression -------------------------------
ROI_SAMPLES = 2  # sampling points per bin and axis where the call says 0 (adaptive: values decide); torchvision's
# MultiScaleRoIAlign passes 2


def _roi_points(out_or_grad: Tensor, sampling_ratio: int) -> int:
    """Bilinear samples a RoIAlign call takes: s x s per output bin, 4 feature values each."""
    s = sampling_ratio if sampling_ratio > 0 else ROI_SAMPLES
    return out_or_grad.numel() * s * s


@register_fused("roi_align", family="roi align", implementation="torchvision", op_class="elementwise",
                help="RoIAlign forward: per output bin s x s bilinear samples (4 gathered values, 4 multiply-adds "
                "each), averaged; sampled values read, the pooled features written")
def _roi_align_fwd(x, rois, spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned, *, out) -> Cost:
    pts = _roi_points(out, sampling_ratio)
    read = min(4 * pts * x.element_size(), nbytes(x)) + nbytes(rois)
    return Cost(8 * pts + out.numel(), read, nbytes(out))


@register_fused("_roi_align_backward", family="roi align", implementation="torchvision", op_class="elementwise",
                help="RoIAlign backward: the feature-map gradient zeroed, then each bin's gradient added (atomic) "
                "into the 4 values of each of its s x s samples")
def _roi_align_bwd(grad, rois, spatial_scale, pooled_h, pooled_w, batch_size, channels, height, width,
                   sampling_ratio, aligned, *, out) -> Cost:
    pts = _roi_points(grad, sampling_ratio)
    return Cost(8 * pts, nbytes(grad, rois), nbytes(out) + 4 * pts * grad.element_size())


@register_fused("nms", family="nms", implementation="torchvision", op_class="elementwise",
                help="non-maximum suppression: boxes sorted by score, the IoU of every pair (about 5 FLOPs a "
                "pair, upper triangle) into a bit mask of n x n/64 words, kept indices written")
def _nms(dets, scores, iou_threshold, *, out) -> Cost:
    n = dets.shape[0]
    return Cost(5 * n * n, nbytes(dets, scores), n * -(-n // 64) * 8 + nbytes(out))


# --- putting the kernels in place while a step is traced ---------------------------------------------------
def _mamba_scan(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                return_last_state=False, **_):
    """transformers' ``mamba_selective_scan`` as the mamba_ssm kernel: u, delta (b, d, L); A (d, n);
    B, C (b, n, L) or (b, g, n, L)."""
    y = selective_scan(hidden_states, dt, A, B, C, D, z, delta_bias, bool(delta_softplus))
    if return_last_state:
        return y, hidden_states.new_zeros(hidden_states.shape[0], hidden_states.shape[1], A.shape[-1])
    return y


def _causal_conv1d(hidden_states, weight, bias=None, activation=None, **_):
    """transformers' ``causal_conv1d_fn`` as the causal-conv1d kernel (SiLU fused; other activations applied
    after it, as transformers' fallback does)."""
    fused = activation in ("silu", "swish")
    y = causal_conv1d(hidden_states, weight, bias, fused)
    if activation is not None and not fused:
        from transformers.activations import ACT2FN

        y = ACT2FN[activation](y)
    return y


def _mamba2_scan(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None, initial_states=None,
                 dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False, z=None, **_):
    """transformers' ``mamba2_chunk_scan`` as mamba_ssm's chunked SSD kernels."""
    y = ssd_chunk_scan(hidden_states, dt, A, B, C, int(chunk_size), D, dt_bias, bool(dt_softplus))
    if z is not None:
        y = y * F.silu(z)
    if return_final_states:
        b, _, h, p = hidden_states.shape
        return y, hidden_states.new_zeros(b, h, p, B.shape[-1])
    return y


# --- RWKV-4's WKV recurrence (the CUDA kernel transformers loads for RWKV) --------------------------------
# per time step and channel the kernel computes the output from its running (a, b, p) state and updates it:
# about 20 floating-point operations (maximums, two exponentials each, multiply-adds and a division); the
# backward kernel reruns the forward recurrence and then the reverse one: about three times that
WKV_FLOPS_PER_ELEMENT = 20
WKV_BWD_FACTOR = 3


def _wkv_fwd_cost(w, u, k, v, *, out) -> Cost:
    return Cost(WKV_FLOPS_PER_ELEMENT * k.numel(), nbytes(w, u, k, v), nbytes(out))


def _wkv_bwd_cost(w, u, k, v, y, gy, *, out) -> Cost:
    return Cost(WKV_BWD_FACTOR * WKV_FLOPS_PER_ELEMENT * k.numel(), nbytes(w, u, k, v, y, gy), nbytes(*_flat(out)))


register_fused("rwkv_wkv_fwd", family="RWKV WKV", implementation="RWKV CUDA kernel", op_class="elementwise",
               help="RWKV-4 time-mixing recurrence forward: k, v read once, the output written, the state in "
               "registers")(_wkv_fwd_cost)
register_fused("rwkv_wkv_bwd", family="RWKV WKV", implementation="RWKV CUDA kernel", op_class="elementwise",
               help="RWKV-4 recurrence backward (forward recurrence rerun, then the reverse one)")(_wkv_bwd_cost)


@torch.library.custom_op("traincast::rwkv_wkv_fwd", mutates_args=())
def rwkv_wkv(w: Tensor, u: Tensor, k: Tensor, v: Tensor) -> Tensor:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@rwkv_wkv.register_fake
def _(w, u, k, v):
    return torch.empty_like(k)


@torch.library.custom_op("traincast::rwkv_wkv_bwd", mutates_args=())
def rwkv_wkv_backward(w: Tensor, u: Tensor, k: Tensor, v: Tensor, y: Tensor, gy: Tensor) -> list[Tensor]:
    raise NotImplementedError("a cost-model op: traced on the meta device only")


@rwkv_wkv_backward.register_fake
def _(w, u, k, v, y, gy):
    return [torch.empty_like(w), torch.empty_like(u), torch.empty_like(k), torch.empty_like(v)]


def _wkv_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs, output)


def _wkv_bwd(ctx, gy):
    w, u, k, v, y = ctx.saved_tensors
    gw, gu, gk, gv = torch.ops.traincast.rwkv_wkv_bwd(w, u, k, v, y, gy)
    return gw, gu, gk, gv


rwkv_wkv.register_autograd(_wkv_bwd, setup_context=_wkv_setup)


def _rwkv_attention_for(orig):
    """transformers' ``rwkv_linear_attention`` (``orig``) as its CUDA kernel in training (no state carried in or
    out); with a state, ``orig``."""

    def rwkv_attention(time_decay, time_first, key, value, state=None, return_state=False):
        if state is not None or return_state:
            return orig(time_decay, time_first, key, value, state=state, return_state=return_state)
        w = -torch.exp(time_decay.float())  # as the kernel's autograd function prepares it
        y = rwkv_wkv(w, time_first.float(), key.float(), value.float())
        return y.to(key.dtype), None

    return rwkv_attention


# the transformers functions each kernel stands in for, by the name models call them by
_HF_KERNELS: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "mamba_selective_scan": (_mamba_scan, ("hidden_states", "dt", "A", "B", "C")),
    "causal_conv1d_fn": (_causal_conv1d, ("hidden_states", "weight")),
    "mamba2_chunk_scan": (_mamba2_scan, ("hidden_states", "dt", "A", "B", "C", "chunk_size")),
    "rwkv_linear_attention": (_rwkv_attention_for, ("time_decay", "time_first", "key", "value")),
}


def _params(fn) -> tuple[str, ...]:
    import inspect

    target = getattr(fn, "__wrapped__", fn)
    try:
        return tuple(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return ()


def kernel_packages() -> dict[str, bool]:
    """Whether this machine has the kernel packages Mamba's fused path needs."""
    import importlib.util

    return {p: importlib.util.find_spec(p) is not None for p in ("mamba_ssm", "causal_conv1d")}


class _Tracing(threading.local):
    def __init__(self):
        self.kernels = False  # this thread is tracing: Mamba functions run as the fused kernels
        self.attention = False  # ... and SDPA as the fused attention kernel
        self.math_attention = 0  # SDPA calls that took PyTorch's math path (grouped-query heads, no flash; broadcast batches)


_TRACING = _Tracing()
_PATCH_LOCK = threading.Lock()
_PATCH_USERS = 0
_PATCHED: dict[tuple[int, str], tuple[object, str, object]] = {}  # (id(module), name) -> (module, name, original)


def _dispatching(orig, repl, flag: str):
    """``repl`` in a thread that is tracing (with ``flag`` on), ``orig`` everywhere else: a patch made for one
    thread's trace never changes what another thread (a real run, another trace) calls."""

    def fn(*args, **kwargs):
        return (repl if getattr(_TRACING, flag) else orig)(*args, **kwargs)

    fn.__wrapped__ = orig
    fn._traincast_patch = True
    return fn


def _patch(mod, name: str, repl, flag: str) -> None:
    key = (id(mod), name)
    if key in _PATCHED:
        return
    orig = getattr(mod, name)
    _PATCHED[key] = (mod, name, orig)
    setattr(mod, name, _dispatching(orig, repl, flag))


def _patch_loaded_modules() -> None:
    """Put the kernels in place in torch.nn.functional and every transformers model module loaded so far."""
    # calls through the module attribute, including those inside torch's own Python functions
    # (F.multi_head_attention_forward, which a torch-function mode sees only as a whole)
    _patch(F, "scaled_dot_product_attention", fused_sdpa, "attention")
    for name, mod in list(sys.modules.items()):
        if not name.startswith("transformers.models.") or mod is None:
            continue
        for fn_name, (repl, needs) in _HF_KERNELS.items():
            orig = getattr(mod, fn_name, None)
            if orig is None or not callable(orig) or getattr(orig, "_traincast_patch", False):
                continue
            if _params(orig)[:len(needs)] == needs:
                if repl is _rwkv_attention_for:  # the fallback with a state needs this module's original
                    repl = _rwkv_attention_for(orig)
                _patch(mod, fn_name, repl, "kernels")


class FusedKernels:
    """While active in this thread: ``F.scaled_dot_product_attention`` runs as the fused kernel CUDA picks
    (``attention=True``), and the Mamba functions of every loaded transformers model run as the mamba_ssm /
    causal-conv1d kernels. The module attributes are patched while any thread traces (counted), and each patch
    dispatches on the calling thread, so other threads keep the originals."""

    def __init__(self, attention: bool = True):
        self.attention = attention
        self._mode = None
        self._was = (False, False)

    def __enter__(self):
        global _PATCH_USERS
        with _PATCH_LOCK:
            _patch_loaded_modules()
            _PATCH_USERS += 1
        self._was = (_TRACING.kernels, _TRACING.attention, _TRACING.math_attention)
        _TRACING.kernels, _TRACING.attention, _TRACING.math_attention = True, self.attention, 0
        self.math_attention_calls = 0
        if self.attention:  # calls through names bound at import (from torch.nn.functional import ...)
            self._mode = _SdpaMode()
            self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        global _PATCH_USERS
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        self.math_attention_calls = _TRACING.math_attention
        _TRACING.kernels, _TRACING.attention, _TRACING.math_attention = self._was
        with _PATCH_LOCK:
            _PATCH_USERS -= 1
            if _PATCH_USERS == 0:
                for mod, name, orig in _PATCHED.values():
                    setattr(mod, name, orig)
                _PATCHED.clear()
        return False


_SDPA = F.scaled_dot_product_attention


class _SdpaMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _SDPA and _TRACING.attention:
            return fused_sdpa(*args, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def nothing():
    yield


# the name under which a trace counts SDPA calls that ran PyTorch's math path (Workload.fused_kernels)
MATH_ATTENTION = "sdpa_math"


def kernel_notes(counts: dict[str, int]) -> list[str]:
    """Forecast notes naming the fused kernels a trace ran (``counts``: recorded op name -> calls per step)."""
    by: dict[str, set[str]] = {}
    for name, n in counts.items():
        if n and name in FUSED:
            k = FUSED.get(name)
            if k.implementation not in ("PyTorch", "torchvision"):  # torchvision's: what the model calls
                by.setdefault(k.family, set()).add(k.implementation)
    notes = []
    if counts.get(MATH_ATTENTION):
        notes.append(f"attention: PyTorch's math path, {counts[MATH_ATTENTION]} per step, where no fused kernel "
                     "takes the call (grouped-query heads where flash cannot run, FP32, a mask or other head dims, "
                     "as the memory-efficient kernel takes no grouped-query heads; or batch dimensions that "
                     "broadcast), so the scores are materialised (memory grows with the sequence squared)")
    if "attention" in by:
        impl = by.pop("attention")
        who = ("Transformer Engine's FusedAttention, which it prefers on Hopper and later, or PyTorch SDPA's cuDNN "
               "backend" if impl == {"cudnn"} else "the kernel PyTorch's scaled_dot_product_attention picks on CUDA")
        notes.append(f"attention: {', '.join(sorted(impl))}, fused ({who})")
    if by:
        pk = kernel_packages()
        mamba = any(i in ("mamba_ssm", "causal-conv1d") for impl in by.values() for i in impl)
        missing = [p for p, ok in pk.items() if not ok] if mamba else []
        have = ("" if not missing else f"; {' and '.join(missing)} not installed here: assumed on the training "
                "machine (without them transformers runs its sequential Python scan, far slower)")
        notes.append(", ".join(f"{fam}: {'/'.join(sorted(impl))}" for fam, impl in sorted(by.items()))
                     + " fused kernels" + have)
    return notes
