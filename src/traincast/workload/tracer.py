"""Trace one training step on the meta device, op by op.

A ``TorchDispatchMode`` sees every aten op of the forward pass, the loss, the
backward pass (autograd runs on meta tensors too) and the optimizer step. No
memory is allocated and no arithmetic is done, so a 7-billion-parameter model
traces on a laptop. Each op becomes an ``OpRecord`` with its phase, module
path, shapes, dtype, FLOPs and bytes.

Mixed precision (``amp-fp16``/``amp-bf16``) follows ``torch.autocast``'s CUDA
rules op by op (:mod:`traincast.workload.autocast`: autocast itself does not
apply to meta tensors, so its policy runs at its place in the dispatcher). The
casts appear in the trace as the ``_to_copy`` ops they are on a GPU.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
from torch.utils.weak import WeakTensorKeyDictionary
from torch.utils.module_tracker import ModuleTracker

from traincast.workload import costs, fused
from traincast.workload.selections import ExpectedSelections, following_numbers
from traincast.workload.records import MemoryFootprint, OpRecord, RecurrentCall, Workload

_DTYPE_NAMES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
    torch.uint8: "uint8",
    torch.int8: "int8",
}


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def _tensors(obj) -> list[torch.Tensor]:
    """The tensors in an op's arguments or results (tuples, lists and dicts of them, as aten's schemas allow), in
    order: what ``tree_flatten`` finds there, without its cost on every op of a trace."""
    out: list[torch.Tensor] = []
    _collect(obj, out)
    return out


def _collect(obj, out: list) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _collect(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _collect(x, out)


def _scalar_args(args) -> tuple:
    """Non-tensor positional arguments, as plain JSON-able values."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            continue
        if isinstance(a, (list, tuple)):
            if any(isinstance(x, torch.Tensor) for x in a):
                continue
            out.append(tuple(int(x) if isinstance(x, (int, torch.SymInt)) else x for x in a))
        elif isinstance(a, (bool, int, float)) or a is None:
            out.append(a)
        elif isinstance(a, torch.dtype):
            out.append(dtype_name(a))
    return tuple(out)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


_NODE_KEY = "traincast_module"


class _Tracker(ModuleTracker):
    """torch's ModuleTracker, whose hooks also hold where no autograd graph is recorded: a module called with grad
    off (a reversible layer inside a custom autograd Function's forward, which recomputes it in the backward:
    Reformer) is entered and left by name, without the backward hooks that need a graph (PyTorch's own hooks
    assert there on a leaf that requires grad)."""

    def _fw_pre_hook(self, mod, input) -> None:
        if torch.is_grad_enabled():
            return super()._fw_pre_hook(mod, input)
        self._get_append_fn(self._get_mod_name(mod), False)()

    def _fw_post_hook(self, mod, input, output) -> None:
        if torch.is_grad_enabled():
            return super()._fw_post_hook(mod, input, output)
        self._get_pop_fn(self._get_mod_name(mod), False)()


_FOLLOW_MAX = 1 << 22  # elements of a meta tensor whose real values are followed
_NO_VALUES = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"})


@contextlib.contextmanager
def _node_creation_hook(hook):
    """``hook(node)`` on every autograd node created inside (a private PyTorch hook: skipped where absent)."""
    ag = torch._C._autograd
    if not (hasattr(ag, "_push_node_creation_hook") and hasattr(ag, "_pop_node_creation_hook")):
        yield
        return
    ag._push_node_creation_hook(hook)
    try:
        yield
    finally:
        ag._pop_node_creation_hook()


def _channels_last_strided(t) -> bool:
    """A 4-D tensor not contiguous in NCHW but in channels-last order (what a permute to NHWC and back leaves, as in
    ConvNeXt's blocks): PyTorch's convolutions then pick their channels-last kernels."""
    return (t.dim() == 4 and t.shape[1] > 1 and not t.is_contiguous()
            and t.is_contiguous(memory_format=torch.channels_last))


