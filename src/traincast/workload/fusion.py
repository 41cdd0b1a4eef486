"""Kernel fusion: the step as a compiler (``torch.compile``) or a fused-kernel framework runs it.

Modes (:data:`KERNEL_MODES`): ``eager``; ``compiled`` (the element-wise chains fused, below);
``transformer-engine`` (the same, and the half-precision fused attention run as cuDNN's kernel, which Transformer
Engine's backend selection prefers over FlashAttention on Hopper and later "for performance reasons",
``dot_product_attention/utils.py``).

Eager PyTorch runs every element-wise op, cast, normalisation and reduction as a kernel of its own: each reads
its inputs from memory and writes its output back, and each costs a launch. ``torch.compile`` (TorchInductor),
Megatron-LM/Transformer Engine's fused kernels (layer norm + linear, bias + GeLU, bias + dropout + add, fused
softmax, RoPE, SwiGLU) and JAX/XLA merge chains of such ops between two matrix multiplications into one kernel
that reads the chain's inputs once and writes only what later kernels read. The GEMMs, convolutions and
attention kernels stay as they are.

Mechanism (:func:`fuse_pointwise`), on the data flow the tracer records (``OpRecord.src``/``outs``):

- A **group** is a run of consecutive fusible ops (classes ``elementwise``, ``norm``, ``copy``, ``reduction``,
  less the sorts, scans and data-dependent selections in :data:`NOT_FUSIBLE`) of one phase (forward, backward)
  and one repeated block (the module path up to its first numeric part, ``model.layers.3``): compilers compile
  each transformer block as a region (torchtitan) or fuse inside it (Megatron); a matrix multiplication, an
  attention kernel, an embedding or a pooling op ends a group.
- Each member keeps its FLOPs; its **bytes read** are its inputs made outside the group (each tensor counted
  once per group) and its **bytes written** the outputs some op outside the group reads (a later kernel, the
  backward pass reading a saved tensor, the optimizer reading a gradient) or that rewrite a tensor in place
  that nothing reads again (a running statistic). Intermediates never leave the kernel's registers.
- The group's first op carries the one launch (``fusion = 1``); the others have none (``fusion = 2``): no
  kernel floor, no launch overhead, no host time to issue them.

What it does not model: a compiler's recomputation of cheap element-wise ops in the backward pass instead of
saving them (the forecast keeps eager autograd's saved tensors, so activation memory is eager's); fusion into
the prologue or epilogue of a matrix multiplication (Inductor's max-autotune templates, cuBLASLt epilogues);
horizontal fusion of independent ops across a GEMM; CUDA graphs (the host still issues each remaining kernel).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from traincast.errors import UnknownNameError
from traincast.workload.costs import base_name
from traincast.workload.fused import FUSED

KERNEL_MODES = {
    "eager": "every op its own kernel, as eager PyTorch runs it",
    "compiled": "element-wise, cast, norm and reduction chains between GEMMs fused into one kernel each "
                "(torch.compile, Megatron's fused kernels, XLA); attention as PyTorch's SDPA runs it",
    "transformer-engine": "as compiled, and attention in cuDNN's fused kernel (Megatron-Core / NeMo with "
                          "Transformer Engine, whose FusedAttention it prefers on Hopper and later)",
}
# the fused attention ops a Transformer Engine step runs as cuDNN's (half-precision inputs: TE's FP32 attention
# is unfused, and PyTorch's flash kernel takes only half precision)
CUDNN_ATTENTION = {
    "_scaled_dot_product_flash_attention": "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_backward": "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_efficient_attention": "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_efficient_attention_backward": "_scaled_dot_product_cudnn_attention_backward",
}
HALF_DTYPES = ("fp16", "bf16", "fp8")
FUSIBLE_CLASSES = frozenset({"elementwise", "norm", "copy", "reduction"})
# ops of those classes no compiler fuses into a point-wise kernel: sorts, scans, data-dependent sizes, RNG
# permutations, host reads
NOT_FUSIBLE = frozenset({
    "sort", "argsort", "topk", "kthvalue", "median", "mode", "nonzero", "nonzero_static", "_unique2", "unique_dim",
    "unique_consecutive", "masked_select", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "bincount",
    "histc", "searchsorted", "bucketize", "multinomial", "randperm", "_local_scalar_dense", "argwhere",
})


def check_kernels(kernels: str) -> str:
    """``kernels`` if it names a mode (:data:`KERNEL_MODES`), else a one-line error naming the choices."""
    if kernels not in KERNEL_MODES:
        raise UnknownNameError("kernel mode (--kernels)", str(kernels), KERNEL_MODES)
    return kernels


def _block(module: str) -> str:
    parts = module.split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return ""


def fusible(op) -> bool:
    return (op.op_class in FUSIBLE_CLASSES and op.phase in ("forward", "backward") and op.n_tensors <= 1
            and base_name(op.aten) not in NOT_FUSIBLE and op.aten not in FUSED)


def fusion_groups(ops) -> list[list[int]]:
    """Indices of the ops each fused kernel runs (groups of one op included)."""
    groups: list[list[int]] = []
    key = None
    cur: list[int] | None = None
    for i, o in enumerate(ops):
        if not fusible(o):
            cur = None
            continue
        k = (o.phase, _block(o.module))
        if cur is not None and k == key:
            cur.append(i)
        else:
            cur, key = [i], k
            groups.append(cur)
    return groups


def fuse_pointwise(wl):
    """``wl`` as a compiler runs it (module docstring): the same ops, FLOPs and memory footprint; the fused
    groups' bytes and launches. A workload without recorded data flow (read from an older file) is refused."""
    ops = wl.ops
    if ops and not any(o.src or o.outs for o in ops):
        raise ValueError("this workload has no recorded data flow (traced by an older traincast); trace it again "
                         "to fuse its kernels")
    consumers: dict[tuple[int, int], list[int]] = defaultdict(list)
    for j, o in enumerate(ops):
        for p, slot, _b, _off in o.src:
            if p >= 0:
                consumers[(p, slot)].append(j)
    new = list(ops)
    fused_ops = 0
    kernels = 0
    for g in fusion_groups(ops):
        if len(g) < 2:
            continue
        members = set(g)
        seen: set[tuple] = set()
        kernels += 1
        fused_ops += len(g)
        for pos, i in enumerate(g):
            o = ops[i]
            read = 0
            for p, slot, b, off in o.src:
                if p in members or (p, slot, off, b) in seen:
                    continue
                seen.add((p, slot, off, b))
                read += b
            written = 0
            for slot, (b, inplace) in enumerate(o.outs):
                cons = consumers.get((i, slot), ())
                if any(j not in members for j in cons) or (not cons and inplace):
                    written += b
            new[i] = replace(o, bytes_read=int(read), bytes_written=int(written), fusion=1 if pos == 0 else 2)
    return replace(wl, ops=tuple(new), kernels="compiled", fused_pointwise=(fused_ops, kernels))


