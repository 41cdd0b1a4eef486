"""Precisions: how a training step's arithmetic is done, as PyTorch's switches set it.

One registry (``PRECISIONS``) names them; tracing (which ops autocast lowers), measuring (the backend
switches set around a real step) and prediction (which peak each op runs at) all read the same record.

- ``fp32``: PyTorch's defaults: cuDNN convolutions may use TF32 tensor cores
  (``torch.backends.cudnn.allow_tf32`` is True), matmuls stay FP32
  (``torch.backends.cuda.matmul.allow_tf32`` is False).
- ``fp32-strict``: TF32 off everywhere (both switches False): what measurements of "fp32" that contain no
  tensor-core kernel ran (NeuSight's kernels, for example); fp32 GEMMs stay off matrix units.
- ``tf32``: TF32 for matmuls and convolutions.
- ``amp-fp16`` / ``amp-bf16``: ``torch.autocast`` with that dtype; what stays fp32 follows ``fp32``.
- ``bf16`` / ``fp16``: the model itself in that dtype (weights, activations, gradients), with fp32 master
  weights in the optimizer: each step copies the half gradients into the masters' fp32 gradients, steps the
  optimizer on the masters, and copies them back into the half weights (Megatron-LM's ``--bf16``/``--fp16``,
  DeepSpeed, FSDP's ``MixedPrecision(param_dtype=...)``, torchtitan, apex O2). No autocast: norms, softmax and
  the residual stream run in half too; the loss is computed in fp32 as these frameworks and transformers do.
  Memory as in the ZeRO paper's accounting: 2 + 2 bytes of half weights and gradients, 12 of fp32 master
  weights and Adam moments per parameter.
- ``pure-bf16``: the model and the optimizer's states in bfloat16, no master weights: the optimizer steps the
  bf16 weights themselves (a model loaded with ``torch_dtype=torch.bfloat16`` or ``model.to(torch.bfloat16)`` and
  trained with a plain optimizer, no autocast): 2 + 2 bytes of weights and gradients and 4 of Adam moments per
  parameter, and no copies between masters and weights.
- ``fp8`` / ``fp8-current`` / ``mxfp8``: ``bf16`` (the half model: Transformer Engine under Megatron/NeMo and
  torchao float8 under FSDP2 both run a bf16 model with fp32 master weights) with the linear layers' GEMMs
  (forward, data gradient and weight gradient) on FP8 tensor cores, as NVIDIA Transformer Engine runs them
  (torchao float8 the same way): ``fp8`` delayed per-tensor scaling (the amax of earlier steps; the amax comes out
  of the cast kernel itself), ``fp8-current`` current per-tensor scaling (one more pass over each tensor for its
  amax before the cast), ``mxfp8`` MX block scaling (one E8M0 scale per 32 values, Blackwell). Attention, norms
  and the element-wise rest stay BF16 (``fp8_attention=True`` in :func:`apply_fp8`: the attention core too). The
  linear layers of the repeated blocks only: the embedding and the output head stay BF16 (Transformer Engine's
  and torchtitan's defaults). :func:`apply_fp8` turns a traced ``bf16`` (or ``amp-bf16``) step into the FP8 one:
  the GEMMs read 1-byte operands and run at the FP8 peak; each linear layer gains its casts (input and output
  gradient: cast + transpose per micro-batch, a copy for the other GEMM layout; the weight: cast + transpose once
  per step, replacing autocast's BF16 weight copy or, in a half model, added) and its amax work; the saved linear
  inputs are kept in FP8.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from traincast.registry import Registry


@dataclass(frozen=True)
class Precision:
    name: str
    autocast: str | None  # the half dtype autocast gives matmuls, convolutions, attention: fp16 | bf16 | None
    tf32_matmul: bool  # torch.backends.cuda.matmul.allow_tf32
    tf32_conv: bool  # torch.backends.cudnn.allow_tf32
    fp32_matrix: bool  # fp32 GEMMs and convolutions may run on full-FP32 matrix units (AMD CDNA MFMA)
    fp8: "Fp8Recipe | None" = None  # the linear layers' GEMMs in FP8 with this scaling recipe
    params: str | None = None  # the model itself in this half dtype (bf16 | fp16), fp32 master weights
    masters: bool = True  # a half model's optimizer steps fp32 master weights (False: the half weights themselves)

    @property
    def params_dtype(self):
        """The torch dtype of the model's weights and activations under a half-model precision (else None)."""
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.params or "")

    @property
    def is_mixed(self) -> bool:
        return self.autocast is not None

    def tf32_for(self, op_class: str) -> bool:
        """Whether an fp32 op of ``op_class`` may run on TF32 tensor cores under this precision."""
        if op_class == "conv":
            return self.tf32_conv
        return self.tf32_matmul and op_class in ("matmul", "attention")

    @contextlib.contextmanager
    def backend_switches(self):
        """Set PyTorch's TF32 switches to this precision's for a real run; restore them after."""
        import torch

        old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = self.tf32_matmul
        torch.backends.cudnn.allow_tf32 = self.tf32_conv
        try:
            yield self
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@dataclass(frozen=True)
class Fp8Recipe:
    """How FP8 GEMMs are scaled (Transformer Engine's recipes).

    ``block``: values sharing one scale (0: one scale per tensor); ``amax_pass``: the cast first reads the tensor
    once more for its amax (current scaling; delayed scaling takes the amax of earlier steps and the cast kernel
    records the new one as it goes; block scaling computes each block's scale inside the cast); ``transpose``:
    Hopper's FP8 GEMMs take only the "TN" layout, so the weight gradient needs transposed FP8 copies of the input
    and the output gradient (written by the same cast kernel: cast + transpose); MXFP8 writes a row-wise and a
    column-wise quantised copy instead; ``device_peak``: the catalog's peak it needs (``fp8`` or ``mxfp8``)."""

    name: str
    block: int
    amax_pass: bool
    transpose: bool
    device_peak: str

    def copy_bytes_per_value(self) -> float:
        """Bytes written per value a cast quantises: the FP8 value, its second layout, the block scales."""
        per = 1.0 + (1.0 / self.block if self.block else 0.0)
        return 2 * per if self.transpose else per


