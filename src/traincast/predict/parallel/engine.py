"""One training step under a parallel layout: transform the traced ops, time them, insert the communication,
run the pipeline schedule, add the data-parallel synchronisation and the optimizer, and count the memory.

The mechanism (no per-model formulas):

1. **Split the ops** (:func:`shard_ops`). Under tensor parallelism ``t`` each op of the trace is transformed by its
   role (:mod:`.layout`): a column- or row-parallel GEMM gets 1/t of its FLOPs and its own shapes (the output
   or the contracted features divided), so any predictor times the real shard; ops on split heads or features
   get 1/t of their work; ops on the whole hidden state are unchanged, or get 1/t of the tokens with sequence
   parallelism. The ops are timed with the predictor given (the analytical one by default), one layer per
   distinct layer signature (identical layers are timed once).
2. **Insert the communication** each strategy implies and time it with the fitted topology-aware model
   (:mod:`traincast.predict.collectives`): per layer and micro-batch an all-reduce after each row-parallel layer
   (forward) and after each group of column-parallel layers (backward), or reduce-scatter / all-gather pairs with
   sequence parallelism (plus the all-gather of the saved input again in the backward pass); the vocabulary-
   parallel embedding's all-reduce; pipeline sends of each micro-batch's activations between stages; the
   data-parallel gradient all-reduce of each stage's shard in buckets overlapped with its last backward pass, or
   ZeRO's / FSDP's reduce-scatter and all-gather (parameters gathered unit by unit, prefetched one unit ahead of
   the compute); the mixture-of-experts all-to-all (dispatch and combine) with expert parallelism.
3. **Recompute**: selective recomputation re-runs the attention core's forward ops in the backward pass, full
   recomputation every layer's forward ops and its tensor-parallel communication, op-level selective
   checkpointing (torchtitan's policy) every forward op of a layer but the ones it keeps (every other matmul, the
   attention kernels, reduce-scatters), whose outputs stay in memory with the layer's input.
4. **Schedule**: the per-stage forward and backward times per micro-batch go through the pipeline schedule
   (:mod:`.schedule`: simulated per micro-batch, or its closed form in searches); without pipeline stages the
   micro-batches run one after another (gradient accumulation).
5. **What does not scale** (issue 18): the gradient synchronisation that finishes after the last backward,
   the optimizer step after it, the step's fixed host overhead, and the wait for the slowest of N GPUs
   (stragglers, ``parallel.yaml``).
6. **Memory per GPU**: the stage's parameters, gradients and optimizer states divided by the tensor degree and
   by the data-parallel degree where sharded (optimizer states off the GPU with offload), the activations of
   the micro-batches in flight on the stage (apportioned from the trace's saved bytes op by op, scaled by each
   op's split, dropped where recomputed), the largest transient, and the gathered parameters of ZeRO-3/FSDP;
   FSDP with one micro-batch a step holds the larger of its gradients and activations, not their sum (gradients
   set to None each step are made as the backward pass frees the activations).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace
from importlib import resources

from traincast import yamlio

from traincast.errors import ConfigError
from traincast.hardware.records import Cluster, Device
from traincast.predict.base import Predictor
from traincast.predict.comm import ddp_bucket_bytes
from traincast.predict.collectives import CollectiveParams, Group, collective_s, default_params
from traincast.predict.host import predict_with_host
from traincast.predict.parallel.layout import ModelLayout, analyse
from traincast.predict.parallel.schedule import PipelineResult, closed_form, simulate
from traincast.predict.parallel.strategy import ParallelConfig
from traincast.predict.roofline import ITEMSIZE
from traincast.workload.precision import get_precision
from traincast.workload.records import OpRecord, Workload


@functools.lru_cache(maxsize=1)
def parallel_table() -> dict:
    """``hardware/data/parallel.yaml``: stragglers, offload and pipeline constants with their sources."""
    return yamlio.safe_load(resources.files("traincast.hardware").joinpath("data", "parallel.yaml").read_text())


def expected_max_normal(n: int) -> float:
    """E[max of n standard normal draws] (0 for n = 1), by numerical integration."""
    if n <= 1:
        return 0.0
    from scipy import integrate, stats

    f = lambda x: x * n * stats.norm.pdf(x) * stats.norm.cdf(x) ** (n - 1)  # noqa: E731
    return float(integrate.quad(f, -10, 10, limit=200)[0])


@functools.lru_cache(maxsize=64)
def straggler_share(gpus: int) -> float:
    """How much longer a synchronous step over ``gpus`` GPUs takes than on a GPU of mean speed: the slowest GPU's
    expected shortfall, ``cv x E[max of N standard normals]`` (``parallel.yaml``)."""
    cv = float(parallel_table()["stragglers"]["gpu_speed_cv"])
    return cv * expected_max_normal(gpus)


# --- 1. split the ops ---------------------------------------------------------------------------------
def _numel(shape) -> int:
    return int(math.prod(shape)) if shape else 1


def _div(x: int, t: int) -> int:
    return max(1, x // t)


def _split_gemm_shapes(op: OpRecord, which: str, t: int):
    """Input and output shapes of a 2-D GEMM (mm / addmm) with ``which`` of (m, n, k) divided by ``t``."""
    ins = [list(s) for s in op.input_shapes]
    outs = [list(s) for s in op.output_shapes]
    if op.aten == "addmm" and len(ins) >= 3:
        bias, a, b = ins[0], ins[1], ins[2]
    elif len(ins) >= 2:
        bias, a, b = None, ins[0], ins[1]
    else:
        return None
    if len(a) != 2 or len(b) != 2 or not outs or len(outs[0]) != 2:
        return None
    out = outs[0]
    if which == "k":
        a[1] = _div(a[1], t)
        b[0] = _div(b[0], t)
    elif which == "m":
        a[0] = _div(a[0], t)
        out[0] = _div(out[0], t)
        if bias is not None and len(bias) == 2:
            bias[0] = _div(bias[0], t)
    elif which == "n":
        b[1] = _div(b[1], t)
        out[1] = _div(out[1], t)
        if bias is not None and bias:
            bias[-1] = _div(bias[-1], t)
    else:
        return None
    return tuple(tuple(s) for s in ins), tuple(tuple(s) for s in outs)


def _reshaped(o: OpRecord, ins: tuple, outs: tuple, flops: float) -> OpRecord:
    """``o`` with new input and output shapes (one rank's share), its bytes read and written scaled by the
    elements each side keeps, and ``flops``."""
    fr = sum(map(_numel, ins)) / max(1, sum(map(_numel, o.input_shapes)))
    fw = sum(map(_numel, outs)) / max(1, sum(map(_numel, o.output_shapes)))
    return replace(o, flops=int(flops), bytes_read=int(o.bytes_read * fr), bytes_written=int(o.bytes_written * fw),
                   input_shapes=ins, output_shapes=outs)


def _split_vocab(shape, t: int, vocab: int) -> tuple:
    """``shape`` with a vocabulary dimension (``vocab``) divided over ``t`` ranks (rounded up: Megatron pads the
    vocabulary to a multiple of the tensor degree); other shapes as they are."""
    return tuple(-(-d // t) if d == vocab else d for d in shape) if vocab in shape else tuple(shape)


def _split_shape(shape, t: int, feature: int | None = None, tokens: tuple = ()) -> tuple:
    """A tensor's shape with its split dimension divided: the heads dimension of a 4-D tensor, a dimension equal
    to ``feature``, else the last one that ``t`` divides; ``tokens``: sizes of a token dimension (sequence
    parallelism)."""
    s = list(shape)
    if not s:
        return tuple(s)
    if tokens:
        for i, d in enumerate(s):
            if d in tokens and d % t == 0:
                s[i] = d // t
                return tuple(s)
        return tuple(s)
    if feature:
        for i in range(len(s) - 1, -1, -1):
            if s[i] == feature and s[i] % t == 0:
                s[i] //= t
                return tuple(s)
    if len(s) == 4 and s[1] % t == 0 and s[1] >= t:
        s[1] //= t
        return tuple(s)
    for i in range(len(s) - 1, -1, -1):
        if s[i] % t == 0 and s[i] >= t:
            s[i] //= t
            return tuple(s)
    return tuple(s)


def op_factor(role: str, t: int, sp: bool, has_split: bool = True) -> float:
    """The share of an op's work one tensor-parallel rank does."""
    if t <= 1:
        return 1.0
    if role in ("col", "row", "sharded"):
        return 1.0 / t if has_split else (1.0 / t if sp else 1.0)
    if role == "replicated":
        return 1.0 / t if sp else 1.0
    return 1.0


def shard_ops(ops, layout: ModelLayout, t: int, sp: bool, indices=None, tokens: int | None = None) -> list[OpRecord]:
    """The ops (all, or those at ``indices``) as one tensor-parallel rank of ``t`` runs them."""
    idx = range(len(ops)) if indices is None else indices
    if t <= 1:
        return [ops[i] for i in idx]
    tok = tokens or layout.tokens
    token_sizes = tuple(x for x in {tok, layout.seq_len} if x)
    module_split: dict[str, int] = {}
    for i, r in enumerate(layout.roles):
        if r.split_size and ops[i].module not in module_split:
            module_split[ops[i].module] = r.split_size
    out = []
    for i in idx:
        o = ops[i]
        r = layout.roles[i]
        role = r.role
        if role in ("replicated", "none") and o.phase == "backward" and layout.vocab and \
                any(layout.vocab in sh and len(sh) == 2 for sh in o.output_shapes):
            # the vocabulary-parallel embedding's weight gradient (and its casts and the tied head's sum): each
            # rank makes the rows of its 1/t of the vocabulary (Megatron's VocabParallelEmbedding)
            v = layout.vocab
            outs = tuple(_split_vocab(sh, t, v) for sh in o.output_shapes)
            fw = sum(map(_numel, outs)) / max(1, sum(map(_numel, o.output_shapes)))
            out.append(_reshaped(o, tuple(_split_vocab(sh, t, v) for sh in o.input_shapes), outs, o.flops * fw))
            continue
        if role in ("optimizer", "none") or (role == "replicated" and not sp):
            out.append(o)
            continue
        if role in ("col", "row") and r.split and not o.input_shapes:  # interpolated: no shapes, the work split
            out.append(replace(o, flops=int(o.flops / t), bytes_read=int(o.bytes_read / t),
                               bytes_written=int(o.bytes_written / t)))
            continue
        if role in ("col", "row") and r.split and o.input_shapes:
            new = _split_gemm_shapes(o, r.split, t)
            if new is not None:
                out.append(_reshaped(o, *new, o.flops / t))
                continue
        if role in ("col", "row"):
            feat = module_split.get(o.module)
            has = r.carries_split
            f = op_factor(role, t, sp, has)
            if f == 1.0:
                out.append(o)
                continue
            split = (lambda s: _split_shape(s, t, feat)) if has else (lambda s: _split_shape(s, t, tokens=token_sizes))
        elif role == "sharded":
            f = 1.0 / t
            split = lambda s: _split_shape(s, t)  # noqa: E731
        else:  # replicated with sequence parallelism
            f = 1.0 / t
            split = lambda s: _split_shape(s, t, tokens=token_sizes)  # noqa: E731
        out.append(replace(o, flops=int(o.flops * f), bytes_read=int(o.bytes_read * f),
                           bytes_written=int(o.bytes_written * f),
                           input_shapes=tuple(split(s) for s in o.input_shapes),
                           output_shapes=tuple(split(s) for s in o.output_shapes)))
    return out


def has_token_dim(op: OpRecord, token_sizes) -> bool:
    """Whether one of the op's tensors has a token dimension (a size in ``token_sizes``)."""
    return op.phase != "optimizer" and any(d in token_sizes for s in (*op.input_shapes, *op.output_shapes) for d in s)


def cp_split_ops(ops, c: int, token_sizes, carries=None) -> list[OpRecord]:
    """The ops as one of ``c`` context-parallel ranks runs them: every op over a token dimension (``token_sizes``;
    or where ``carries`` says so, for interpolated ops without shapes) gets 1/c of its work and its token
    dimension divided (the attention core too: with causal load balancing each rank computes 1/c of the causal
    score matrix; Ulysses: the whole sequence on 1/c of the heads); ops without a token dimension (weight casts,
    optimizer) stay whole."""
    if c <= 1:
        return list(ops)
    sizes = tuple(x for x in token_sizes if x and x % c == 0)
    out = []
    for k, o in enumerate(ops):
        tok = carries[k] if carries is not None else has_token_dim(o, sizes)
        if not tok:
            out.append(o)
            continue
        out.append(replace(o, flops=int(o.flops / c), bytes_read=int(o.bytes_read / c),
                           bytes_written=int(o.bytes_written / c),
                           input_shapes=tuple(_split_shape(x, c, tokens=sizes) for x in o.input_shapes),
                           output_shapes=tuple(_split_shape(x, c, tokens=sizes) for x in o.output_shapes)))
    return out


RING_ATENS = ("ring_attention_merge", "ring_attention_grad_accumulate")


def ring_attention_bytes(q_elems: float, kv_elems: float, c: int, item: float) -> tuple[float, float, float, float]:
    """Bytes PyTorch's ring attention moves beside its flash calls, on one of ``c`` ranks, per attention call:
    (forward read, forward written, backward read, backward written). ``q_elems``: the rank's query (and output)
    elements, ``kv_elems``: its key (= value) elements as the attention op receives them, ``item``: their bytes.

    The source (``torch/distributed/tensor/experimental/_attention.py``, what torchtitan runs: ``convert_to_f32``,
    load balancing), averaged over the ranks (with load balancing a rank's steps 1..c-1 are half "i <= rank"
    blocks, all queries against the first half of the keys, and half "i > rank" blocks, the second half of the
    queries against all keys, whose output is merged into one half of the FP32 output with a ``torch.cat``):

    - forward: ``torch.cat`` of K and V into the send buffer at every step but the last; each block's output cast
      to FP32 (``_SDPAMerger.step``); from step 1 the merge ``out - sigmoid(lse_b - lse) * (out - out_b)`` (three
      FP32 passes: a subtraction, a broadcast multiply, a subtraction; the log-sum-exp updates are 1/D of that) and,
      for a half-query block, the ``torch.cat`` that puts the half back; the result cast back;
    - backward: FP32 zeros for dQ, dK, dV; the same K/V ``torch.cat`` per step; every step's dK, dV (and dQ) added
      into the FP32 accumulators (a half-key block through a ``torch.cat`` of the whole accumulator, a half-query
      block's dQ likewise); the ``torch.cat`` of dK and dV sent to the next rank at every step; dQ and the last
      received dK, dV cast back.

    Measured on an H200 (benchmarks/cp_ring_bench.py, docs/parallel.md): the whole pass less its flash kernels
    moved these bytes at 2.9-3.2 TB/s for c = 2-8 and 8K-32K tokens a rank; nothing was fitted."""
    e, k, a = float(q_elems), float(kv_elems), float(item)
    s = max(0, c - 1)
    # forward: (read, write) per pass
    f_r = s * 2 * k * a + e * a + s * (0.5 * (e * a + 20 * e) + 0.5 * (0.5 * e * a + 10 * e + 4 * e)) + 4 * e
    f_w = s * 2 * k * a + 4 * e + s * (0.5 * (4 * e + 12 * e) + 0.5 * (2 * e + 6 * e + 4 * e)) + e * a
    # backward
    half_kv_r = 2 * (0.5 * k * (4 + a) + 4 * k) + e * (4 + a)
    half_kv_w = 2 * (0.5 * k * 4 + 4 * k) + 4 * e
    half_q_r = 2 * k * (4 + a) + 0.5 * e * (4 + a) + 4 * e
    half_q_w = 2 * k * 4 + 0.5 * e * 4 + 4 * e
    b_r = (s * 2 * k * a + 2 * k * (4 + a) + e * (4 + a) + s * 0.5 * (half_kv_r + half_q_r) + c * 8 * k
           + 4 * e + 8 * k)
    b_w = (4 * e + 8 * k + s * 2 * k * a + 2 * k * 4 + 4 * e + s * 0.5 * (half_kv_w + half_q_w) + c * 8 * k
           + e * a + 2 * k * a)
    return f_r, f_w, b_r, b_w


def _query_key_elems(o) -> tuple[float, float] | None:
    """The query and key elements of a fused attention op (forward: q, k, ...; backward: dout, q, k, ...)."""
    back = o.phase == "backward"
    if len(o.input_shapes) < (3 if back else 2):
        return None
    q, k = (o.input_shapes[1], o.input_shapes[2]) if back else o.input_shapes[:2]
    return float(_numel(q)), float(_numel(k))


def with_ring_work(ops, c: int, idx, anchor_ops=None, kv_repeat: bool = False) -> tuple[list[OpRecord], list[int]]:
    """``ops`` (one context-parallel rank's, :func:`cp_split_ops`) with the ring's own element-wise work after each
    fused attention op (:func:`ring_attention_bytes`, from the op's query and key shapes), one op a step as the
    kernels it stands for run (c steps a pass); ``idx`` (the original op index of each) extended alike.
    ``anchor_ops``: the traced anchor's ops (whole sequence), for interpolated ops without shapes: their elements
    scaled by the op's bytes over the anchor op's. ``kv_repeat``: the model repeats K/V to the query heads before
    SDPA (torchtitan's Llama), so the ring's K/V have the query's elements (self-attention, equal head dims)."""
    out, out_idx = [], []
    for o, i in zip(ops, idx):
        out.append(o)
        out_idx.append(i)
        if o.op_class != "attention" or o.phase not in ("forward", "backward"):
            continue
        qk = _query_key_elems(o)
        if qk is None and anchor_ops is not None and i < len(anchor_ops):
            a = anchor_ops[i]
            qk_a = _query_key_elems(a)
            if qk_a is not None and a.bytes_total > 0:
                s = o.bytes_total / a.bytes_total
                qk = (qk_a[0] * s, qk_a[1] * s)
        if qk is None:
            continue
        if kv_repeat:
            qk = (qk[0], max(qk[1], qk[0]))
        back = o.phase == "backward"
        item = ITEMSIZE.get(o.dtype, 2)
        f_r, f_w, b_r, b_w = ring_attention_bytes(qk[0], qk[1], c, item)
        r, w = (b_r, b_w) if back else (f_r, f_w)
        aten = RING_ATENS[1] if back else RING_ATENS[0]
        for _ in range(c):
            out.append(replace(o, aten=aten, op_class="elementwise", flops=0, bytes_read=int(r / c),
                               bytes_written=int(w / c), dtype="fp32", n_tensors=1, src=(), outs=(), fusion=0))
            out_idx.append(i)
    return out, out_idx


def ring_exchange_s(coll, kv_bytes: float, c: int, step_f: float, step_b: float, groups: dict, *,
                    pytorch: bool = True, rotate: str = "allgather", item: float = 2.0
                    ) -> tuple[float, float, float, float]:
    """Seconds of one ring attention call's K/V exchange on one of ``c`` ranks: (forward moved, backward moved,
    forward exposed, backward exposed). ``kv_bytes``: the rank's K and V as the ring moves them (``item`` bytes a value); ``step_f``,
    ``step_b``: one step's attention (1/c of the rank's); ``coll(kind, bytes, group)``: the collective model;
    ``groups``: the layout's (``context``: the c ranks, ``context-ring``: one hop).

    PyTorch's ring (``pytorch``; torch/distributed/tensor/experimental/_attention.py, what torchtitan runs):
    - ``allgather`` (``_cp_options.rotate_method``'s default, 2024 to now): the forward all-gathers the c ranks'
      K/V once, issued before step 0's attention and waited for at step 1, so only step 0 hides it; the backward
      does the same for K/V;
    - ``alltoall``: each step's K/V goes to the next rank under that step's attention, c - 1 sends a pass;
    - backward, either way: dK/dV go round by all-to-all (``dkv_rotater``) in FP32 (``convert_to_f32``'s
      accumulators: 4 bytes a value, ``kv_bytes`` x 4 / ``item``), c sends, each waited for after the next step's
      attention, the last after the loop with nothing left to hide under; with ``alltoall`` a step's K/V send and
      the previous step's dK/dV share that step's window.
    Transformer Engine's P2P ring (not ``pytorch``): K/V to the next rank every step (c - 1 a pass) under that
    step's attention, the backward K/V and dK/dV likewise (BF16)."""
    ring = groups["context-ring"]
    if not pytorch:
        send_f = coll("send-recv", kv_bytes, ring)
        send_b = coll("send-recv", 2 * kv_bytes, ring)
        return ((c - 1) * send_f, (c - 1) * send_b, (c - 1) * max(0.0, send_f - step_f),
                (c - 1) * max(0.0, send_b - step_b))
    dkv = coll("send-recv", kv_bytes * 4.0 / item, ring)  # FP32 dK/dV
    if rotate == "allgather":
        ag = coll("all-gather", c * kv_bytes, groups["context"])
        fwd_t, fwd_e = ag, max(0.0, ag - step_f)
        bwd_t = ag + c * dkv
        bwd_e = max(0.0, ag - step_b) + (c - 1) * max(0.0, dkv - step_b) + dkv
    else:
        kv = coll("send-recv", kv_bytes, ring)
        fwd_t, fwd_e = (c - 1) * kv, (c - 1) * max(0.0, kv - step_f)
        bwd_t = (c - 1) * kv + c * dkv
        # step 0: K/V for step 1; steps 1..c-2: K/V and the previous dK/dV; step c-1: dK/dV; then the last dK/dV
        bwd_e = (max(0.0, kv - step_b) + (c - 2) * max(0.0, kv + dkv - step_b) + max(0.0, dkv - step_b) + dkv)
    return fwd_t, bwd_t, fwd_e, bwd_e


FP8_CAST_ATENS = ("fp8_cast_transpose", "fp8_amax")


# --- per-unit costs at one (t, sequence parallel, micro-batch) ---------------------------------------------------
@dataclass(frozen=True)
class UnitCosts:
    """Per unit (pre, layers..., post), per micro-batch, for one tensor-parallel rank."""

    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    core_forward_s: tuple[float, ...]  # attention-core forward (selective recomputation)
    activation_bytes: tuple[float, ...]  # saved for backward, no recomputation
    core_activation_bytes: tuple[float, ...]
    transient_bytes: tuple[float, ...]  # the largest op output, x2 (as the trace counts it)
    step_overhead_s: float
    predictor: str
    forward_flops: tuple[float, ...] = ()  # per unit, one tensor rank, per micro-batch
    backward_flops: tuple[float, ...] = ()
    core_forward_flops: tuple[float, ...] = ()
    attention_forward_s: tuple[float, ...] = ()  # the attention kernels alone (what ring attention overlaps)
    attention_backward_s: tuple[float, ...] = ()
    fp8_gemm_s: tuple[float, ...] = ()  # forward + backward, FP8 GEMMs
    fp8_cast_s: tuple[float, ...] = ()  # forward + backward, FP8 casts, transposes and amax passes
    tp_gemm_forward_s: tuple[float, ...] = ()  # the column- and row-parallel GEMMs (what --tp-comm-overlap hides under)
    tp_gemm_backward_s: tuple[float, ...] = ()
    # op-level selective checkpointing: forward time and FLOPs of the ops it keeps (the rest is recomputed), and
    # the bytes of their outputs it keeps
    saved_forward_s: tuple[float, ...] = ()
    saved_forward_flops: tuple[float, ...] = ()
    saved_activation_bytes: tuple[float, ...] = ()


class ParallelModel:
    """Forecasts of one model configuration under any layout on one cluster: trace once (and at a second
    micro-batch to interpolate the others), transform per layout, cache the per-unit costs."""

    def __init__(self, family, device: Device, cluster: Cluster, predictor: Predictor, precision: str = "fp32",
                 collectives: CollectiveParams | None = None, exact_traces: bool = False):
        self.family = family
        self.device = device
        self.cluster = cluster
        self.predictor = predictor
        self.precision = precision
        self.collectives = collectives or default_params()
        self.exact = exact_traces or predictor.needs_shapes_on(device)
        self._costs: dict = {}
        self._opt: dict = {}
        self._base: Workload | None = None
        self._layout: ModelLayout | None = None

    def with_cluster(self, cluster: Cluster) -> "ParallelModel":
        """The same model on another cluster of the same device (the traces and per-layer costs are shared)."""
        import copy

        other = copy.copy(self)
        other.cluster = cluster
        return other

    # --- workloads ---------------------------------------------------------------------------------------------
    def workload(self, mb: int) -> Workload:
        return self.family.trace(mb) if self.exact else self.family.at(mb)

    def inputs(self, mb: int) -> tuple[Workload, ModelLayout]:
        """The workload at micro-batch ``mb`` and the layout of its ops (found on the trace its ops align with)."""
        self.base(mb)
        wl = self.workload(mb)
        anchor = self.family.anchor_of(wl) if hasattr(self.family, "anchor_of") else wl
        return wl, analyse(anchor)

    def base(self, mb: int | None = None) -> tuple[Workload, ModelLayout]:
        """A reference trace and its layout: the first traced (at ``mb``, or at 2 when interpolating: traces at
        batch 1 can lack an op that larger ones have)."""
        if self._base is None:
            first = mb if mb is not None else (1 if self.exact else 2)
            if not self.exact:
                first = max(2, first)
            self._base = self.family.trace(first)
            self._layout = analyse(self._base)
        return self._base, self._layout

    @property
    def layout(self) -> ModelLayout:
        return self.base()[1]

    # --- costs -----------------------------------------------------------------------------------------------
    def unit_costs(self, t: int, sp: bool, mb: int, c: int = 1, ring: bool = False,
                   kv_repeat: bool = False) -> UnitCosts:
        """``ring``: context parallelism by ring attention, whose merges and FP32 accumulators run beside the
        attention kernels (:func:`with_ring_work`; not under Transformer Engine's kernels, which have their own);
        ``kv_repeat``: its K/V at the query heads (the model repeats them before SDPA)."""
        kv_repeat = bool(kv_repeat and ring and c > 1)
        key = (t, sp, mb, c, ring, kv_repeat)
        if key in self._costs:
            return self._costs[key]
        wl, lay = self.inputs(mb)
        tokens = lay.tokens * mb // lay.batch
        units = lay.units
        n_units = len(units)
        # group identical units (layers) by the signature of their ops, time one of each
        members: dict[int, list[int]] = {u: [] for u in range(n_units)}
        for i, r in enumerate(lay.roles):
            if wl.ops[i].phase != "optimizer":
                members[r.unit].append(i)
        sig = {}
        rep_of = {}
        for u in range(n_units):
            s = (units[u] in ("pre", "post"), tuple((wl.ops[i].aten, wl.ops[i].phase, wl.ops[i].flops,
                                                     wl.ops[i].bytes_total) for i in members[u]))
            if wl.recurrent_calls:
                s = (u, s)
            rep_of[u] = sig.setdefault(s, u)
        reps = sorted(set(rep_of.values()))
        idx = [i for u in reps for i in members[u]]
        new_ops = shard_ops(wl.ops, lay, t, sp, idx, tokens)
        if c > 1:  # context parallelism: every rank 1/c of the tokens (after the tensor split)
            # which ops carry tokens: read on the traced anchor (interpolated ops have no shapes)
            anchor = self.family.anchor_of(wl) if hasattr(self.family, "anchor_of") else wl
            anchor_tokens = tuple(x for x in (lay.tokens, lay.seq_len) if x)
            carries = [has_token_dim(anchor.ops[i], anchor_tokens) for i in idx] if len(anchor.ops) == len(wl.ops) \
                else None
            new_ops = cp_split_ops(new_ops, c, {tokens, lay.seq_len, tokens // t if sp and t > 1 else 0}, carries)
            if ring and wl.kernels != "transformer-engine":
                new_ops, idx = with_ring_work(new_ops, c, idx, anchor.ops if len(anchor.ops) == len(wl.ops) else None,
                                              kv_repeat=kv_repeat)
        calls = wl.recurrent_calls if t == 1 else ()
        sub = replace(wl, ops=tuple(new_ops), recurrent_calls=calls)
        ot = predict_with_host(self.predictor, sub, self.device, self.precision, by_phase=True)
        fwd = dict.fromkeys(reps, 0.0)
        bwd = dict.fromkeys(reps, 0.0)
        core = dict.fromkeys(reps, 0.0)
        trans = dict.fromkeys(reps, 0.0)
        ffl = dict.fromkeys(reps, 0.0)
        bfl = dict.fromkeys(reps, 0.0)
        cfl = dict.fromkeys(reps, 0.0)
        af = dict.fromkeys(reps, 0.0)
        ab = dict.fromkeys(reps, 0.0)
        f8g = dict.fromkeys(reps, 0.0)
        f8c = dict.fromkeys(reps, 0.0)
        gf = dict.fromkeys(reps, 0.0)
        gb = dict.fromkeys(reps, 0.0)
        svs = dict.fromkeys(reps, 0.0)
        svf = dict.fromkeys(reps, 0.0)
        for i, o, s in zip(idx, new_ops, ot.times_s):
            u = lay.roles[i].unit
            if o.op_class == "attention":
                (af if o.phase == "forward" else ab)[u] += s
            if o.op_class == "matmul" and lay.roles[i].role in ("col", "row"):
                (gf if o.phase == "forward" else gb)[u] += s
            if o.dtype == "fp8" and o.op_class == "matmul":
                f8g[u] += s
            elif o.aten in FP8_CAST_ATENS:
                f8c[u] += s
            if o.phase == "forward":
                fwd[u] += s
                ffl[u] += o.flops
                if lay.roles[i].attention_core:
                    core[u] += s
                    cfl[u] += o.flops
                if lay.roles[i].op_saved:
                    svs[u] += s
                    svf[u] += o.flops
            else:
                bwd[u] += s
                bfl[u] += o.flops
            trans[u] = max(trans[u], 2.0 * o.bytes_written)
        # the trace's saved bytes less the weight copies autocast keeps (those are counted once per step). A
        # compiler saves none of them: its partitioner recomputes each cast from its parameter, which is kept
        # anyway (workload/fusion.py), so a compiled trace's saved bytes hold no weight copy to take out
        copies = sum(lay.weight_copy_bytes) if wl.kernels == "eager" else 0
        act_total = max(0.0, float(wl.memory.activation_bytes) - copies)
        act = [0.0] * n_units
        core_act = [0.0] * n_units
        saved_act = [0.0] * n_units
        for i, r in enumerate(lay.roles):
            sh = lay.act_share[i]
            if sh <= 0:
                continue
            f = op_factor(r.role, t, sp)
            if r.role in ("col", "row") and not r.split:
                f = op_factor(r.role, t, sp, False)
            a = act_total * sh * f / c
            act[r.unit] += a
            if r.attention_core:
                core_act[r.unit] += a
            if r.op_saved and lay.saved_bytes:  # kept whole, at this micro-batch
                saved_act[r.unit] += lay.saved_bytes[i] * mb / lay.batch * f / c
        uc = UnitCosts(
            forward_s=tuple(fwd[rep_of[u]] for u in range(n_units)),
            backward_s=tuple(bwd[rep_of[u]] for u in range(n_units)),
            core_forward_s=tuple(core[rep_of[u]] for u in range(n_units)),
            activation_bytes=tuple(act), core_activation_bytes=tuple(core_act),
            transient_bytes=tuple(trans[rep_of[u]] for u in range(n_units)),
            step_overhead_s=ot.step_overhead_s, predictor=ot.predictor,
            forward_flops=tuple(ffl[rep_of[u]] for u in range(n_units)),
            backward_flops=tuple(bfl[rep_of[u]] for u in range(n_units)),
            core_forward_flops=tuple(cfl[rep_of[u]] for u in range(n_units)),
            attention_forward_s=tuple(af[rep_of[u]] for u in range(n_units)),
            attention_backward_s=tuple(ab[rep_of[u]] for u in range(n_units)),
            fp8_gemm_s=tuple(f8g[rep_of[u]] for u in range(n_units)),
            fp8_cast_s=tuple(f8c[rep_of[u]] for u in range(n_units)),
            tp_gemm_forward_s=tuple(gf[rep_of[u]] for u in range(n_units)),
            tp_gemm_backward_s=tuple(gb[rep_of[u]] for u in range(n_units)),
            saved_forward_s=tuple(svs[rep_of[u]] for u in range(n_units)),
            saved_forward_flops=tuple(svf[rep_of[u]] for u in range(n_units)),
            saved_activation_bytes=tuple(saved_act))
        self._costs[key] = uc
        return uc

    def optimizer_s(self, share: float, tensors_share: float, device: Device | None = None) -> float:
        """The optimizer step over ``share`` of the parameters (``tensors_share`` of the tensors), on ``device``
        (this model's GPU by default; the host CPU for optimizer offload)."""
        device = device or self.device
        key = (round(share, 9), round(tensors_share, 6), device.name)
        if key in self._opt:
            return self._opt[key]
        base, _ = self.base()
        ops = [o for o in base.ops if o.phase == "optimizer"]
        if not ops or share <= 0:
            return 0.0
        scaled = [replace(o, flops=int(o.flops * share), bytes_read=int(o.bytes_read * share),
                          bytes_written=int(o.bytes_written * share),
                          n_tensors=max(1, int(round(o.n_tensors * tensors_share)))) for o in ops]
        prec = self.precision if device.kind == "gpu" else "fp32"
        ot = self.predictor.predict(replace(base, ops=tuple(scaled), recurrent_calls=()), device, prec)
        self._opt[key] = float(sum(ot.times_s))
        return self._opt[key]

    # --- groups ----------------------------------------------------------------------------------------------
    def _group(self, ranks: int, ranks_per_node: int) -> Group:
        return Group.of_cluster(self.cluster, ranks, ranks_per_node)

    def groups(self, cfg: ParallelConfig) -> dict[str, Group]:
        """Where each degree's ranks sit: tensor ranks innermost (consecutive GPUs), then data, then pipeline
        (Megatron-LM's order)."""
        g = self.cluster.gpus_per_node
        tp_rpn = min(cfg.tp, g)
        inner = cfg.tp * cfg.cp  # tensor, then context ranks innermost: inside the node / NVLink domain first
        cp_rpn = max(1, min(cfg.cp, g // cfg.tp)) if cfg.tp < g else 1
        # gradients are reduced (and states sharded) over the data x context ranks (Megatron-LM, torchtitan)
        dcp = cfg.dp * cfg.cp
        dp_rpn = max(1, min(dcp, g // cfg.tp)) if cfg.tp < g else 1
        ep_rpn = max(1, min(cfg.ep, g // inner)) if inner < g else 1
        pp_same_node = inner * cfg.dp < g
        shard = dcp
        if cfg.sharding_spec.within_node:
            shard = max(1, min(dcp, g // cfg.tp)) if cfg.tp < g else 1
        return {
            "tensor": self._group(cfg.tp, tp_rpn),
            "context": self._group(cfg.cp, cp_rpn),
            # one hop of the ring: inside the node while the tensor x context ranks fit it
            "context-ring": self._group(2, 2 if inner <= g else 1),
            "data": self._group(dcp, dp_rpn),
            "shard": self._group(shard, min(shard, dp_rpn)),
            "replica": self._group(max(1, dcp // shard), 1),
            "expert": self._group(cfg.ep, ep_rpn),
            "pipeline": self._group(2, 2 if pp_same_node else 1),
        }

    # --- the step ------------------------------------------------------------------------------------------
    def evaluate(self, cfg: ParallelConfig, per_replica_batch: int, simulate_pipeline: bool = True) -> "ParallelStep":
        return evaluate(self, cfg, per_replica_batch, simulate_pipeline)


@dataclass(frozen=True)
class StageInfo:
    stage: int
    units: tuple[str, ...]  # first and last unit names
    layers: int
    forward_s: float  # per micro-batch, compute + exposed tensor-parallel communication (all chunks of the GPU)
    backward_s: float  # per micro-batch, with recomputation
    recompute_s: float
    tensor_comm_s: float  # per micro-batch, forward + backward
    parameters: int  # per GPU (after tensor split, before data-parallel sharding)
    memory_bytes: int
    in_flight: int


@dataclass(frozen=True)
class ParallelStep:
    """One training step of one layout: time, communication, memory."""

    config: ParallelConfig
    micro_batch: int
    micro_batches: int
    per_replica_batch: int
    iteration_s: float
    pipeline_s: float
    bubble_share: float
    forward_s: float  # the busiest GPU's forward compute per step
    backward_s: float  # ... backward compute (with recomputation)
    recompute_s: float
    optimizer_s: float
    overhead_s: float
    straggler_s: float
    communication_exposed_s: float
    communication_total_s: float
    comm_exposed_by_kind: dict
    comm_total_by_kind: dict
    stages: tuple[StageInfo, ...]
    memory: dict  # per GPU on the fullest stage: parameters, gradients, optimizer, activations, transient, buffers, peak
    peak_memory_bytes: int
    memory_capacity_bytes: int
    fits_in_memory: bool
    max_micro_batch: int
    predictor: str
    pipeline_method: str  # simulated | closed form
    notes: tuple[str, ...] = ()
    flops_per_gpu: float = 0.0  # FLOPs one GPU of the busiest stage executes per step (recomputation included)
    flops_per_replica: float = 0.0  # FLOPs all GPUs of one data-parallel replica execute per step
    fp8_gemm_s: float = 0.0  # the busiest GPU's FP8 GEMMs per step (forward, backward)
    fp8_cast_s: float = 0.0  # ... FP8 casts, transposes and amax passes per step (the amax-history update is in
    # the optimizer's time)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["config"] = self.config.to_dict()
        d["stages"] = [asdict(s) for s in self.stages]
        return d


def _layers_per_chunk(lay: ModelLayout, cfg: ParallelConfig) -> list[int]:
    """The layers of each pipeline chunk (stage, or virtual stage in order). Where they do not divide evenly, the
    middle chunks take one layer more than the first and last, which also hold the embedding and the output
    layer and loss (DeepSpeed's ``type:transformer|embedding`` partition; BLOOM's 70 layers on 12 stages: 5, 6 x
    10, 5); where more are left, the first and last take theirs too."""
    chunks = cfg.pp * cfg.virtual_stages
    L = lay.layers
    if L == 0:
        if chunks > 1:
            raise ConfigError("pipeline stages need a model made of layers; this model has no repeated blocks")
        return [0]
    if chunks > L:
        raise ConfigError(f"--pp {cfg.pp}" + (f" x {cfg.virtual_stages} virtual stages" if cfg.virtual_stages > 1 else "")
                          + f" = {chunks} pipeline chunks is more than the model's {L} layers")
    base, extra = divmod(L, chunks)
    sizes = [base] * chunks
    for c in (list(range(1, chunks - 1)) + [0, chunks - 1])[:extra]:
        sizes[c] += 1
    return sizes


def check_against_model(lay: ModelLayout, cfg: ParallelConfig, model_name: str = "the model") -> None:
    """Degrees the model cannot take: tensor degree vs heads and split features, pipeline vs layers, context
    degree vs the sequence, its attention and (Ulysses) the heads."""
    t = cfg.tp
    c = cfg.cp
    if c > 1:
        spec = cfg.cp_spec
        if not lay.heads:
            raise ConfigError(f"--cp {c}: {model_name} has no attention over a token sequence to split (context "
                              "parallelism splits the sequence of a transformer's attention)")
        if not any(lay.attention_ops):
            raise ConfigError(f"--cp {c}: {model_name}'s attention is not one fused kernel (explicit scores, mask "
                              "and softmax); ring and all-to-all context parallelism need flash/fused attention")
        if not lay.seq_len:
            raise ConfigError(f"--cp {c}: the sequence length of {model_name} is unknown; give --seq-len")
        parts = c * spec.chunks_per_rank
        if lay.seq_len % parts:
            what = f"2 x --cp {c} = {parts} chunks (causal load balancing)" if spec.chunks_per_rank == 2 else \
                f"--cp {c}"
            raise ConfigError(f"--cp {c}: the sequence length {lay.seq_len} does not divide into {what}")
        if spec.heads_split:
            if (lay.heads // max(1, t)) % c:
                raise ConfigError(f"--cp {c} --cp-kind all-to-all: the {lay.heads} attention heads"
                                  + (f" / --tp {t}" if t > 1 else "") + f" do not divide over {c} ranks (Ulysses "
                                  "splits the heads; use --cp-kind ring)")
    if t > 1:
        if not lay.tp_capable:
            raise ConfigError(f"--tp {t}: this model has no linear layers to split inside its layers "
                              "(tensor parallelism splits attention and MLP blocks)")
        if lay.heads and lay.heads % t:
            raise ConfigError(f"--tp {t} does not divide the model's {lay.heads} attention heads")
        if lay.kv_heads and lay.kv_heads % t:
            raise ConfigError(f"--tp {t} does not divide the model's {lay.kv_heads} key/value heads")
        for u, w in enumerate(lay.tp_width):
            if w and w % t and lay.units[u] != "post":
                raise ConfigError(f"--tp {t} does not divide the split features ({w}) of {lay.units[u]}")
    if cfg.ep > 1 and lay.moe_layers == 0:
        raise ConfigError(f"--ep {cfg.ep}: the model has no experts (expert parallelism needs a mixture of experts)")
    if cfg.ep > 1 and lay.experts and lay.experts % cfg.ep:
        raise ConfigError(f"--ep {cfg.ep} does not divide {model_name}'s {lay.experts} experts per layer")
    _layers_per_chunk(lay, cfg)


def evaluate(model: ParallelModel, cfg: ParallelConfig, per_replica_batch: int,
             simulate_pipeline: bool = True) -> ParallelStep:
    """The step of ``cfg`` with ``per_replica_batch`` samples per data-parallel replica."""
    mb = cfg.micro_batch or (1 if cfg.pp > 1 else per_replica_batch)  # pipelines need micro-batches
    if per_replica_batch % mb:
        raise ConfigError(f"--micro-batch {mb} does not divide the {per_replica_batch} samples per data-parallel "
                          "replica")
    m = per_replica_batch // mb
    base, _ = model.base(mb)
    _, lay = model.inputs(mb)
    check_against_model(lay, cfg, base.model)
    t, p, v, sp = cfg.tp, cfg.pp, cfg.virtual_stages, cfg.sequence_parallel
    if cfg.schedule_spec.interleaved and m % p:
        raise ConfigError(f"the interleaved schedule needs the micro-batches per step ({m}) to be a multiple of "
                          f"--pp {p}")
    ncp = cfg.cp
    uc = model.unit_costs(t, sp, mb, ncp, ring=ncp > 1 and cfg.cp_spec.ring, kv_repeat=cfg.kv_repeat)
    groups = model.groups(cfg)
    cp = model.collectives
    notes: list[str] = []
    n_units = len(lay.units)
    sizes = _layers_per_chunk(lay, cfg)
    chunks = p * v
    # units of each virtual stage: pre with the first, post with the last
    chunk_units: list[list[int]] = []
    for c in range(chunks):
        first = 1 + sum(sizes[:c])
        us = list(range(first, first + sizes[c])) if lay.layers else []
        if c == 0:
            us = [0] + us
        if c == chunks - 1:
            us = us + [n_units - 1]
        chunk_units.append(us)
    if lay.layers == 0:
        chunk_units = [list(range(n_units))]

    # tensor-parallel communication per unit per micro-batch
    prec = get_precision(base.precision)
    item = 2 if prec.autocast or prec.params else 4  # activations in half under autocast and in a half model
    tokens = lay.tokens * mb // lay.batch
    hid = lay.hidden or 0
    msg = tokens * hid * item / ncp  # one rank's hidden states: 1/cp of the tokens with context parallelism
    tg = groups["tensor"]

    def coll(kind, size, group):
        return collective_s(kind, size, group, cp)

    ar = coll("all-reduce", msg, tg) if t > 1 else 0.0
    ag = coll("all-gather", msg, tg) if t > 1 else 0.0
    rs = coll("reduce-scatter", msg, tg) if t > 1 else 0.0
    tp_f, tp_b = [0.0] * n_units, [0.0] * n_units
    if t > 1:
        for u in range(n_units):
            rows, cols = lay.row_linears[u], lay.col_groups[u]
            if sp:
                tp_f[u] = cols * ag + rows * rs
                tp_b[u] = cols * rs + rows * ag + cols * ag  # the saved input gathered again for the weight gradient
            else:
                tp_f[u] = rows * ar
                tp_b[u] = cols * ar
        if lay.vocab:  # the vocabulary-parallel embedding's output
            tp_f[0] += rs if sp else ar
    tp_f_total, tp_b_total = list(tp_f), list(tp_b)
    if t > 1 and cfg.tp_comm_overlap:
        # Transformer Engine's userbuffers split each all-gather / reduce-scatter into t chunks, each under the
        # GEMM of the chunk before it: the first chunk is exposed, and whatever the GEMMs cannot cover
        for u in range(n_units):
            for tot, gemm in ((tp_f, uc.tp_gemm_forward_s[u]), (tp_b, uc.tp_gemm_backward_s[u])):
                c_u = tot[u]
                tot[u] = c_u / t + max(0.0, c_u * (t - 1) / t - gemm)
    # context parallelism, per attention call and micro-batch (one tensor rank's heads)
    cp_f_tot, cp_b_tot = [0.0] * n_units, [0.0] * n_units
    cp_f_exp, cp_b_exp = [0.0] * n_units, [0.0] * n_units
    if ncp > 1:
        head_dim = hid / lay.heads
        kv_dim = (lay.kv_heads or lay.heads) * head_dim
        if cfg.cp_spec.ring:
            if cfg.kv_repeat:  # K/V repeated to the query heads before SDPA: the ring moves them so
                kv_dim = lay.heads * head_dim
            kv_bytes = 2 * tokens / ncp * kv_dim / t * item  # the rank's K and V (2 chunks of tokens / 2cp)
            for u in range(n_units):
                k = lay.attention_ops[u]
                if not k:
                    continue
                # each step of the ring computes 1/cp of the rank's attention (causal load balancing)
                step_f = uc.attention_forward_s[u] / k / ncp
                step_b = uc.attention_backward_s[u] / k / ncp
                tf, tb, ef, eb = ring_exchange_s(coll, kv_bytes, ncp, step_f, step_b, groups,
                                                 pytorch=base.kernels != "transformer-engine", rotate=cfg.cp_rotate,
                                                 item=item)
                cp_f_tot[u], cp_b_tot[u], cp_f_exp[u], cp_b_exp[u] = k * tf, k * tb, k * ef, k * eb
        else:
            # Ulysses: Q, K, V from a sequence split to a heads split before the attention, the output back after
            qkv = tokens / ncp * (hid + 2 * kv_dim) / t * item
            out = tokens / ncp * hid / t * item
            a2a = coll("all-to-all", qkv, groups["context"]) + coll("all-to-all", out, groups["context"])
            for u in range(n_units):
                k = lay.attention_ops[u]
                cp_f_tot[u] = cp_f_exp[u] = k * a2a
                cp_b_tot[u] = cp_b_exp[u] = k * a2a
    # expert parallelism: all-to-all dispatch and combine per MoE layer, forward and backward
    ep_s = 0.0
    if cfg.ep > 1 and lay.moe_layers:
        ep_s = 2 * coll("all-to-all", msg, groups["expert"])
    moe = [0] * n_units
    if cfg.ep > 1:
        moe_units = {r.unit for r in lay.roles if r.expert}
        moe = [1 if u in moe_units else 0 for u in range(n_units)]
    rc = cfg.recompute_spec
    # ZeRO-3 / FSDP: parameters gathered unit by unit (prefetch one ahead), gradients reduce-scattered
    sh = cfg.sharding_spec
    shard_group = groups["shard"]
    pbytes = base.memory.parameter_bytes / max(1, base.parameters)
    gbytes = base.memory.gradient_bytes / max(1, base.trainable_parameters)
    obytes = base.memory.optimizer_state_bytes / max(1, base.trainable_parameters)
    unit_params = list(lay.unit_params)
    if lay.tied_params and p == 1:  # one copy of a tied embedding without pipeline stages
        unit_params[-1] = max(0, unit_params[-1] - lay.tied_params)
    dense_params = [up - ep for up, ep in zip(unit_params, lay.expert_params)]
    per_gpu_params = [dense_params[u] / t + lay.expert_params[u] / t / max(1, cfg.ep) for u in range(n_units)]
    gather_f, gather_b = [0.0] * n_units, [0.0] * n_units
    # bytes per gathered parameter: the trace's, or 1 for the layers' FP8 weights with an FP8 all-gather
    # (torchao float8 / Megatron FSDP: each rank casts its shard, the gather moves FP8)
    fp8_gather = cfg.fp8_all_gather and get_precision(base.precision).fp8 is not None
    # mixed precision with sharded parameters: FSDP's MixedPrecisionPolicy(param_dtype=bf16) (torchtitan, which
    # then runs no autocast: "Mixed precision training is handled by fully_shard"), FSDP1's MixedPrecision and
    # DeepSpeed ZeRO-3's half-precision parameters cast each rank's shard and gather half-precision parameters,
    # which are the copies the layers run with: the gather moves 2 bytes a parameter and autocast's per-step
    # weight casts are not made
    autocast = get_precision(base.precision).autocast
    half = float(ITEMSIZE[autocast]) if autocast else None
    mp_gather = bool(sh.parameters and shard_group.ranks > 1 and half is not None and pbytes > half)
    gather_item = [1.0 if fp8_gather and 0 < u < n_units - 1 else half if mp_gather else pbytes
                   for u in range(n_units)]
    if sh.parameters and shard_group.ranks > 1:
        for u in range(n_units):
            size = per_gpu_params[u] * gather_item[u]
            gather_f[u] = coll("all-gather", size, shard_group)
            gather_b[u] = coll("all-gather", size, shard_group) + coll("reduce-scatter", per_gpu_params[u] * gbytes,
                                                                        shard_group)

    # op-level selective checkpointing keeps reduce-scatter outputs (torchtitan's list), not all-gathers or
    # all-reduces: the share of the forward tensor-parallel time run again
    tp_again = 0.0
    if rc.op_level and t > 1:
        tp_again = 1.0
        if sp:  # per unit the all-gathers are cols x ag of cols x ag + rows x rs; the layers are alike
            u1 = 1 if n_units > 2 else 0
            rows, cols = lay.row_linears[u1], lay.col_groups[u1]
            tp_again = cols * ag / (cols * ag + rows * rs) if cols * ag + rows * rs > 0 else 0.0
    f_chunk, b_chunk, rec_chunk, tpc_chunk, tpt_chunk = [], [], [], [], []
    for us in chunk_units:
        f = b = rec = tpc = tpt = 0.0
        prev_f = prev_b = 0.0
        for k, u in enumerate(us):
            fu = uc.forward_s[u] + tp_f[u] + ep_s * moe[u] + cp_f_exp[u]
            bu = uc.backward_s[u] + tp_b[u] + ep_s * moe[u] + cp_b_exp[u]
            r = 0.0
            is_layer = 0 < u < n_units - 1
            if rc.whole_layers and is_layer:
                r = uc.forward_s[u] + tp_f[u] + ep_s * moe[u] + cp_f_exp[u]
            elif rc.op_level and is_layer:
                # the ops not kept, and the collectives not kept (all but a reduce-scatter's output); the attention
                # kernels are kept, so context parallelism's exchange is not run again
                r = max(0.0, uc.forward_s[u] - uc.saved_forward_s[u]) + tp_f[u] * tp_again + ep_s * moe[u]
            elif rc.attention_core:
                r = uc.core_forward_s[u]
            # gathers hidden behind the previous unit's compute (the first one is not)
            gf = max(0.0, gather_f[u] - (prev_f if k else 0.0))
            gb = max(0.0, gather_b[u] - (prev_b if k else 0.0))
            f += fu + gf
            b += bu + r + gb
            rec += r
            # full recomputation runs the forward's collectives again, op-level the ones whose outputs it does not keep
            again = (1.0 if rc.whole_layers else tp_again if rc.op_level else 0.0) if is_layer else 0.0
            tpc += tp_f[u] + tp_b[u] + tp_f[u] * again  # exposed
            tpt += tp_f_total[u] + tp_b_total[u] + tp_f_total[u] * again  # moved
            prev_f, prev_b = uc.forward_s[u], uc.backward_s[u] + r
        f_chunk.append(f)
        b_chunk.append(b)
        rec_chunk.append(rec)
        tpc_chunk.append(tpc)
        tpt_chunk.append(tpt)
    # pipeline messages (Megatron's scatter/gather: 1/t of the activations per tensor rank)
    p2p = coll("send-recv", msg / t, groups["pipeline"]) if chunks > 1 else 0.0
    sched = "gpipe" if cfg.schedule_spec.all_forward_first else "1f1b"
    if chunks == 1:
        per = f_chunk[0] + b_chunk[0]
        pr = PipelineResult(m * per, (m * per,), (m * per,), (1,))
        method = "sequential"
    else:
        limit = int(parallel_table()["pipeline"]["simulate_max_operations"])
        if simulate_pipeline and 2 * m * chunks <= limit:
            pr = simulate(f_chunk, b_chunk, m, p, v, p2p, sched)
            method = "simulated"
        else:
            pr = closed_form(f_chunk, b_chunk, m, p, v, p2p, sched)
            method = "closed form"
    # per GPU (pipeline rank d): its chunks
    dev_chunks = [[c * p + d for c in range(v)] for d in range(p)] if chunks > 1 else [[0]]
    dev_units = [[u for c in cs for u in chunk_units[c]] for cs in dev_chunks]
    dev_params = [sum(per_gpu_params[u] for u in us) for us in dev_units]
    dev_expert = [sum(lay.expert_params[u] / t / max(1, cfg.ep) for u in us) for us in dev_units]

    # data-parallel synchronisation of each GPU's gradients after its last backward
    dp_total = dp_exposed = 0.0
    zero_ag_s = 0.0
    data = groups["data"]
    bucket = float(ddp_bucket_bytes())
    finish = 0.0
    for d, us in enumerate(dev_units):
        gb_dense = (dev_params[d] - dev_expert[d]) * gbytes
        gb_exp = dev_expert[d] * gbytes
        last_b = b_chunk[dev_chunks[d][0]]
        t_sync = 0.0
        if sh.parameters:
            if sh.within_node and groups["replica"].ranks > 1:  # hybrid: shards all-reduced across nodes
                t_sync = _bucketed(coll, "all-reduce", gb_dense / max(1, shard_group.ranks), groups["replica"], bucket)
        elif data.ranks > 1:
            kind = "reduce-scatter" if sh.optimizer else "all-reduce"
            if sh.gradients and m > 1:  # ZeRO-2: every micro-batch's gradients reduce-scattered as they come
                per_mb = _bucketed(coll, kind, gb_dense, data, bucket)
                hidden = max(0.0, per_mb - last_b) * (m - 1)
                t_sync = per_mb + hidden
            else:
                t_sync = _bucketed(coll, kind, gb_dense, data, bucket)
            if gb_exp and cfg.dp // max(1, cfg.ep) > 1:
                t_sync += _bucketed(coll, kind, gb_exp, model._group(cfg.dp // cfg.ep, 1), bucket)
            if sh.optimizer:  # updated parameters gathered back after the step
                zero_ag_s = max(zero_ag_s, coll("all-gather", dev_params[d] * pbytes, data))
        dp_total = max(dp_total, t_sync)
        # buckets become ready during the last backward pass and go out in order: what is left after it ends
        exposed = _exposed_after(t_sync, last_b, gb_dense, bucket) if cfg.overlap_grad_sync else t_sync
        finish = max(finish, pr.end_s[d] + exposed)
    dp_exposed = max(0.0, finish - pr.makespan_s)

    # the optimizer step
    total_params = max(1, sum(unit_params))
    opt_shard = shard_group.ranks if sh.optimizer else 1
    opt_s = 0.0
    offload_s = 0.0
    for d in range(len(dev_units)):
        share = dev_params[d] / total_params / opt_shard
        if cfg.offload_optimizer:
            # the step on the host CPU (the trace's optimizer ops over this GPU's share, timed on the catalog's
            # host CPU; the node's GPUs share it), gradients down and parameters up over PCIe
            from traincast.hardware.catalog import get_catalog

            tbl = parallel_table()["offload"]
            host = get_catalog().device(str(tbl["host_cpu"]))
            n = dev_params[d] / opt_shard
            cpu = model.optimizer_s(share * total_params / max(1, base.trainable_parameters) * model.cluster.gpus_per_node,
                                    dev_params[d] * t / total_params, host)
            pcie_bw = float(tbl["pcie_gb_per_s"]) * 1e9
            link = Group(2, 2, 1, 2, pcie_bw, "pcie4", pcie_bw)
            offload_s = max(offload_s, cpu + collective_s("send-recv", n * gbytes, link, cp)
                            + collective_s("send-recv", n * pbytes, link, cp))
        else:
            opt_s = max(opt_s, model.optimizer_s(share * total_params / max(1, base.trainable_parameters),
                                                 dev_params[d] * t / total_params))
    overhead = uc.step_overhead_s
    straggle = pr.makespan_s * straggler_share(cfg.gpus)
    iteration = pr.makespan_s + dp_exposed + zero_ag_s + opt_s + offload_s + overhead + straggle

    if ncp > 1 and cfg.cp_spec.ring:
        notes.append("context parallelism (ring): " + (
            "Transformer Engine's ring attention, its own corrections not priced" if base.kernels == "transformer-engine"
            else "PyTorch's ring attention, its FP32 merges, dQ/dK/dV accumulators and send-buffer copies priced "
                 "beside the attention kernels (measured on an H200: docs/parallel.md); K/V rotated by "
                 + ("one all-gather a pass, hidden under step 0's attention only" if cfg.cp_rotate == "allgather"
                    else "a send to the next rank every step") + ", dK/dV sent round in FP32"
                 + (", at the query heads (K/V repeated before SDPA)" if cfg.kv_repeat else "")))

    # --- memory per GPU ----------------------------------------------------------------------------------------
    cap = _capacity(model.device)
    # PyTorch FSDP with one micro-batch a step: zero_grad sets the (sharded) gradients to None and the backward
    # pass makes them as it frees the activations, so the two peak apart. DDP's buckets, ZeRO's partitions,
    # Megatron's contiguous gradient buffer and gradient accumulation over micro-batches hold them through the step
    grads_apart = sh.framework == "fsdp" and m == 1
    if grads_apart:
        notes.append("memory: FSDP with one micro-batch a step makes the gradients in the backward pass as it frees "
                     "the activations, so they peak apart (gradients set to None each step, PyTorch's default)")
    dev_mem = []
    dev_inflight = pr.in_flight if len(pr.in_flight) == len(dev_units) else tuple([1] * len(dev_units))
    mem_rows = []
    for d, us in enumerate(dev_units):
        params_b = dev_params[d] * pbytes
        grads_b = dev_params[d] * gbytes
        opt_b = dev_params[d] * obytes
        if sh.parameters:
            params_b /= shard_group.ranks
        if sh.gradients:
            grads_b /= shard_group.ranks
        if sh.optimizer:
            opt_b /= shard_group.ranks
        if cfg.offload_optimizer:
            opt_b = 0.0
        layer_units = [u for u in us if 0 < u < n_units - 1]
        act = sum(uc.activation_bytes[u] for u in us)
        # checkpointed layers keep their inputs (pre and post units keep everything)
        keep = sum(uc.activation_bytes[u] for u in us if u not in layer_units)
        inputs = len(layer_units) * lay.residual_bytes * mb / lay.batch / (t if sp else 1) / ncp
        # the output unit's saved activations (the logits' log-softmax...) are freed by its backward, which runs
        # before any layer is recomputed: a recomputed layer's activations need only what exceeds them
        post = sum(uc.activation_bytes[u] for u in us if u == n_units - 1)
        if rc.whole_layers:
            act = keep + inputs
            extra = max(0.0, max((uc.activation_bytes[u] for u in layer_units), default=0.0) - post)
        elif rc.op_level:
            # each layer keeps its input and the saved ops' outputs; one layer's recomputed rest exists at a time
            act = keep + inputs + sum(uc.saved_activation_bytes[u] for u in layer_units)
            extra = max(0.0, max((max(0.0, uc.activation_bytes[u] - uc.saved_activation_bytes[u])
                                  for u in layer_units), default=0.0) - post)
        else:
            extra = 0.0
            if rc.attention_core:
                act -= sum(uc.core_activation_bytes[u] for u in us)
        per_chunk_act = act / max(1, len(dev_chunks[d]))
        activations = per_chunk_act * dev_inflight[d] + extra
        transient = max((uc.transient_bytes[u] for u in us), default=0.0)
        buffers = 0.0
        if sh.parameters and shard_group.ranks > 1:  # the gathered unit and the prefetched next one
            buffers = 2 * max((per_gpu_params[u] * gather_item[u] for u in us), default=0.0)
        copies = sum(lay.weight_copy_bytes[u] for u in us) / t if lay.weight_copy_bytes else 0.0
        if sh.parameters and shard_group.ranks > 1:  # only the gathered units' copies exist at once
            copies = 2 * max((lay.weight_copy_bytes[u] for u in us), default=0) / t if lay.weight_copy_bytes else 0.0
        if mp_gather:  # the gathered half-precision parameters are the copies (in ``buffers``)
            copies = 0.0
        if grads_apart:
            peak = params_b + opt_b + copies + max(activations, grads_b) + transient + buffers
        else:
            peak = params_b + grads_b + opt_b + copies + activations + transient + buffers
        mem_rows.append(dict(parameters=params_b, gradients=grads_b, optimizer=opt_b, weight_copies=copies,
                             activations=activations, transient=transient, buffers=buffers, peak=peak,
                             in_flight=dev_inflight[d]))
        dev_mem.append(peak)
    worst = max(range(len(dev_mem)), key=lambda d: dev_mem[d])
    memory = {k: int(v) for k, v in mem_rows[worst].items()}
    memory["stage"] = worst
    peak = int(dev_mem[worst])
    fits = peak <= cap
    # largest micro-batch that fits: activations and transients grow with it
    per_sample = (mem_rows[worst]["activations"] + mem_rows[worst]["transient"]) / mb
    fixed = peak - per_sample * mb
    max_mb = int((cap - fixed) // per_sample) if per_sample > 0 and cap > fixed else 0
    if not fits:
        notes.append(f"out of memory: stage {worst} needs {peak / 2**30:.1f} GiB per GPU, {cap / 2**30:.1f} GiB usable")

    stages = []
    for d, us in enumerate(dev_units):
        cs = dev_chunks[d]
        stages.append(StageInfo(
            stage=d, units=(lay.units[us[0]], lay.units[us[-1]]), layers=sum(1 for u in us if 0 < u < n_units - 1),
            forward_s=sum(f_chunk[c] for c in cs), backward_s=sum(b_chunk[c] for c in cs),
            recompute_s=sum(rec_chunk[c] for c in cs), tensor_comm_s=sum(tpc_chunk[c] for c in cs),
            parameters=int(dev_params[d]), memory_bytes=int(dev_mem[d]), in_flight=int(dev_inflight[d])))
    busiest = max(range(len(dev_units)), key=lambda d: pr.busy_s[d] if d < len(pr.busy_s) else 0.0)
    cs = dev_chunks[busiest]
    fwd_compute = m * sum(sum(uc.forward_s[u] for u in chunk_units[c]) for c in cs)
    bwd_compute = m * sum(sum(uc.backward_s[u] for u in chunk_units[c]) + rec_chunk[c] for c in cs)
    tp_total = m * sum(tpc_chunk[c] for c in cs)
    tp_all = m * sum(tpt_chunk[c] for c in cs)
    pp_total = 2 * m * p2p * (len(cs) if chunks > 1 else 0)
    ep_total = m * 2 * ep_s * sum(moe[u] for c in cs for u in chunk_units[c])
    gather_total = m * sum(gather_f[u] + gather_b[u] for c in cs for u in chunk_units[c])
    gather_exposed = m * sum(max(0.0, f_chunk[c] + b_chunk[c] - sum(uc.forward_s[u] + uc.backward_s[u] + tp_f[u]
                                                                    + tp_b[u] + 2 * ep_s * moe[u] + cp_f_exp[u]
                                                                    + cp_b_exp[u] for u in chunk_units[c])
                                     - rec_chunk[c]) for c in cs)
    gather_exposed = gather_exposed if gather_exposed > 1e-9 else 0.0  # float noise of the difference above
    rec_cp = (lambda u: cp_f_exp[u] if rc.whole_layers and 0 < u < n_units - 1 else 0.0)
    cp_exposed = m * sum(cp_f_exp[u] + cp_b_exp[u] + rec_cp(u) for c in cs for u in chunk_units[c])
    cp_total = m * sum(cp_f_tot[u] + cp_b_tot[u] + (cp_f_tot[u] if rec_cp(u) else 0.0)
                       for c in cs for u in chunk_units[c])
    by_kind_exposed = {"tensor": tp_total, "pipeline": pp_total, "data": dp_exposed + zero_ag_s,
                       "sharding": gather_exposed, "expert": ep_total, "context": cp_exposed}
    by_kind_total = {"tensor": tp_all, "pipeline": pp_total, "data": dp_total + zero_ag_s,
                     "sharding": gather_total, "expert": ep_total, "context": cp_total}
    fp8_gemm = m * sum(uc.fp8_gemm_s[u] for c in cs for u in chunk_units[c]) if uc.fp8_gemm_s else 0.0
    fp8_cast = m * sum(uc.fp8_cast_s[u] for c in cs for u in chunk_units[c]) if uc.fp8_cast_s else 0.0
    def unit_flops(u: int) -> float:
        is_layer = 0 < u < n_units - 1
        if rc.whole_layers and is_layer:
            extra = uc.forward_flops[u]
        elif rc.op_level and is_layer:
            extra = max(0.0, uc.forward_flops[u] - uc.saved_forward_flops[u])
        else:
            extra = uc.core_forward_flops[u] if rc.attention_core else 0.0
        return uc.forward_flops[u] + uc.backward_flops[u] + extra

    dev_flops = [m * sum(unit_flops(u) for u in us) for us in dev_units]
    return ParallelStep(
        flops_per_gpu=max(dev_flops), flops_per_replica=sum(dev_flops) * t,
        config=replace(cfg, micro_batch=mb), micro_batch=mb, micro_batches=m, per_replica_batch=per_replica_batch,
        iteration_s=iteration, pipeline_s=pr.makespan_s, bubble_share=pr.bubble_share if chunks > 1 else 0.0,
        forward_s=fwd_compute, backward_s=bwd_compute, recompute_s=m * sum(rec_chunk[c] for c in cs),
        optimizer_s=opt_s + offload_s, overhead_s=overhead, straggler_s=straggle,
        communication_exposed_s=sum(by_kind_exposed.values()), communication_total_s=sum(by_kind_total.values()),
        comm_exposed_by_kind=by_kind_exposed, comm_total_by_kind=by_kind_total, stages=tuple(stages),
        memory=memory, peak_memory_bytes=peak, memory_capacity_bytes=cap, fits_in_memory=fits,
        max_micro_batch=max_mb, predictor=uc.predictor, pipeline_method=method, notes=tuple(notes),
        fp8_gemm_s=fp8_gemm, fp8_cast_s=fp8_cast)


def _bucketed(coll, kind: str, nbytes: float, group: Group, bucket: float) -> float:
    """Seconds to run ``kind`` over ``nbytes`` of gradients in DDP-sized buckets."""
    if nbytes <= 0 or group.ranks <= 1:
        return 0.0
    n = max(1, math.ceil(nbytes / bucket))
    last = nbytes - bucket * (n - 1)
    return (n - 1) * coll(kind, bucket, group) + coll(kind, last, group)


def _exposed_after(t_sync: float, backward_s: float, nbytes: float, bucket: float) -> float:
    """Seconds of bucketed gradient communication (``t_sync`` in all) left when a backward pass of ``backward_s``
    ends: bucket k is ready when the backward pass has produced its share of the gradients and starts when it is
    ready and the previous bucket is done (DDP), as :func:`traincast.predict.comm.gradient_sync`."""
    if t_sync <= 0 or nbytes <= 0:
        return 0.0
    n = max(1, math.ceil(nbytes / bucket))
    # one link serving buckets in order: the last finishes at max over k of (bucket k ready + the communication
    # of buckets k..n). Both terms are linear in k over the equal buckets, so the maximum is at the first, the
    # last full or the last (partial) bucket: O(1) instead of a loop over every bucket
    finish = 0.0
    for k in {1, max(1, n - 1), n}:
        ready = backward_s * min(k * bucket, nbytes) / nbytes
        finish = max(finish, ready + t_sync * (nbytes - (k - 1) * bucket) / nbytes)
    return max(0.0, finish - backward_s)


def _capacity(device: Device) -> int:
    from traincast.predict.compose import memory_capacity

    return memory_capacity(device)

