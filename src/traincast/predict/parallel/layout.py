"""What a traced step's ops are to a parallel strategy: which layer (pipeline unit) each belongs to, and which
role it plays under tensor parallelism.

Found from the trace alone, for any model:

- **Layers** are the children of the outermost indexed containers (``...h.0``, ``...layers.12``,
  ``...layer1.2``): module paths ``<container>.<i>`` with at least two indices. Ops before the first layer form
  the ``pre`` unit (embeddings), ops after the last the ``post`` unit (final norm, head, loss); a pipeline stage
  is a contiguous run of layers (``pre`` with the first stage, ``post`` with the last).
- **Tensor-parallel roles** (Megatron-LM, Shoeybi et al. 2019): in each layer, in forward order, a linear layer
  that reads the hidden size ``h`` is *column*-parallel (its output features split), one that writes ``h`` from
  a split input is *row*-parallel (its input features split, an all-reduce after it); a ``h -> h`` projection
  is row-parallel when attention ran since the previous linear layer (the output projection), else column
  (query/key/value). Ops between a column and the next row layer run on split heads or features
  (*sharded*: 1/t of the work), the rest on the whole hidden state (*replicated*: the residual stream, norms,
  dropout; 1/t of the tokens with sequence parallelism). A head whose output is the vocabulary is
  column-parallel over the vocabulary, and the loss after it is sharded.
- **Attention core** (selective recomputation): the ops of a sharded region in which attention ran, other
  than the linear layers.
- **Op-level selective checkpointing** (torchtitan's "selective op" policy on ``torch.utils.checkpoint``): in
  each layer, counting its forward ``aten.mm`` calls in order (FP8 GEMMs included: the policy sees the ``mm`` of
  the float8 tensor), the 1st, 3rd, ... are saved, as are the fused attention kernels; everything else in the
  layer is recomputed. ``saved_bytes`` holds what the saved ops write.
- **Parameters per unit** from the shapes of the weights the forward ops read (linear, embedding, norm
  weights), for stage memory and gradient synchronisation.
- **Activation shares**: the traced step's saved-activation bytes are apportioned over the forward ops by the
  bytes each writes (weight casts excluded), so strategies can scale and drop them op by op.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from traincast.workload.records import Workload

GEMM_ATENS = ("mm", "addmm")
ATTENTION_ATENS = ("_softmax", "softmax", "_safe_softmax", "bmm", "baddbmm")
ROLES = ("col", "row", "sharded", "replicated", "none", "optimizer")


@dataclass(frozen=True)
class OpRole:
    unit: int  # index into ModelLayout.units
    role: str  # col | row | sharded | replicated | none | optimizer
    split: str = ""  # GEMMs: which of m, n, k carries the split features
    split_size: int = 0  # the size of that dimension before splitting
    attention_core: bool = False
    expert: bool = False
    carries_split: bool = False  # a linear layer's other op (cast, bias gradient) on a tensor with the split features
    op_saved: bool = False  # kept, not recomputed, under op-level selective checkpointing (a layer's forward op)


@dataclass(frozen=True)
class ModelLayout:
    """The analysis of one traced workload (aligned with ``workload.ops``)."""

    units: tuple[str, ...]  # 'pre', layer paths in forward order, 'post'
    roles: tuple[OpRole, ...]
    hidden: int | None
    heads: int | None
    kv_heads: int | None
    tokens: int  # tokens per step at the traced batch (batch x sequence)
    seq_len: int | None
    unit_params: tuple[int, ...]  # trainable parameters each unit reads (a tied weight counted in both units)
    expert_params: tuple[int, ...]  # of which in expert modules (mixture of experts)
    tied_params: int  # parameters counted in two units (tied input/output embeddings)
    act_share: tuple[float, ...]  # per op: share of the step's saved activation bytes
    row_linears: tuple[int, ...]  # per unit: row-parallel linear layers (one all-reduce each, forward)
    col_groups: tuple[int, ...]  # per unit: groups of column-parallel layers reading one input (backward all-reduce)
    tp_width: tuple[int, ...]  # per unit: the features the tensor-parallel split divides (for divisibility)
    vocab: int | None
    residual_bytes: int  # bytes of one hidden-state tensor of a layer (tokens x h x itemsize) at the traced batch
    moe_layers: int  # layers with expert modules
    batch: int = 1  # the batch of the trace analysed (tokens and residual_bytes are at it)
    # per unit: bytes of the low-precision copies of its weights that autocast makes in the forward pass and
    # autograd keeps for the backward pass (counted once per step, not per micro-batch)
    weight_copy_bytes: tuple[int, ...] = ()
    # experts of a mixture-of-experts layer, read off its batched expert GEMMs' weights (experts x in x out); 0 where
    # unknown (no experts, or experts run as separate linear layers)
    experts: int = 0
    attention_ops: tuple[int, ...] = ()  # per unit: fused attention kernels per forward pass
    # per op: the bytes it writes (eager) where op-level selective checkpointing saves its output, else 0
    saved_bytes: tuple[float, ...] = ()

    @property
    def layers(self) -> int:
        return len(self.units) - 2

    @property
    def tp_capable(self) -> bool:
        return any(r.role in ("col", "row") for r in self.roles)

    def unit_of_layer(self, i: int) -> int:
        return i + 1


def _gemm_operands(op):
    """(M, K, N) of a 2-D GEMM op with a weight operand (mm / addmm with 2-D inputs), else None."""
    if op.aten not in GEMM_ATENS:
        return None
    shapes = op.input_shapes
    a, b = (shapes[1], shapes[2]) if op.aten == "addmm" and len(shapes) >= 3 else (shapes[0], shapes[1]) if len(shapes) >= 2 else (None, None)
    if a is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    return int(a[0]), int(a[1]), int(b[1])


_INDEX = re.compile(r"^\d+$")


def _containers(paths: list[str]) -> list[str]:
    """Outermost module paths with children at two or more integer indices."""
    idx: dict[str, set[int]] = defaultdict(set)
    for p in paths:
        parts = p.split(".")
        for i, c in enumerate(parts):
            if _INDEX.match(c) and i > 0:
                idx[".".join(parts[:i])].add(int(c))
    cands = [c for c, s in idx.items() if len(s) >= 2]
    out = []
    for c in cands:
        nested = any(c != o and c.startswith(o + ".") and _INDEX.match(c[len(o) + 1:].split(".")[0] or "x")
                     for o in cands)
        if not nested:
            out.append(c)
    return out


def _layer_of(path: str, containers: list[str]) -> str | None:
    for c in containers:
        if path.startswith(c + "."):
            rest = path[len(c) + 1:].split(".")[0]
            if _INDEX.match(rest):
                return f"{c}.{rest}"
    return None


def _numel(shape) -> int:
    return int(math.prod(shape)) if shape else 1


_CACHE: dict[int, tuple[Workload, ModelLayout]] = {}


def analyse(wl: Workload) -> ModelLayout:
    """The :class:`ModelLayout` of ``wl`` (cached per workload object, by identity: hashing a workload's ops
    costs more than looking at them)."""
    hit = _CACHE.get(id(wl))
    if hit is not None and hit[0] is wl:
        return hit[1]
    lay = _analyse(wl)
    if len(_CACHE) >= 16:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(wl)] = (wl, lay)
    return lay


def _analyse(wl: Workload) -> ModelLayout:
    ops = wl.ops
    fwd_idx = [i for i, o in enumerate(ops) if o.phase == "forward"]
    containers = _containers([ops[i].module for i in fwd_idx])
    # --- units ---------------------------------------------------------------------------------
    layer_order: list[str] = []
    seen = set()
    module_unit: dict[str, str] = {}
    first_layer_pos = None
    last_layer_pos = None
    for pos, i in enumerate(fwd_idx):
        lay = _layer_of(ops[i].module, containers)
        if lay is not None:
            if lay not in seen:
                seen.add(lay)
                layer_order.append(lay)
            if first_layer_pos is None:
                first_layer_pos = pos
            last_layer_pos = pos
    units = ("pre", *layer_order, "post")
    uindex = {u: k for k, u in enumerate(units)}
    op_unit = [0] * len(ops)
    current = "pre"
    for pos, i in enumerate(fwd_idx):
        m = ops[i].module
        lay = _layer_of(m, containers)
        if lay is not None:
            current = lay
        elif last_layer_pos is not None and pos > last_layer_pos:
            current = "post"
        unit = lay or current
        op_unit[i] = uindex[unit]
        module_unit.setdefault(m, unit)
    for i, o in enumerate(ops):
        if o.phase == "forward":
            continue
        if o.phase == "optimizer":
            op_unit[i] = uindex["post"]
            continue
        lay = _layer_of(o.module, containers)
        op_unit[i] = uindex[lay] if lay else uindex[module_unit.get(o.module, "post")]

    # --- hidden size, tokens, heads ---------------------------------------------------------------
    hid = Counter()
    for i in fwd_idx:
        o = ops[i]
        if 0 < op_unit[i] < len(units) - 1 and o.op_class == "norm" and o.input_shapes and o.input_shapes[0]:
            hid[o.input_shapes[0][-1]] += 1
    if not hid:
        for i in fwd_idx:
            o = ops[i]
            if 0 < op_unit[i] < len(units) - 1 and o.module == units[op_unit[i]] and o.output_shapes and o.output_shapes[0]:
                hid[o.output_shapes[0][-1]] += 1
    h = hid.most_common(1)[0][0] if hid else None
    gemms = {i: _gemm_operands(ops[i]) for i in fwd_idx}
    tokens = 0
    for i in fwd_idx:
        g = gemms[i]
        if g and 0 < op_unit[i] < len(units) - 1 and g[1] == h:
            tokens = g[0]
            break
    if not tokens:
        tokens = max((g[0] for g in gemms.values() if g), default=wl.batch_size)
    seq = tokens // wl.batch_size if wl.batch_size and tokens % wl.batch_size == 0 else None
    heads = kv = None
    hc, kc = Counter(), Counter()
    for i in fwd_idx:
        o = ops[i]
        if o.op_class == "attention" and len(o.input_shapes) >= 2 and len(o.input_shapes[0]) == 4:
            hc[o.input_shapes[0][1]] += 1
            kc[o.input_shapes[1][1]] += 1
    if not hc and h:
        for i in fwd_idx:
            for s in ops[i].output_shapes:
                if len(s) == 4 and s[1] * s[3] == h and s[1] > 1:
                    hc[s[1]] += 1
    if hc:
        heads = hc.most_common(1)[0][0]
        kv = kc.most_common(1)[0][0] if kc else heads

    # --- roles ------------------------------------------------------------------------------------
    roles = ["replicated"] * len(ops)
    split = [""] * len(ops)
    split_size = [0] * len(ops)
    core = [False] * len(ops)
    module_role: dict[str, str] = {}
    module_feat: dict[str, tuple[int, int]] = {}  # linear module -> (K, N) of its forward GEMM
    region = {}  # forward op -> 'sharded' | 'replicated'
    row_count = [0] * len(units)
    col_groups = [0] * len(units)
    width: dict[int, set[int]] = defaultdict(set)
    vocab = None
    emb_vocab = [o.input_shapes[0][0] for o in ops if o.phase == "forward" and o.aten == "embedding"
                 and o.input_shapes and len(o.input_shapes[0]) == 2]
    if emb_vocab:
        vocab = max(emb_vocab)
    by_unit_fwd: dict[int, list[int]] = defaultdict(list)
    for i in fwd_idx:
        by_unit_fwd[op_unit[i]].append(i)
    for u, idxs in by_unit_fwd.items():
        in_sharded = False
        attn_seen = False
        core_candidates: list[int] = []
        region_core = False
        last_col_group_open = False
        for i in idxs:
            o = ops[i]
            g = gemms[i]
            m = o.module
            if g is not None and m not in module_role:
                _, k, n = g
                role = "none"
                if h is not None and 0 < u < len(units) - 1:
                    if k == h and n != h:
                        role = "col" if n >= h // 4 else "none"  # a router (h -> experts) stays whole
                    elif k != h and n == h:
                        role = "row" if in_sharded else "none"
                    elif k == h and n == h:
                        role = "row" if (attn_seen and in_sharded) else "col"
                elif u == len(units) - 1 and vocab and n == vocab and h and k == h:
                    role = "col"  # the vocabulary-parallel head
                module_role[m] = role
                module_feat[m] = (k, n)
                if role == "col":
                    width[u].add(n)
                    if not last_col_group_open:
                        col_groups[u] += 1
                        last_col_group_open = True
                    in_sharded = True
                    attn_seen = False
                    region_core = False
                elif role == "row":
                    width[u].add(k)
                    row_count[u] += 1
                    if region_core:
                        for j in core_candidates:
                            core[j] = True
                    core_candidates = []
                    in_sharded = False
                    attn_seen = False
                    last_col_group_open = False
                continue
            if m in module_role:  # the linear layer's own casts and bias ops
                continue
            is_attn = o.op_class == "attention" or o.aten in ATTENTION_ATENS
            if is_attn:
                attn_seen = True
                if in_sharded:
                    region_core = True
            if in_sharded:
                last_col_group_open = last_col_group_open and not is_attn
                core_candidates.append(i)
            region[i] = "sharded" if in_sharded else "replicated"
        if in_sharded and u == len(units) - 1:
            pass  # the loss after a vocabulary-parallel head stays sharded
    # per module majority of its forward ops' regions (backward ops follow their module)
    votes: dict[str, Counter] = defaultdict(Counter)
    for i, r in region.items():
        votes[ops[i].module][r] += ops[i].bytes_total + 1
    module_region = {m: c.most_common(1)[0][0] for m, c in votes.items()}
    for i, o in enumerate(ops):
        if o.phase == "optimizer":
            roles[i] = "optimizer"
            continue
        m = o.module
        if m in module_role:
            roles[i] = module_role[m]
            if roles[i] in ("col", "row") and o.op_class == "matmul":
                k, n = module_feat[m]
                split[i], split_size[i] = _gemm_split(o, roles[i], k, n, tokens)
        elif o.phase == "forward" and i in region:
            roles[i] = region[i]
        else:
            roles[i] = module_region.get(m, "replicated")
    expert = [("expert" in o.module.lower()) for o in ops]

    # --- parameters per unit ------------------------------------------------------------------------
    unit_params = [0] * len(units)
    expert_params = [0] * len(units)
    counted: set[tuple[str, tuple]] = set()
    head_weight = None
    emb_weight = None
    for i in fwd_idx:
        o = ops[i]
        u = op_unit[i]
        ws: list[tuple] = []
        g = gemms[i]
        if g is not None and o.module in module_role:
            _, k, n = g
            ws.append((k, n))
            if o.aten == "addmm" and o.input_shapes and len(o.input_shapes[0]) == 1:
                ws.append(tuple(o.input_shapes[0]))
            if module_role[o.module] == "col" and u == len(units) - 1:
                head_weight = (k, n)
        elif o.aten == "embedding" and o.input_shapes and len(o.input_shapes[0]) == 2:
            ws.append(tuple(o.input_shapes[0]))
            if o.input_shapes[0][0] == vocab:
                emb_weight = tuple(o.input_shapes[0])
        elif o.op_class == "norm" and len(o.input_shapes) >= 2:
            ws.extend(tuple(s) for s in o.input_shapes[1:3] if s and len(s) == 1)
        elif o.aten in ("convolution",) and len(o.input_shapes) >= 2:
            ws.extend(tuple(s) for s in o.input_shapes[1:3] if s)
        elif o.op_class == "elementwise" and h is not None:  # RMSNorm-like weight multiplies
            ws.extend(tuple(s) for s in o.input_shapes if len(s) == 1 and s[0] == h and "norm" in o.module.lower())
        elif o.aten == "bmm" and expert[i] and len(o.input_shapes) >= 2:
            ws.append(tuple(o.input_shapes[1]))
        for pos, w in enumerate(ws):
            key = (o.module, pos, w)
            if key in counted:
                continue
            counted.add(key)
            n_w = _numel(w)
            unit_params[u] += n_w
            if expert[i]:
                expert_params[u] += n_w
    tied = 0
    if head_weight and emb_weight and sorted(head_weight) == sorted(emb_weight):
        total = sum(unit_params)
        if total > wl.trainable_parameters and abs(total - wl.trainable_parameters - _numel(emb_weight)) < 0.05 * total:
            tied = _numel(emb_weight)

    # --- activation shares ----------------------------------------------------------------------------
    out_bytes = [0.0] * len(ops)
    copies = [0] * len(units)
    for i in fwd_idx:
        o = ops[i]
        if o.op_class == "copy" and o.module in module_role:  # weight and input casts of linear layers
            k, n = module_feat[o.module]
            shp = tuple(o.output_shapes[0]) if o.output_shapes else ()
            if shp in ((k, n), (n, k), (n,)):  # a weight (or bias) cast: saved once per step, not an activation
                copies[op_unit[i]] += int(o.bytes_written)
            continue
        # eager: every output an op makes; compiled: what its kernel writes, less what the partitioner recomputes
        # (workload/fusion.py), as the step's saved total is then net of it
        out_bytes[i] = float(_eager_written(o) if wl.recomputed_bytes <= 0 else o.bytes_written)
    tot = sum(out_bytes) or 1.0
    share = tuple(b / tot for b in out_bytes)
    # one hidden state of a layer: tokens x h x the residual stream's item size
    res_bytes = 0
    if h and tokens:
        for i in fwd_idx:
            o = ops[i]
            if 0 < op_unit[i] < len(units) - 1 and o.output_shapes and o.output_shapes[0] and \
                    _numel(o.output_shapes[0]) == tokens * h and o.op_class in ("elementwise", "norm"):
                res_bytes = int(_eager_written(o) * tokens * h / max(1, sum(_numel(s) for s in o.output_shapes)))
                break
        res_bytes = res_bytes or tokens * h * 2
    core = [c and ops[i].module not in module_role for i, c in enumerate(core)]
    module_split = {}
    for m, role in module_role.items():
        if role in ("col", "row"):
            k, n = module_feat[m]
            module_split[m] = n if role == "col" else k
    carries = [roles[i] in ("col", "row") and not split[i] and ops[i].module in module_split
               and any(module_split[ops[i].module] in sh for sh in (*ops[i].input_shapes, *ops[i].output_shapes))
               for i in range(len(ops))]
    # op-level selective checkpointing: every other aten.mm of a layer (1st, 3rd, ...) and its attention kernels
    saved = [False] * len(ops)
    for u, idxs in by_unit_fwd.items():
        if not 0 < u < len(units) - 1:
            continue
        mms = 0
        for i in idxs:
            if ops[i].aten == "mm":
                mms += 1
                saved[i] = mms % 2 == 1
            elif ops[i].op_class == "attention":
                saved[i] = True
    op_roles = tuple(OpRole(op_unit[i], roles[i], split[i], split_size[i], core[i], expert[i], carries[i], saved[i])
                     for i in range(len(ops)))
    moe_layers = len({op_unit[i] for i in range(len(ops)) if expert[i] and 0 < op_unit[i] < len(units) - 1})
    experts = max((ops[i].input_shapes[1][0] for i in fwd_idx if expert[i] and ops[i].aten == "bmm"
                   and len(ops[i].input_shapes) >= 2 and len(ops[i].input_shapes[1]) == 3), default=0)
    tp_width = tuple(math.gcd(*width[u]) if width[u] else 0 for u in range(len(units)))
    return ModelLayout(units=units, roles=op_roles, hidden=h, heads=heads, kv_heads=kv, tokens=int(tokens),
                       seq_len=seq, unit_params=tuple(unit_params), expert_params=tuple(expert_params),
                       tied_params=tied, act_share=share, row_linears=tuple(row_count), col_groups=tuple(col_groups),
                       tp_width=tp_width, vocab=vocab, residual_bytes=int(res_bytes), moe_layers=moe_layers,
                       batch=max(1, wl.batch_size), weight_copy_bytes=tuple(copies), experts=int(experts),
                       attention_ops=tuple(sum(1 for i in fwd_idx if op_unit[i] == u and ops[i].op_class == "attention")
                                           for u in range(len(units))),
                       saved_bytes=tuple(float(_eager_written(ops[i])) if saved[i] else 0.0 for i in range(len(ops))))


def _eager_written(op) -> int:
    """Bytes ``op`` writes as eager PyTorch runs it: the outputs it makes, also when a fused kernel keeps some in
    registers (workload/fusion.py), so that activation memory does not depend on the kernel mode."""
    return sum(b for b, _ in op.outs) if op.fusion else op.bytes_written


def _gemm_split(op, role: str, k_f: int, n_f: int, tokens: int) -> tuple[str, int]:
    """Which of a linear layer's GEMM's (m, n, k) carries the split features, and their size.

    Column-parallel layers split the output features ``n_f``, row-parallel ones the input features ``k_f``.
    Forward ``X (T, k_f) @ W (k_f, n_f)``: column splits n, row splits k. Gradient of the input
    ``dY (T, n_f) @ W^T``: column splits k, row splits n. Gradient of the weight (contracted over the tokens):
    the dimension of the weight's size ``n_f`` (column) or ``k_f`` (row)."""
    from traincast.predict.roofline import gemm_dims

    s = n_f if role == "col" else k_f
    dims = gemm_dims(op.aten, op.input_shapes, op.output_shapes)
    if dims is None:
        return "", s
    m, n, k = dims
    if op.phase == "forward":
        return ("n" if role == "col" else "k"), s
    if k == tokens and (m != tokens or n != tokens):  # weight gradient
        if role == "col":
            return ("m" if m == s else "n"), s
        return ("n" if n == s else "m"), s
    return ("k" if role == "col" else "n"), s