FP8_DELAYED = Fp8Recipe("delayed per-tensor scaling", block=0, amax_pass=False, transpose=True, device_peak="fp8")
FP8_CURRENT = Fp8Recipe("current per-tensor scaling", block=0, amax_pass=True, transpose=True, device_peak="fp8")
MXFP8 = Fp8Recipe("MXFP8 block scaling (32 values per E8M0 scale)", block=32, amax_pass=False, transpose=True,
                  device_peak="mxfp8")


PRECISIONS: Registry[Precision] = Registry("precision")


def _add(name: str, help: str, **kw) -> None:
    PRECISIONS.add(name, Precision(name=name, **kw), help=help)


_add("fp32", "PyTorch defaults: convolutions on TF32 tensor cores where the GPU has them, matmuls FP32",
     autocast=None, tf32_matmul=False, tf32_conv=True, fp32_matrix=True)
_add("fp32-strict", "TF32 off everywhere (allow_tf32 = False for matmuls and cuDNN)",
     autocast=None, tf32_matmul=False, tf32_conv=False, fp32_matrix=False)
_add("tf32", "matmuls and convolutions on TF32 tensor cores",
     autocast=None, tf32_matmul=True, tf32_conv=True, fp32_matrix=True)
_add("amp-fp16", "torch.autocast to float16 (the rest as fp32)",
     autocast="fp16", tf32_matmul=False, tf32_conv=True, fp32_matrix=True)
_add("amp-bf16", "torch.autocast to bfloat16 (the rest as fp32)",
     autocast="bf16", tf32_matmul=False, tf32_conv=True, fp32_matrix=True)
_add("bf16", "the model in bfloat16 with fp32 master weights in the optimizer (Megatron-LM --bf16, DeepSpeed bf16, "
     "FSDP MixedPrecision(param_dtype=bfloat16), torchtitan): every weight and activation bf16, the loss fp32",
     autocast=None, tf32_matmul=False, tf32_conv=True, fp32_matrix=True, params="bf16")
_add("pure-bf16", "the model and its optimizer states in bfloat16, no fp32 master weights (model.to(torch.bfloat16) "
     "or torch_dtype=torch.bfloat16 with a plain optimizer, no autocast)",
     autocast=None, tf32_matmul=False, tf32_conv=True, fp32_matrix=True, params="bf16", masters=False)
_add("fp16", "the model in float16 with fp32 master weights (Megatron-LM --fp16, DeepSpeed fp16, apex O2): every "
     "weight and activation fp16, the loss fp32 (loss scaling's checks not counted)",
     autocast=None, tf32_matmul=False, tf32_conv=True, fp32_matrix=True, params="fp16")


