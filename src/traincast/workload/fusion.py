"""Kernel fusion: the step as a compiler (``torch.compile``) or a fused-kernel framework runs it.

Modes (:data:`KERNEL_MODES`): ``eager``; ``compiled`` (the element-wise chains fused, below, the loss included);
``compiled-blocks`` (the same inside the repeated blocks only: ``torch.compile`` applied per transformer block,
the embedding, final norm, output layer and loss eager); ``transformer-engine`` (``compiled``, and the
half-precision fused attention run as cuDNN's kernel, which Transformer Engine's backend selection prefers over
FlashAttention on Hopper and later "for performance reasons", ``dot_product_attention/utils.py``).

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

**Saved activations** (:func:`partition_saved`): a compiler does not keep every tensor eager autograd saves.
AOTAutograd's min-cut partitioner (``torch._functorch.partitioners.min_cut_rematerialization_partition``, what
``torch.compile`` runs on a training graph) chooses the set of forward tensors of least bytes from which the
backward pass can recompute what it needs, recomputing only fusible ops and never a reduction
(``ban_recompute_reductions``) or a random op (a dropout mask). The same cut is taken here on each forward
group's data flow (networkx's ``minimum_cut``, the library the partitioner itself calls): saving a tensor costs
its bytes, a tensor already saved for another op or a parameter or input costs nothing, a reduction's output (an
output at most a quarter of its input: a norm's statistics, a loss's log-sum-exp) must be saved if anything after
it is needed. The
cross-entropy over a large vocabulary then keeps the half-precision logits instead of the FP32 log-softmax, and
a norm its input and statistics instead of its FP32 intermediates. ``memory.activation_bytes`` is net of what
is recomputed (``Workload.recomputed_bytes``), the largest working set (``memory.transient_bytes``) is twice
the largest tensor a fused kernel writes, and the groups' forward kernels no longer write what is recomputed.

What it does not model: the FLOPs and reads of that recomputation in the backward kernels (cheap element-wise
work, fused into them); fusion into the prologue or epilogue of a matrix multiplication (Inductor's max-autotune
templates, cuBLASLt epilogues); horizontal fusion of independent ops across a GEMM; CUDA graphs (the host still
issues each remaining kernel).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from traincast.errors import UnknownNameError
from traincast.workload.costs import base_name
from traincast.workload.fused import FUSED

KERNEL_MODES = {
    "eager": "every op its own kernel, as eager PyTorch runs it",
    "compiled": "element-wise, cast, norm and reduction chains between GEMMs fused into one kernel each, the loss "
                "included (torch.compile of the model and its loss, Megatron's fused kernels, XLA); attention as "
                "PyTorch's SDPA runs it",
    "compiled-blocks": "as compiled inside the repeated blocks only (torch.compile applied to each transformer "
                       "block, the embedding, final norm, output layer and loss left eager: torchtitan from "
                       "2024-12-19, its PR #755, until it compiled the loss again, PR #1033 of 2025-03-30)",
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


# fused kernels of PyTorch's own that a compiler decomposes and fuses with their neighbours: the cross-entropy's
# log-softmax and NLL (a loss compiled with the model: torchtitan's compile.components ["model", "loss"] since 2025,
# Megatron-Core's cross_entropy_loss_fusion, Hugging Face models compiled with their loss inside)
COMPILER_FUSES = frozenset({"cross-entropy"})


def fusible(op) -> bool:
    return (op.op_class in FUSIBLE_CLASSES and op.phase in ("forward", "backward") and op.n_tensors <= 1
            and base_name(op.aten) not in NOT_FUSIBLE
            and (op.aten not in FUSED or FUSED.get(op.aten).family in COMPILER_FUSES))


def fusion_groups(ops, blocks_only: bool = False) -> list[list[int]]:
    """Indices of the ops each fused kernel runs (groups of one op included); ``blocks_only``: inside the
    repeated blocks only (``compiled-blocks``)."""
    groups: list[list[int]] = []
    key = None
    cur: list[int] | None = None
    for i, o in enumerate(ops):
        if not fusible(o) or (blocks_only and not _block(o.module)):
            cur = None
            continue
        k = (o.phase, _block(o.module))
        if cur is not None and k == key:
            cur.append(i)
        else:
            cur, key = [i], k
            groups.append(cur)
    return groups


def fuse_pointwise(wl, blocks_only: bool = False):
    """``wl`` as a compiler runs it (module docstring): the same ops and FLOPs; the fused groups' bytes and
    launches, and the saved activations the partitioner keeps. ``blocks_only``: only inside the repeated blocks
    (``compiled-blocks``). A workload without recorded data flow (read from an older file) is refused."""
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
    groups = fusion_groups(ops, blocks_only)
    for g in groups:
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
    new, recomputed = partition_saved(new, ops, consumers, groups)
    written = max((o.bytes_written for o in new if o.phase != "optimizer"), default=0)
    memory = replace(wl.memory, activation_bytes=max(0, wl.memory.activation_bytes - recomputed),
                     transient_bytes=min(wl.memory.transient_bytes, 2 * written))
    return replace(wl, ops=tuple(new), kernels="compiled-blocks" if blocks_only else "compiled",
                   fused_pointwise=(fused_ops, kernels), memory=memory,
                   recomputed_bytes=recomputed)


def _reduces(op) -> bool:
    """Whether ``op`` reduces in the partitioner's sense (its outputs at most a quarter of what it reads: a mean,
    a norm's statistics, a loss), which the min-cut partitioner never recomputes."""
    out = sum(b for b, _ in op.outs)
    return op.op_class == "reduction" and 4 * out <= sum(b for _p, _s, b, _o in op.src)