class _OpRecorder(TorchDispatchMode):
    """Records every aten op that is not a view or an allocation."""

    def __init__(self, tracker: ModuleTracker, root_name: str):
        super().__init__()
        self.tracker = tracker
        self.root_prefix = root_name + "."
        self.phase = "forward"
        self.ops: list[OpRecord] = []
        self.unregistered: Counter[str] = Counter()
        self.fused: Counter[str] = Counter()  # traincast:: fused kernels run, by name
        self.data_dependent = 0
        self.cl_strided_convs = 0  # forward convolutions whose input has channels-last strides in an NCHW shape
        self.writer: dict[int, tuple[int, int]] = {}  # storage -> (op index, output slot) that last wrote it
        # every storage a key above names, held for the trace: a storage's key is its address, which a storage
        # made after it was freed could take, and would then read as the same tensor (sources, values and the
        # compiled kernels' fusion built on them changed from run to run with the allocator's reuse)
        self._pinned: dict[int, object] = {}
        self.values = WeakTensorKeyDictionary()  # small meta tensors -> their real values (:meth:`_follow`)
        self.value_storages: set[int] = set()  # the storages of those tensors (a write into one drops its views')
        # tensors whose followed values come from stand-in indices (``ExpectedSelections.guessed``, shared): what is
        # computed from them is marked too, and no selection or size is taken from their values
        self.guessed = WeakTensorKeyDictionary()

    def _key(self, t: torch.Tensor) -> int:
        """:func:`_storage_key` of ``t``, its storage held until the trace ends so that no other takes its key."""
        key = _storage_key(t)
        if key not in self._pinned:
            try:
                self._pinned[key] = t.untyped_storage()
            except (RuntimeError, NotImplementedError, AttributeError):  # keyed by the tensor's id: hold the tensor
                self._pinned[key] = t
        return key

    def _follow(self, func, args, kwargs, out, ins: list[torch.Tensor], results: list[torch.Tensor]) -> None:
        """Keep the real values of small meta tensors computed only from real values (CPU inputs moved to meta,
        ``arange``/``ones``/``full``/``zeros`` made on meta, and what follows from them: masks, positions), by
        running the same op on the CPU, so that a value read of one (``if (mask > 0).any():``) gets the answer
        training gets rather than the dense-batch guess. Any input without values (weights, activations) stops
        it; so do ``empty`` (no values to follow) and random ops. The indices :mod:`selections` makes for a
        selection it sized without values are zeros made this way: they read as 0, a valid index of the same
        shape (a loop's ``if expert_idx == num_experts`` skip test is then False, as in training). A write into a
        storage (an in-place op, ``out=``) drops what the other tensors on that storage held (views). ``ins`` and
        ``results``: the tensors of the arguments and of ``out``."""
        outs = [o for o in results if o.device.type == "meta"]
        if not outs:
            return
        ok = (all(o.numel() <= _FOLLOW_MAX for o in outs) and torch.Tag.nondeterministic_seeded not in func.tags
              and costs.op_name(func) not in _NO_VALUES)

        if ok:  # most ops read a weight or an activation, which has no values: known before mapping the arguments
            ok = all(t in self.values for t in ins if t.device.type == "meta")

        def real(x):  # (called only where every meta tensor among ``ins`` has values)
            if isinstance(x, torch.Tensor) and x.device.type == "meta":
                return self.values[x]
            return torch.device("cpu") if isinstance(x, torch.device) and x.type == "meta" else x

        kept: list[torch.Tensor] = []
        if ok and self.guessed and following_numbers() \
                and any(t in self.guessed for t in ins if t.device.type == "meta"):
            for o in outs:
                self.guessed[o] = True
        if ok:
            rargs, rkwargs = tree_map(real, (args, kwargs))
            try:
                rout = _tensors(func(*rargs, **rkwargs))
            except Exception:  # noqa: BLE001 - an op the CPU refuses: no values
                rout = None
            if rout is not None and len(rout) == len(results):
                for o, r in zip(results, rout):
                    if o.device.type == "meta" and tuple(o.shape) == tuple(r.shape):
                        self.values[o] = r
                        self.value_storages.add(self._key(o))
                        kept.append(o)
        for o in outs:  # written without values (in place too): what it held is no longer known
            if not any(o is k for k in kept):
                self.values.pop(o, None)
        if func._schema.is_mutable:  # a write into storage: views of it (or the tensor they view) changed too
            keys = {self._key(o) for o in outs} & self.value_storages
            if keys:
                for t in list(self.values.keys()):
                    if self._key(t) in keys and not any(t is k for k in kept):
                        self.values.pop(t, None)

    def _sized(self, func, name: str, args, kwargs):
        """An op whose output size values decide, answered on meta tensors (None: run the op as it is):
        non-maximum suppression (``torchvision::nms``) keeps every box. A training step takes the top
        ``post_nms_top_n`` of what NMS keeps (the region proposal network's 2,000 proposals an image), and with
        thousands of candidate boxes an image NMS keeps more than that."""
        if name == "nms" and func.namespace == "torchvision" and args[0].device.type == "meta":
            return torch.arange(args[0].shape[0], device=args[0].device)
        return None

    def _forward_module(self) -> str:
        """The innermost module running now (forward): the deepest of the tracker's parents, ties broken by
        name so that the answer never depends on set order."""
        parents = self.tracker.parents
        if len(parents) <= 1:
            return "(step)" if self.phase != "optimizer" else "(optimizer)"
        return max(parents, key=lambda p: (p.count("."), len(p), p))

    def _module(self) -> str:
        if self.phase == "backward":
            # the autograd node running this op was created by a forward op of a known module (tagged by
            # ``tag_node`` when it was created); ModuleTracker's backward bookkeeping is not reliable enough
            # (modules stay entered, and the innermost of several layers is picked by chance)
            node = torch._C._current_autograd_node() if hasattr(torch._C, "_current_autograd_node") else None
            if node is not None:
                mod = node.metadata.get(_NODE_KEY)
                if mod is not None:
                    return mod
        return self._forward_module()

    def tag_node(self, node) -> None:
        """Node-creation hook: remember which module's forward created ``node``."""
        if self.phase == "forward":
            node.metadata[_NODE_KEY] = self._forward_module()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            # Data-dependent Python control flow (``if mask.all():``) has no answer on meta tensors: a tensor
            # computed only from real inputs answers with its followed values (:meth:`_follow`); any other as
            # for a plain dense batch: all checks true, counts one (counted in Workload.data_dependent_reads).
            t = args[0]
            real = self.values.get(t)
            if real is not None:
                return real.item()
            self.data_dependent += 1
            return True if t.dtype == torch.bool else (1.0 if t.is_floating_point() else 1)
        name = costs.op_name(func)
        out = self._sized(func, name, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        if func.namespace not in ("aten", "traincast") and name not in fused.FUSED:
            return out
        ins = _tensors((args, kwargs))
        outs = _tensors(out)
        self._follow(func, args, kwargs, out, ins, outs)
        # a convolution (or its backward) whose input has channels-last strides runs channels-last kernels
        x = ins[0] if name == "convolution" else ins[1] if name == "convolution_backward" and len(ins) > 1 else None
        layout = "nhwc" if x is not None and _channels_last_strided(x) else ""
        if layout and name == "convolution" and self.phase == "forward":
            self.cl_strided_convs += 1
        if name in costs.FREE_OPS or getattr(func, "is_view", False):
            return out
        fused_cost = None
        if name in fused.FUSED:  # a fused kernel: its registered cost model (workload/fused.py)
            try:
                fused_cost = fused.cost_of(name, args, kwargs, out)
            except (TypeError, ValueError, IndexError, AttributeError):
                fused_cost = None
            if func.namespace == "traincast":
                self.fused[name] += 1
        # unique input tensors; in-place outputs are the inputs themselves
        seen: set[int] = set()
        read = 0
        # a copy writes its destination without reading it
        dests = {id(t) for t in _tensors(args[0])} if name in ("copy_", "_foreach_copy_") and args else set()
        src = []
        in_keys: set[int] = set()
        for t in ins:
            if id(t) not in seen:
                seen.add(id(t))
                key = self._key(t)
                in_keys.add(key)
                if id(t) in dests:
                    continue
                read += _nbytes(t)
                p, slot = self.writer.setdefault(key, (-1 - len(self.writer), 0))
                src.append((p, slot, _nbytes(t), int(t.storage_offset())))
        idx = len(self.ops)
        out_rec = []
        for slot, t in enumerate(outs):
            key = self._key(t)
            out_rec.append((_nbytes(t), int(key in in_keys)))
            self.writer[key] = (idx, slot)
        gathered = costs.gathered_read_bytes(name, ins)
        if gathered is not None:
            read = min(read, gathered)
        written = sum(_nbytes(t) for t in outs)
        if not outs and name.startswith("_foreach_") and name.endswith("_") and args:
            # an in-place foreach op returns nothing but rewrites its first list
            written = sum(_nbytes(t) for t in _tensors(args[0]))
        elif not outs and name.startswith("_fused_") and name.endswith("_") and len(args) > 3:
            # a fused optimizer step (_fused_adam_, _fused_adamw_, _fused_sgd_) rewrites the parameters and its
            # state lists in place: the parameters and (Adam) both moments, or (SGD) the momentum buffers
            lists = (0, 2, 3) if "adam" in name else (0, 2)
            written = sum(_nbytes(t) for i in lists for t in _tensors(args[i]))
        if fused_cost is not None:
            flops, known = fused_cost.flops, True
            read, written = fused_cost.bytes_read, fused_cost.bytes_written
        else:
            flops, known = costs.flops_of(func, args, kwargs, out)
        if not known:
            self.unregistered[name] += 1
        ref = next((t for t in outs + ins if t.is_floating_point()), None)
        n_tensors = (len(args[0]) if name.startswith(("_foreach_", "_fused_")) and args
                     and isinstance(args[0], (list, tuple)) else 1)
        self.ops.append(
            OpRecord(
                aten=name,
                phase=self.phase,
                module=self._module(),
                op_class=fused.FUSED.get(name).op_class if fused_cost is not None else costs.classify(name, self.phase),
                flops=int(flops),
                bytes_read=int(read),
                bytes_written=int(written),
                dtype=dtype_name(ref.dtype) if ref is not None else "none",
                input_shapes=tuple(tuple(t.shape) for t in ins[:4]),
                output_shapes=tuple(tuple(t.shape) for t in outs[:4]),
                n_tensors=n_tensors,
                args=_scalar_args(args) if not name.startswith("_foreach_") else (),
                src=tuple(src),
                outs=tuple(out_rec),
                layout=layout,
            )
        )
        return out


# --- mixed precision: torch.autocast's rules on meta tensors (workload/autocast.py) ---------------
class _ForwardAutocast:
    """Autocast on during the forward stages of a step (as ``with torch.autocast(...)`` around forward and loss),
    off for backward and optimizer; each forward stage is one autocast region (weight casts cached within it)."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype
        self._cm = None

    def set(self, on: bool) -> None:
        from traincast.workload.autocast import autocast

        if on and self._cm is None:
            self._cm = autocast(self.dtype)
            self._cm.__enter__()
        elif not on and self._cm is not None:
            cm, self._cm = self._cm, None
            cm.__exit__(None, None, None)


_HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The half dtype ``torch.autocast`` gives matmuls and convolutions under ``precision`` (None: no autocast)."""
    from traincast.workload.precision import get_precision

    half = get_precision(precision).autocast
    return _HALF[half] if half else None


# --- mixture-of-experts layers ------------------------------------------
class BalancedExperts:
    """While active, the grouped expert GEMMs of Hugging Face mixture-of-experts layers (the ``grouped_mm``
    experts implementation of ``transformers.integrations.moe``, the default of Mixtral, Qwen-MoE, DeepSeek,
    OLMoE, ...) run as one batched matmul with the routed tokens split evenly over the experts.

    Which expert a token goes to depends on the router's values, which meta tensors do not have, and the
    grouped GEMM kernel has no meta implementation in fp32. Evenly loaded experts are what the load-balancing
    loss trains towards, and a grouped GEMM takes about the time of a batched GEMM of the same FLOPs: the
    ``S`` routed rows are padded to ``E x ceil(S / E)`` and multiplied as ``E`` GEMMs of ``ceil(S / E)`` rows
    (the padding appears as one small copy). ``count`` says how many grouped GEMMs were replaced.

    SwitchTransformers' experts loop in Python over the experts its router picked (``torch.where`` on the
    routing mask, no shape on meta). There each expert runs on an even share, ``ceil(T / E)``, of the ``T``
    tokens (top-1 routing), with the gather, expert MLP, weighting and ``index_add_`` its loop does; ``count``
    grows by the expert MLP's projections (one per linear layer, as for the grouped GEMMs)."""

    def __init__(self):
        self.count = 0
        self._moe = None
        self._orig = None
        self._switch = None
        self._switch_orig = None

    def _grouped_mm(self, input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        self.count += 1
        rows, k = input.shape
        experts = weight.shape[0]
        per = -(-rows // experts)
        x = F.pad(input, (0, 0, 0, experts * per - rows)) if experts * per != rows else input
        out = torch.bmm(x.to(weight.dtype).reshape(experts, per, k), weight)
        return out.reshape(experts * per, weight.shape[-1])[:rows]

    def _switch_forward(self, experts, hidden_states, selected_experts, routing_weights):
        tokens, n = hidden_states.shape[0], experts.num_experts
        per = -(-tokens // n)
        out = torch.zeros_like(hidden_states)
        for e in range(n):
            lo, hi = min(e * per, tokens), min((e + 1) * per, tokens)
            if hi <= lo:
                continue
            idx = torch.arange(lo, hi, device=hidden_states.device)
            mlp = experts[f"expert_{e}"]
            self.count += sum(isinstance(m, torch.nn.Linear) for m in mlp.modules())
            y = mlp(hidden_states[idx]) * routing_weights[idx, 0].unsqueeze(-1)
            out.index_add_(0, idx, y.to(hidden_states.dtype))
        return out

    def __enter__(self):
        import sys

        moe = sys.modules.get("transformers.integrations.moe")  # only where transformers built the model
        if moe is not None and hasattr(moe, "_grouped_mm"):
            self._moe, self._orig = moe, moe._grouped_mm
            moe._grouped_mm = self._grouped_mm
        switch = sys.modules.get("transformers.models.switch_transformers.modeling_switch_transformers")
        if switch is not None and hasattr(switch, "SwitchTransformersExperts"):
            cls = switch.SwitchTransformersExperts
            self._switch, self._switch_orig = cls, cls.forward
            tracer = self

            def forward(experts, hidden_states, selected_experts, routing_weights):
                return tracer._switch_forward(experts, hidden_states, selected_experts, routing_weights)

            cls.forward = forward
        return self

    def __exit__(self, *exc):
        if self._moe is not None:
            self._moe._grouped_mm = self._orig
            self._moe = None
        if self._switch is not None:
            self._switch.forward = self._switch_orig
            self._switch = None
        return False


# --- the trace ----------------------------------------------------------
def _storage_key(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):  # a tensor without storage (subclasses)
        return id(t)


def trace_call(fn, phase: str = "forward") -> tuple[object, list[OpRecord]]:
    """``fn()``'s result and the aten ops it ran (on meta tensors: nothing is computed), as ``OpRecord``s
    of ``phase``: a single op timed alone (``traincast bench layers``) mapped onto the ops a step traces."""
    rec = _OpRecorder(_Tracker(), "op")
    rec.phase = phase
    with rec:
        out = fn()
    return out, rec.ops


def _rnn_recorder(path: str, calls: list):
    """A forward hook that records one call of an ``nn.LSTM``/``GRU``/``RNN`` (shape and settings), for
    predictors that time recurrent layers as cuDNN runs them (:mod:`traincast.predict.rnn`)."""

    def hook(mod, args, _out):
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor):  # a PackedSequence: lengths vary, not recorded
            return
        if x.dim() == 2:
            t, b = x.shape[0], 1
        else:
            b, t = (x.shape[0], x.shape[1]) if mod.batch_first else (x.shape[1], x.shape[0])
        calls.append(RecurrentCall(module=path, mode=str(mod.mode), input_size=int(mod.input_size),
                                   hidden_size=int(mod.hidden_size), num_layers=int(mod.num_layers),
                                   bidirectional=bool(mod.bidirectional), seq_len=int(t), batch=int(b),
                                   dtype=_DTYPE_NAMES.get(x.dtype, "fp32"), training=bool(mod.training)))

    return hook


def trace_step(step, precision: str = "fp32", fused_attention: bool = True) -> Workload:
    """Trace one steady-state training step of a ``TrainingStep`` built on meta."""
    from traincast.workload.steps import TrainingStep  # noqa: F401  (type only)

    t0 = time.perf_counter()
    step.warm_up()  # optimizer state exists, as in every step after the first
    params = [p for m in step.modules for p in m.parameters()]
    param_keys = {_storage_key(p) for p in params}
    param_bytes = sum(_nbytes(p) for p in {id(p): p for p in params}.values())
    trainable = {id(p): p for p in params if p.requires_grad}
    grad_bytes = sum(_nbytes(p) for p in trainable.values())
    opt_state_bytes = step.optimizer_state_bytes()

    saved: dict[int, int] = {}

    def pack(t: torch.Tensor):
        key = _storage_key(t)
        if key not in param_keys and key not in saved:
            saved[key] = t.untyped_storage().nbytes()
        return t

    tracker = _Tracker()
    # name every module by its path from the root, even when a step calls
    # sub-modules directly (the GAN step calls netD and netG, not the pair)
    names = {mod: f"{type(root).__name__}.{path}" if path else type(root).__name__
             for root in step.modules for path, mod in root.named_modules()}
    known = getattr(tracker, "_known_modules", None)
    if known is not None:
        known.update(names)
    recorder = _OpRecorder(tracker, type(step.modules[0]).__name__)
    rnn_calls: list[RecurrentCall] = []
    hooks = [mod.register_forward_hook(_rnn_recorder(name, rnn_calls))
             for mod, name in names.items() if isinstance(mod, torch.nn.RNNBase)]
    kernels_mode = fused.FusedKernels(attention=fused_attention)  # attention, Mamba scans: the kernels CUDA runs
    modes = [kernels_mode]
    half = autocast_dtype(precision)
    amp = _ForwardAutocast(half) if half is not None else None

    def set_phase(phase: str) -> None:
        recorder.phase = phase
        if amp is not None:
            amp.set(phase == "forward")

    experts = BalancedExperts()
    selections = ExpectedSelections(recorder.values)
    recorder.guessed = selections.guessed
    with tracker, recorder, experts, selections, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            _node_creation_hook(recorder.tag_node):
        for m in modes:
            m.__enter__()
        try:
            step.run(on_phase=set_phase, autocast_modes=modes)
        except Exception as exc:
            exc.traincast_phase = recorder.phase  # which part of the step failed, for the error line
            raise
        finally:
            if amp is not None:
                amp.set(False)
            for m in reversed(modes):
                m.__exit__(None, None, None)
            for hk in hooks:
                hk.remove()

    if half is not None:  # autocast runs the recurrent layers in half precision
        rnn_calls = [replace(c, dtype=dtype_name(half)) for c in rnn_calls]
    fused_counts = dict(recorder.fused)
    if kernels_mode.math_attention_calls:  # SDPA calls on PyTorch's math path (workload/fused.py)
        fused_counts[fused.MATH_ATTENTION] = kernels_mode.math_attention_calls
    ops = tuple(recorder.ops)
    transient = max((o.bytes_written for o in ops if o.phase != "optimizer"), default=0)
    memory = MemoryFootprint(
        parameter_bytes=param_bytes,
        gradient_bytes=grad_bytes,
        optimizer_state_bytes=opt_state_bytes,
        activation_bytes=sum(saved.values()),
        transient_bytes=2 * transient,
        batch_size=step.batch_size,
    )
    n_params = sum(p.numel() for p in {id(p): p for p in params}.values())
    return Workload(
        model=step.name,
        batch_size=step.batch_size,
        optimizer=step.optimizer_name,
        ops=ops,
        memory=memory,
        parameters=n_params,
        trainable_parameters=sum(p.numel() for p in trainable.values()),
        input_description=step.input_description,
        samples_per_step=step.batch_size,
        precision=precision,
        fused_attention=bool(fused_attention),
        recurrent_calls=tuple(rnn_calls),
        balanced_expert_gemms=experts.count,
        routed_selections=selections.routed,
        dense_selections=selections.dense,
        data_dependent_reads=recorder.data_dependent,
        channels_last_strided_convs=recorder.cl_strided_convs,
        fused_kernels=tuple(sorted(fused_counts.items())),
        unregistered_ops=tuple(sorted(recorder.unregistered.items())),
        param_tensors=len(trainable),
        trace_s=round(time.perf_counter() - t0, 3),
    )