_add("fp8", "FP8 linear-layer GEMMs, delayed per-tensor scaling (Transformer Engine's default recipe); the rest "
     "bf16 (the model in bf16 with fp32 master weights, as Megatron/NeMo and FSDP2 run it); needs FP8 tensor cores "
     "(Hopper, Ada, Blackwell)",
     autocast=None, tf32_matmul=False, tf32_conv=True, fp32_matrix=True, fp8=FP8_DELAYED, params="bf16")
_add("fp8-current", "FP8 linear-layer GEMMs, current per-tensor scaling (an amax pass before each cast; "
     "torchao float8's default)", autocast=None, tf32_matmul=False, tf32_conv=True, fp32_matrix=True,
     fp8=FP8_CURRENT, params="bf16")
_add("mxfp8", "FP8 linear-layer GEMMs with MX block scaling (1 scale per 32 values); Blackwell only",
     autocast=None, tf32_matmul=False, tf32_conv=True, fp32_matrix=True, fp8=MXFP8, params="bf16")


def get_precision(name: str | Precision) -> Precision:
    """The registered precision ``name`` (UnknownNameError with did-you-mean otherwise)."""
    return name if isinstance(name, Precision) else PRECISIONS.get(name)


# --- FP8: the traced bf16 step as Transformer Engine runs it --------------------------------------------------
_LAYER = re.compile(r"\.\d+(\.|$)")  # a module inside an indexed container: a repeated block (layer)
_HALF = ("bf16", "fp16")
AMAX_HISTORY = 1024  # Transformer Engine's DelayedScaling default amax_history_len (recipe.py)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _is_linear_gemm(o) -> bool:
    """A 2-D GEMM (mm / addmm) of a linear layer inside a repeated block, in half precision."""
    return (o.op_class == "matmul" and o.aten in ("mm", "addmm") and o.dtype in _HALF and o.phase != "optimizer"
            and bool(_LAYER.search(o.module)) and len(o.input_shapes) >= 2
            and all(len(s) == 2 for s in o.input_shapes[-2:]))


def fp8_linear_modules(ops) -> dict:
    """Linear modules whose GEMMs go to FP8: module -> (M, K, N) of its first forward GEMM."""
    out: dict = {}
    for o in ops:
        if o.phase == "forward" and _is_linear_gemm(o) and o.module not in out:
            (m, k), (_, n) = o.input_shapes[-2], o.input_shapes[-1]
            out[o.module] = (int(m), int(k), int(n))
    return out


