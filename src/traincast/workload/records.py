"""Records of one training step: the ops, their costs, the memory it needs."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from traincast.workload.precision import PRECISIONS

PHASES = ("forward", "backward", "optimizer")

# Op classes the predictors know. Each traced op is put in exactly one.
OP_CLASSES = (
    "matmul",  # mm, addmm, bmm, baddbmm: tensor-core eligible
    "conv",  # convolution and its backward: tensor-core eligible (cuDNN)
    "attention",  # fused scaled-dot-product attention kernels
    "norm",  # batch/layer/group norm fwd and bwd
    "reduction",  # softmax, log-softmax, losses, sums, means
    "pool",  # max/avg pooling fwd and bwd
    "elementwise",  # activations, adds, muls, dropout, casts
    "embedding",  # gathers and scatters
    "optimizer",  # parameter updates (foreach kernels)
    "copy",  # copies, clones, fills
)


def repeated_blocks(ops) -> dict[str, tuple[str, int]]:
    """Each module path of ``ops`` -> (its row in a per-block summary, how many modules that row folds).

    A numbered module with submodules (``model.layers.7``, ``layer1.1``) whose siblings under the same parent
    have the same submodules (the same set of paths below it that run ops: a stack of transformer blocks, a
    ResNet stage's repeated blocks) is one of a repeated block; its number becomes ``*``, and its submodules are
    summed one level below it (``model.layers.*.mlp``, ``model.layers.*.self_attn``), so the row holds every
    copy. A numbered module without such a sibling keeps its number (a ResNet stage's first block, which has
    the downsampling branch), and so does a numbered leaf (VGG's ``features.0`` is a convolution,
    ``features.1`` an activation: a row each). Paths without numbers, and pseudo-modules such as
    ``(optimizer)``, stay as they are, with a count of 1."""
    sig: dict[tuple[str, str], set] = defaultdict(set)  # (parent path, index) -> {path below it}
    paths = set()
    for o in ops:
        paths.add(o.module)
        parts = o.module.split(".")
        for i, p in enumerate(parts):
            if p.isdigit() and i:
                sig[(".".join(parts[:i]), p)].add(".".join(parts[i + 1:]))
    groups: dict[tuple[str, frozenset], list[str]] = defaultdict(list)
    for (parent, idx), s in sig.items():
        if s != {""}:  # has submodules
            groups[(parent, frozenset(s))].append(idx)
    repeated = {(parent, idx) for (parent, _), idxs in groups.items() if len(idxs) > 1 for idx in idxs}
    out: dict[str, tuple[str, int]] = {}
    folded: dict[str, set] = defaultdict(set)
    for path in paths:
        parts = path.split(".")
        key, last = [], None
        for i, p in enumerate(parts):
            if p.isdigit() and i and (".".join(parts[:i]), p) in repeated:
                key.append("*")
                last = i
            else:
                key.append(p)
        if last is None:
            out[path] = (path, 1)
            continue
        cut = last + 2  # one level below the innermost repeated block
        row = ".".join(key[:cut])
        out[path] = (row, 0)
        folded[row].add(".".join(parts[:last + 1]))
    return {path: (row, n or len(folded[row])) for path, (row, n) in out.items()}


@dataclass(frozen=True)
class OpRecord:
    """One aten op executed in a training step.

    ``flops`` counts multiply-adds as two FLOPs. ``bytes_read`` and
    ``bytes_written`` are the sizes of the tensors the op reads and writes
    (views cost nothing and are not recorded). ``n_tensors`` is the number of
    tensors a multi-tensor (foreach) kernel processes; 1 for ordinary ops.
    """

    aten: str
    phase: str
    module: str
    op_class: str
    flops: int
    bytes_read: int
    bytes_written: int
    dtype: str
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    n_tensors: int = 1
    # the op's non-tensor arguments in call order (stride, padding, dilation,
    # transposed, output_padding, groups for a convolution), JSON-able
    args: tuple = ()
    # data flow, for kernel fusion (workload/fusion.py): per distinct input tensor (producer op index, its output
    # slot, bytes read, storage offset); a tensor no recorded op wrote (a parameter, the data, a buffer) has a
    # negative producer, one per storage; per output (bytes written, 1 when it rewrites an input's storage)
    src: tuple = ()
    outs: tuple = ()
    # 0: a kernel of its own; 1: the first op of a fused kernel; 2: an op inside a fused kernel (no launch of
    # its own; its bytes are those the fused kernel moves for it)
    fusion: int = 0
    # a convolution's or batch norm's activation layout: "" (the model's, PyTorch's default NCHW) or "nhwc"
    # (channels_last)
    layout: str = ""

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written

    def to_dict(self) -> dict:
        d = asdict(self)
        d["input_shapes"] = [list(s) for s in self.input_shapes]
        d["output_shapes"] = [list(s) for s in self.output_shapes]
        d["args"] = list(self.args)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> OpRecord:
        d = dict(d)
        d["input_shapes"] = tuple(tuple(s) for s in d["input_shapes"])
        d["output_shapes"] = tuple(tuple(s) for s in d["output_shapes"])
        d["args"] = tuple(tuple(a) if isinstance(a, list) else a for a in d.get("args", ()))
        d["src"] = tuple(tuple(x) for x in d.get("src", ()))
        d["outs"] = tuple(tuple(x) for x in d.get("outs", ()))
        return cls(**d)


@dataclass(frozen=True)
class MemoryFootprint:
    """Bytes one GPU holds during a training step (before any sharding)."""

    parameter_bytes: int
    gradient_bytes: int
    optimizer_state_bytes: int
    activation_bytes: int  # tensors saved for backward, at the traced batch
    transient_bytes: int  # largest short-lived working set of a single op
    batch_size: int

    @property
    def peak_bytes(self) -> int:
        """The peak with the gradients held through the step (data-parallel replicas: DDP's gradient buckets)."""
        return (
            self.parameter_bytes
            + self.gradient_bytes
            + self.optimizer_state_bytes
            + self.activation_bytes
            + self.transient_bytes
        )

    def peak(self, grads_held: bool = True) -> int:
        """The step's peak. ``grads_held=False``: one GPU without data parallelism, where ``zero_grad`` sets the
        gradients to None (PyTorch's default) and the backward pass makes them as it frees the activations, so
        the two peak apart: the activations at the start of the backward pass, the gradients at its end."""
        if grads_held:
            return self.peak_bytes
        return (self.parameter_bytes + self.optimizer_state_bytes
                + max(self.activation_bytes, self.gradient_bytes) + self.transient_bytes)

    @property
    def fixed_bytes(self) -> int:
        """The part that does not grow with the batch."""
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_state_bytes

    @property
    def per_sample_bytes(self) -> float:
        return (self.activation_bytes + self.transient_bytes) / self.batch_size

    def at_batch(self, batch_size: int) -> int:
        """Peak bytes at another per-GPU batch (activations scale linearly)."""
        return int(self.fixed_bytes + self.per_sample_bytes * batch_size)

    def max_batch(self, capacity_bytes: int, grads_held: bool = True) -> int:
        """Largest per-GPU batch whose peak (:meth:`peak`) fits in ``capacity_bytes`` (0 if none)."""
        if self.per_sample_bytes <= 0:
            return 0
        if grads_held:
            room = capacity_bytes - self.fixed_bytes
            return int(room // self.per_sample_bytes) if room > 0 else 0
        room = capacity_bytes - self.parameter_bytes - self.optimizer_state_bytes
        if room <= 0:
            return 0
        # activations and the transient grow with the batch, the gradients do not: both ends of the backward fit
        b = room // self.per_sample_bytes
        per_t = self.transient_bytes / self.batch_size
        if per_t > 0:
            b = min(b, (room - self.gradient_bytes) // per_t)
        elif room < self.gradient_bytes:
            b = 0
        return max(0, int(b))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["peak_bytes"] = self.peak_bytes
        return d


@dataclass(frozen=True)
class RecurrentCall:
    """One call of an ``nn.LSTM``/``GRU``/``RNN`` in the traced step (its shape and settings), for predictors
    that time recurrent layers as cuDNN runs them (:mod:`traincast.predict.rnn`)."""

    module: str
    mode: str  # LSTM | GRU | RNN_TANH | RNN_RELU
    input_size: int
    hidden_size: int
    num_layers: int
    bidirectional: bool
    seq_len: int
    batch: int
    dtype: str
    training: bool = True


@dataclass(frozen=True)
class Workload:
    """Every op of one training step of a model at one per-device batch size, and how the trace was made."""

    model: str
    batch_size: int
    optimizer: str
    ops: tuple[OpRecord, ...]
    memory: MemoryFootprint
    parameters: int  # all parameters
    trainable_parameters: int
    input_description: str = ""
    samples_per_step: int = 0  # samples consumed per step per device (batch, x2 for GAN steps...)
    precision: str = "fp32"
    fused_attention: bool = False
    recurrent_calls: tuple[RecurrentCall, ...] = ()
    # expert GEMMs per step timed with the routed tokens split evenly over the experts (mixture of experts)
    balanced_expert_gemms: int = 0
    # data-dependent Python reads (``if mask.all():``) answered as for a plain dense batch
    data_dependent_reads: int = 0
    # data-dependent selections (torch.nonzero / where / boolean masks) given their expected sizes
    # (workload/selections.py): from a mixture-of-experts router's balanced share, or as full (a dense batch)
    routed_selections: int = 0
    dense_selections: int = 0
    channels_last_strided_convs: int = 0  # forward convolutions fed channels-last strides in an NCHW shape
    unregistered_ops: tuple[tuple[str, int], ...] = ()  # aten ops without a FLOP formula, with their counts
    fused_kernels: tuple[tuple[str, int], ...] = ()  # fused kernels (workload/fused.py) run per step, by name
    param_tensors: int = 0  # trainable parameter tensors
    trace_s: float = field(default=0.0, compare=False)
    interpolated_from: tuple[int, int] | None = None  # the two traced batch sizes this one is interpolated from
    kernels: str = "eager"  # workload/fusion.py's KERNEL_MODES: how the step's kernels run
    fused_pointwise: tuple[int, int] = (0, 0)  # compiled: (ops run inside fused kernels, fused kernels)
    # compiled: bytes of the activations eager autograd saves that the compiler recomputes in the backward pass
    # instead (workload/fusion.py, ``partition_saved``); memory.activation_bytes is already net of them
    recomputed_bytes: int = 0
    memory_format: str = "contiguous"  # workload/layout.py: "channels_last" when convolutions run NHWC
    # which fused attention kernel PyTorch's SDPA runs (workload/fusion.py, SDPA_CHOICES): "auto" as current PyTorch
    # picks by GPU (cuDNN's on Hopper and data-centre Blackwell), "flash" (older PyTorch), "cudnn"
    sdpa: str = "auto"

    # --- aggregates -----------------------------------------------------
    def flops(self, phase: str | None = None) -> int:
        return sum(o.flops for o in self.ops if phase is None or o.phase == phase)

    def model_flops(self) -> int:
        """The model FLOPs of the traced step, what MFU counts: its forward and backward passes (not the optimizer;
        recomputation that a parallel layout adds is not in the trace)."""
        return sum(o.flops for o in self.ops if o.phase in ("forward", "backward"))

    def bytes(self, phase: str | None = None) -> int:
        return sum(o.bytes_total for o in self.ops if phase is None or o.phase == phase)

    def by_phase(self) -> dict[str, dict[str, int]]:
        out = {p: {"flops": 0, "bytes": 0, "ops": 0} for p in PHASES}
        for o in self.ops:
            d = out[o.phase]
            d["flops"] += o.flops
            d["bytes"] += o.bytes_total
            d["ops"] += 1
        return out

    def by_module(self, depth: int | None = None) -> dict[str, int]:
        """FLOPs per module path (optionally truncated to ``depth`` dots)."""
        out: dict[str, int] = defaultdict(int)
        for o in self.ops:
            key = o.module
            if depth is not None:
                key = ".".join(key.split(".")[: depth + 1])
            out[key] += o.flops
        return dict(out)

    def kernel_notes(self) -> list[str]:
        """Forecast notes naming the fused kernels this step runs ("attention: flash, fused") and saying which
        shapes the trace assumed where they depend on values (mixture-of-experts routing, boolean masks)."""
        notes: list[str] = []
        if self.fused_kernels:
            from traincast.workload.fused import kernel_notes

            notes += kernel_notes(dict(self.fused_kernels))
        if self.balanced_expert_gemms:
            notes.append(f"mixture of experts: {self.balanced_expert_gemms} expert GEMMs per forward timed with the "
                         "routed tokens split evenly over the experts (a router that loads them unevenly is slower)")
        if self.routed_selections:
            notes.append(f"mixture of experts: {self.routed_selections} per-expert token selections per step sized as "
                         "balanced routing (each expert gets its even share of the routed tokens; a router that loads "
                         "them unevenly is slower)")
        if self.kernels != "eager" and self.fused_pointwise[1]:
            n, k = self.fused_pointwise
            notes.append(f"kernels {self.kernels}: {n} element-wise, cast, norm and reduction ops run as {k} fused kernels "
                         "(each reads its inputs once and writes what later kernels read)")
        if self.kernels != "eager" and self.recomputed_bytes:
            notes.append(f"kernels {self.kernels}: {self.recomputed_bytes / 2**30:.2f} GiB of the activations eager "
                         "autograd saves are recomputed in the backward pass from the fused kernels' inputs instead "
                         "(the min cut a compiler's partitioner takes), at this batch")
        if self.channels_last_strided_convs and self.memory_format != "channels_last":
            notes.append(f"{self.channels_last_strided_convs} convolutions per forward get channels-last-strided inputs "
                         "(a permute in the model, as ConvNeXt's blocks make): PyTorch runs its channels-last kernels "
                         "for them (cuDNN's, oneDNN's), which the roofline times at its convolution efficiencies, not "
                         "by a model of those kernels (cuDNN's FP32 7x7 depthwise weight gradients run far slower; on "
                         "CPUs the depthwise terms measured on NCHW kernels apply): the largest error left on "
                         "ConvNeXt-T (docs/gpu-accuracy.md)")
        fp8 = self.precision in PRECISIONS and PRECISIONS.get(self.precision).fp8 is not None
        if self.kernels == "eager" and fp8:
            notes.append("FP8 with eager kernels: each cast and amax reduction a kernel of its own, issued as an op; "
                         "torchao's float8 without torch.compile issues several small ops per cast from Python and ran "
                         "0.56x BF16 on an H200 (docs/gpu-accuracy.md): for torchao, forecast --kernels compiled")
        if self.dense_selections:
            notes.append(f"{self.dense_selections} data-dependent selections per step (torch.nonzero / where / boolean "
                         "masks) sized as a dense batch: every position selected")
        return notes

    @property
    def gradient_bytes(self) -> int:
        return self.memory.gradient_bytes

    # --- serialisation ---------------------------------------------------
    def to_dict(self, with_ops: bool = True) -> dict:
        d = {
            "model": self.model,
            "batch_size": self.batch_size,
            "optimizer": self.optimizer,
            "parameters": self.parameters,
            "trainable_parameters": self.trainable_parameters,
            "input_description": self.input_description,
            "samples_per_step": self.samples_per_step,
            "flops": {p: self.flops(p) for p in PHASES} | {"total": self.flops()},
            "bytes": {p: self.bytes(p) for p in PHASES} | {"total": self.bytes()},
            "n_ops": len(self.ops),
            "memory": self.memory.to_dict(),
            "precision": self.precision,
            "fused_attention": self.fused_attention,
            "recurrent_calls": [asdict(c) for c in self.recurrent_calls],
            "balanced_expert_gemms": self.balanced_expert_gemms,
            "data_dependent_reads": self.data_dependent_reads,
            "routed_selections": self.routed_selections,
            "dense_selections": self.dense_selections,
            "channels_last_strided_convs": self.channels_last_strided_convs,
            "unregistered_ops": dict(self.unregistered_ops),
            "fused_kernels": dict(self.fused_kernels),
            "param_tensors": self.param_tensors,
            "trace_s": self.trace_s,
            "interpolated_from": list(self.interpolated_from) if self.interpolated_from else None,
            "kernels": self.kernels,
            "fused_pointwise": list(self.fused_pointwise),
            "recomputed_bytes": self.recomputed_bytes,
            "memory_format": self.memory_format,
            "sdpa": self.sdpa,
        }
        if with_ops:
            d["ops"] = [o.to_dict() for o in self.ops]
        return d

    def to_json(self, path: str | Path | None = None, **kw) -> str:
        text = json.dumps(self.to_dict(), **kw)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, d: dict) -> Workload:
        mem = dict(d["memory"])
        mem.pop("peak_bytes", None)
        info = dict(d.get("meta") or {})  # workloads written before the typed fields kept them in "meta"
        info.update({k: d[k] for k in ("precision", "fused_attention", "recurrent_calls", "balanced_expert_gemms",
                                        "data_dependent_reads", "routed_selections", "dense_selections",
                                        "channels_last_strided_convs",
                                        "unregistered_ops", "fused_kernels", "param_tensors", "trace_s",
                                        "interpolated_from", "kernels", "fused_pointwise", "recomputed_bytes",
                                        "memory_format", "sdpa")
                     if k in d})
        calls = info.get("recurrent_calls", info.get("rnn_calls")) or []
        interp = info.get("interpolated_from")
        return cls(
            model=d["model"],
            batch_size=d["batch_size"],
            optimizer=d["optimizer"],
            ops=tuple(OpRecord.from_dict(o) for o in d.get("ops", [])),
            memory=MemoryFootprint(**mem),
            parameters=d["parameters"],
            trainable_parameters=d["trainable_parameters"],
            input_description=d.get("input_description", ""),
            samples_per_step=d.get("samples_per_step", d["batch_size"]),
            precision=str(info.get("precision", "fp32")),
            fused_attention=bool(info.get("fused_attention", False)),
            recurrent_calls=tuple(RecurrentCall(**c) for c in calls),
            balanced_expert_gemms=int(info.get("balanced_expert_gemms", 0) or 0),
            data_dependent_reads=int(info.get("data_dependent_reads", 0) or 0),
            routed_selections=int(info.get("routed_selections", 0) or 0),
            dense_selections=int(info.get("dense_selections", 0) or 0),
            channels_last_strided_convs=int(info.get("channels_last_strided_convs", 0) or 0),
            unregistered_ops=tuple(sorted((str(k), int(v)) for k, v in (info.get("unregistered_ops") or {}).items())),
            fused_kernels=tuple(sorted((str(k), int(v)) for k, v in (info.get("fused_kernels") or {}).items())),
            param_tensors=int(info.get("param_tensors", 0) or 0),
            trace_s=float(info.get("trace_s", 0.0) or 0.0),
            interpolated_from=tuple(interp) if interp else None,
            kernels=str(info.get("kernels", "eager")),
            fused_pointwise=tuple(int(x) for x in info.get("fused_pointwise", (0, 0))),
            recomputed_bytes=int(info.get("recomputed_bytes", 0) or 0),
            memory_format=str(info.get("memory_format", "contiguous")),
            sdpa=str(info.get("sdpa", "auto")),
        )

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> Workload:
        p = Path(text_or_path) if not str(text_or_path).lstrip().startswith("{") else None
        text = p.read_text() if p is not None else str(text_or_path)
        return cls.from_dict(json.loads(text))