def cudnn_attention(wl):
    """``wl`` with its half-precision fused attention ops run as cuDNN's fused attention kernel (same FLOPs and
    bytes; the roofline times them with the ``attention_cudnn`` efficiency)."""
    ops, moved = [], {}
    for o in wl.ops:
        to = CUDNN_ATTENTION.get(o.aten)
        if to is not None and o.dtype in HALF_DTYPES:
            moved[o.aten] = moved.get(o.aten, 0) + 1
            o = replace(o, aten=to)
        ops.append(o)
    counts = dict(wl.fused_kernels)
    for name, n in moved.items():  # the kernels the forecast's notes name
        take = min(n, counts.get(name, 0))
        counts[name] = counts.get(name, 0) - take
        counts[CUDNN_ATTENTION[name]] = counts.get(CUDNN_ATTENTION[name], 0) + take
    counts = {k: v for k, v in counts.items() if v}
    return replace(wl, ops=tuple(ops), fused_kernels=tuple(sorted(counts.items())))


def apply_kernels(wl, kernels: str = "eager"):
    """``wl`` run in kernel mode ``kernels`` (:data:`KERNEL_MODES`)."""
    check_kernels(kernels)
    if kernels == "eager":
        return wl
    fused = fuse_pointwise(wl)
    if kernels == "transformer-engine":
        return replace(cudnn_attention(fused), kernels=kernels)
    return fused