def apply_fp8(wl, precision: "str | Precision | None" = None, fp8_attention: bool = False):
    """``wl`` (traced under ``bf16``, the half model FP8 precisions run on, or ``amp-bf16``) as the FP8 precision
    ``precision`` runs it (``wl.precision`` when not given; ``wl`` unchanged for precisions without FP8).

    Per linear layer of the repeated blocks (forward GEMM ``M x K`` input by ``K x N`` weight):

    - its forward, data-gradient and weight-gradient GEMMs run in FP8: dtype ``fp8``, operands read at 1 byte
      (+ 1/32 for MXFP8's block scales), outputs as traced (BF16);
    - ``fp8_cast_transpose`` of the input (per micro-batch): reads the BF16 input (2MK bytes), writes the FP8 input
      and its transpose for the weight gradient (2MK; MXFP8: row- and column-wise copies with scales);
    - ``fp8_cast_transpose`` of the output gradient in the backward pass: reads 2MN, writes 2MN the same way;
    - the weight: autocast's BF16 weight copy becomes the FP8 weight and its transpose (same 2 bytes per weight);
      in a half model (``bf16``: no autocast copy) a cast of the BF16 weight to FP8 and its transpose is added
      before the module's first forward GEMM, once per step, its output kept for the backward pass;
    - current scaling: an ``fp8_amax`` reduction pass over each tensor before its cast (reads it once more);
    - delayed scaling: one ``fp8_amax_scale_update`` per step over every FP8 tensor's amax history
      (Transformer Engine's fused update, 3 tensors per layer, history of 1,024);
    - memory: the saved linear inputs are kept in FP8 (1 byte, MXFP8 1 + 1/32) instead of BF16; the weight copies
      as written above; parameters, gradients and optimizer states stay as traced (FP32 master weights).

    ``fp8_attention``: the attention core's kernels run in FP8 too (cuDNN FP8 attention)."""
    from dataclasses import replace

    from traincast.workload.records import OpRecord

    prec = get_precision(precision if precision is not None else wl.precision)
    rec = prec.fp8
    if rec is None:
        return wl
    mods = fp8_linear_modules(wl.ops)
    if not mods:
        return replace(wl, precision=prec.name)
    per_val = 1.0 + (1.0 / rec.block if rec.block else 0.0)  # bytes per FP8 value with its share of scales
    copy_bytes = rec.copy_bytes_per_value()

    def cast(module, phase, shape, src_item=2):
        n = _numel(shape)
        out = []
        if rec.amax_pass:
            out.append(OpRecord("fp8_amax", phase, module, "reduction", 0, int(n * src_item), 4, "bf16",
                                (tuple(shape),), ((),)))
        out.append(OpRecord("fp8_cast_transpose", phase, module, "copy", 0, int(n * src_item), int(n * copy_bytes),
                            "fp8", (tuple(shape),), (tuple(shape),) * (2 if rec.transpose else 1)))
        return out

    ops = []
    act_delta = 0.0
    # an eager trace's saved bytes hold autocast's weight copies (the parallel engine takes the copies out and
    # counts them once per step); a compiled one's hold none (its partitioner recomputes the casts,
    # workload/fusion.py), so the FP8 weight copies change them only in eager traces
    copies_saved = getattr(wl, "kernels", "eager") == "eager"
    bwd_cast_done: set = set()
    fp8_saved: set = set()  # the tensors (producer op, output slot) whose saved copy is already FP8
    weight_cast: set = set()  # modules whose weight has its FP8 copy this step
    for o in wl.ops:
        m = o.module
        if m in mods and o.phase != "optimizer":
            M, K, N = mods[m]
            if o.phase == "forward" and m not in weight_cast and _is_linear_gemm(o):
                # a half model (no autocast weight copy): the BF16 weight is cast to FP8 (and its transpose) once
                # per step before its first GEMM, and the FP8 copy is kept for the backward pass
                weight_cast.add(m)
                n = K * N
                ops.extend(cast(m, "forward", (K, N)))
                if copies_saved:
                    act_delta += n * copy_bytes
            if o.phase == "forward" and o.op_class == "copy" and o.aten == "_to_copy" and o.output_shapes and \
                    tuple(o.output_shapes[0]) in ((K, N), (N, K)):
                weight_cast.add(m)
                # autocast's weight copy -> the FP8 weight (and its transpose), cast once per step
                n = _numel(o.output_shapes[0])
                extra_read = o.bytes_read if rec.amax_pass else 0
                new_w = int(n * copy_bytes)
                if copies_saved:
                    act_delta += new_w - o.bytes_written
                ops.append(replace(o, aten="fp8_cast_transpose", dtype="fp8", bytes_written=new_w,
                                   bytes_read=o.bytes_read + extra_read))
                continue
            if _is_linear_gemm(o):
                ins = o.input_shapes
                opnd = sum(_numel(s) for s in ins[-2:])
                bias = o.bytes_read - 2 * opnd if o.aten == "addmm" else 0
                if o.phase == "forward":
                    bwd_cast_done.discard(m)
                    ops.extend(cast(m, "forward", ins[-2]))
                    # the saved input: FP8 instead of BF16, once per input tensor (q, k and v projections, or
                    # gate and up, read one normed input, which autograd saves once)
                    made_by = next(((p, slot) for p, slot, *_ in o.src if p >= 0), None)
                    if made_by is None or made_by not in fp8_saved:
                        if made_by is not None:
                            fp8_saved.add(made_by)
                        act_delta -= _numel(ins[-2]) * (2 - per_val)
                elif m not in bwd_cast_done:
                    bwd_cast_done.add(m)
                    ops.extend(cast(m, "backward", (M, N)))
                ops.append(replace(o, dtype="fp8", bytes_read=int(max(0, bias) + opnd * per_val)))
                continue
        if fp8_attention and o.op_class == "attention" and o.dtype in _HALF:
            ops.append(replace(o, dtype="fp8", bytes_read=o.bytes_read // 2))
            continue
        ops.append(o)
    if not rec.amax_pass and not rec.block:  # delayed scaling: the per-step amax-history and scale update
        n_t = 3 * len(mods)
        nbytes = n_t * AMAX_HISTORY * 4
        ops.append(OpRecord("fp8_amax_scale_update", "optimizer", "fp8", "reduction", 0, nbytes, nbytes, "fp32",
                            ((n_t, AMAX_HISTORY),), ((n_t, AMAX_HISTORY),), n_tensors=1))
    mem = replace(wl.memory, activation_bytes=max(0, int(wl.memory.activation_bytes + act_delta)))
    return replace(wl, ops=tuple(ops), memory=mem, precision=prec.name)