_RANDOM = ("bernoulli", "dropout", "rand", "normal", "uniform", "multinomial", "exponential", "geometric")


def _random(op) -> bool:
    """Whether ``op`` draws random numbers (a dropout mask): the partitioner does not recompute those (its RNG
    state is not replayed unless ``functionalize_rng_ops`` is set)."""
    name = base_name(op.aten)
    return any(r in name for r in _RANDOM)


def partition_saved(new: list, ops, consumers, groups) -> tuple[list, int]:
    """The saved activations a compiler's partitioner keeps (module docstring): per forward fusion group, the
    minimum cut between what the forward makes and what the backward reads. Returns ``new`` (the fused ops) with
    the recomputed outputs no longer written by their forward kernels, and the bytes no longer saved."""
    import networkx as nx

    def backward_reads(key) -> bool:
        return any(ops[j].phase == "backward" for j in consumers.get(key, ()))

    saved = {key for key in consumers if backward_reads(key)}
    newly: set[tuple[int, int]] = set()  # tensors outside a group that a cut chose to save
    recomputed = 0
    for g in groups:
        if ops[g[0]].phase != "forward":
            continue
        members = set(g)
        needed = [(i, s) for i in g for s in range(len(ops[i].outs)) if (i, s) in saved]
        if not needed:
            continue
        graph = nx.DiGraph()
        graph.add_node("forward")
        for i in g:
            o = ops[i]
            pinned = _reduces(o) or _random(o)
            for s, (b, _inplace) in enumerate(o.outs):
                node = (i, s)
                graph.add_edge(("in", node), ("out", node), capacity=b)  # saving it costs its bytes
                if pinned:  # never recomputed: it runs in the forward pass
                    graph.add_edge("forward", ("in", node))
                if node in saved:
                    graph.add_edge(("out", node), "backward")
                for p, slot, b_in, _off in o.src:
                    src = (p, slot)
                    if p not in members:  # made outside the group: free if a leaf or kept anyway
                        free = p < 0 or src in saved or src in newly
                        graph.add_edge("forward", ("in", src))
                        graph.add_edge(("in", src), ("out", src), capacity=0 if free else b_in)
                    graph.add_edge(("out", src), ("in", node))
        cut, (reach, _rest) = nx.minimum_cut(graph, "forward", "backward")
        kept = {n[1] for n in reach if n[0] == "in" and ("out", n[1]) not in reach
                and graph.has_edge(n, ("out", n[1]))}
        before = sum(ops[i].outs[s][0] for i, s in needed)
        if cut >= before:
            continue  # saving what eager saves is as cheap
        recomputed += int(before - cut)
        newly.update(k for k in kept if k[0] not in members)
        for i, s in needed:
            if (i, s) in kept:
                continue
            b = ops[i].outs[s][0]
            if not any(j not in members and ops[j].phase != "backward" for j in consumers.get((i, s), ())):
                new[i] = replace(new[i], bytes_written=max(0, new[i].bytes_written - b))
    return new, recomputed


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


SDPA_CHOICES = {
    "auto": "as current PyTorch picks by GPU: cuDNN's fused attention on sm90/sm100/sm103 (Hopper, data-centre "
            "Blackwell) where its cuDNN is newer than 9.15 (CUDA 13 wheels; the CUDA 12 ones ship an older cuDNN), "
            "else flash / memory-efficient",
    "flash": "flash / memory-efficient on every GPU (PyTorch before it preferred cuDNN's, or "
             "TORCH_CUDNN_SDPA_DEPRIORITIZED=1)",
    "cudnn": "cuDNN's fused attention for half-precision inputs on every GPU (sdpa_kernel(SDPBackend.CUDNN_ATTENTION))",
}


def check_sdpa(sdpa: str) -> str:
    """``sdpa`` if it names a choice (:data:`SDPA_CHOICES`), else a one-line error naming the choices."""
    if sdpa not in SDPA_CHOICES:
        raise UnknownNameError("attention kernel choice (--sdpa)", str(sdpa), SDPA_CHOICES)
    return sdpa


def apply_sdpa(wl, sdpa: str = "auto"):
    """``wl`` with PyTorch's SDPA kernel choice ``sdpa`` (:data:`SDPA_CHOICES`): ``cudnn`` renames the half-precision
    fused attention ops to cuDNN's (as Transformer Engine's mode does); ``auto`` is resolved by GPU where the step is
    timed (``predict.roofline.compute_key``); Transformer Engine's mode runs cuDNN's whatever is asked."""
    check_sdpa(sdpa)
    if wl.kernels == "transformer-engine":
        return wl
    if sdpa == "cudnn":
        return replace(cudnn_attention(wl), sdpa=sdpa)
    return replace(wl, sdpa=sdpa)


def apply_kernels(wl, kernels: str = "eager"):
    """``wl`` run in kernel mode ``kernels`` (:data:`KERNEL_MODES`)."""
    check_kernels(kernels)
    if kernels == "eager":
        return wl
    fused = fuse_pointwise(wl, blocks_only=kernels == "compiled-blocks")
    if kernels == "transformer-engine":
        return replace(cudnn_attention(fused), kernels=kernels)
    return fused
