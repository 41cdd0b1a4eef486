"""Op-cost registry: FLOPs and op class of each aten op.

Modelled on ``torch.utils.flop_counter``: one small table keyed by the aten op
(overload packet), each formula a few lines. Matmul, convolution and attention
FLOPs come from torch's own registry; norms, softmax, pooling, elementwise ops
and reductions have formulas here. Bytes are not per-op formulas: the tracer
measures them from the tensors an op reads and writes.

An op that is in neither registry still gets a class (``elementwise``) and
FLOPs of one per output element, so nothing silently costs zero; the tracer
lists such ops in ``Workload.unregistered_ops``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils.flop_counter import flop_registry as _torch_flop_registry

aten = torch.ops.aten


def _numel(t) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


def _out_numel(out) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel()
    if isinstance(out, (tuple, list)):
        return sum(_out_numel(o) for o in out)
    return 0


def _first_tensor(args) -> torch.Tensor | None:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
        if isinstance(a, (list, tuple)):
            t = _first_tensor(a)
            if t is not None:
                return t
    return None


def _per_input(k: float) -> Callable:
    """FLOPs = k per element of the first input."""

    def f(args, kwargs, out) -> int:
        t = _first_tensor(args)
        return int(k * (_numel(t) if t is not None else _out_numel(out)))

    return f


def _per_output(k: float) -> Callable:
    def f(args, kwargs, out) -> int:
        return int(k * _out_numel(out))

    return f


def _foreach(k: float) -> Callable:
    """Multi-tensor kernels: k FLOPs per element of the first tensor list."""

    def f(args, kwargs, out) -> int:
        lst = args[0] if args and isinstance(args[0], (list, tuple)) else []
        return int(k * sum(_numel(t) for t in lst))

    return f


def _pool_fwd(args, kwargs, out) -> int:
    # each output element reads a kernel window: kh*kw comparisons/adds
    kernel = args[1] if len(args) > 1 else kwargs.get("kernel_size", [1])
    kernel = [kernel] if isinstance(kernel, int) else list(kernel)
    o = out[0] if isinstance(out, (tuple, list)) else out
    return int(_numel(o) * math.prod(kernel))


def _pool_bwd(args, kwargs, out) -> int:
    # scatter of the output gradient into the input gradient
    return _out_numel(out)


def _adaptive_pool(args, kwargs, out) -> int:
    return _numel(args[0])


# FLOPs per element constants for the ops that are not matmuls. These are
# counts of arithmetic operations in the reference implementations (e.g.
# layer norm: mean, variance, normalise, scale, shift), good to a small factor;
# these ops are memory-bound on every GPU so the constant rarely matters.
_FORMULAS: dict[str, tuple[str, Callable]] = {
    # normalisation
    "native_batch_norm": ("norm", _per_input(8)),
    "_native_batch_norm_legit": ("norm", _per_input(8)),
    "_native_batch_norm_legit_no_training": ("norm", _per_input(4)),
    "_batch_norm_with_update": ("norm", _per_input(8)),
    "native_batch_norm_backward": ("norm", _per_input(12)),
    "batch_norm_backward": ("norm", _per_input(12)),
    "native_layer_norm": ("norm", _per_input(8)),
    "native_layer_norm_backward": ("norm", _per_input(12)),
    "native_group_norm": ("norm", _per_input(8)),
    "native_group_norm_backward": ("norm", _per_input(12)),
    "_fused_rms_norm": ("norm", _per_input(4)),
    "_fused_rms_norm_backward": ("norm", _per_input(8)),
    # softmax, losses and reductions
    "_softmax": ("reduction", _per_input(5)),
    "_log_softmax": ("reduction", _per_input(5)),
    "_safe_softmax": ("reduction", _per_input(5)),
    "_softmax_backward_data": ("reduction", _per_input(4)),
    "_log_softmax_backward_data": ("reduction", _per_input(4)),
    "nll_loss_forward": ("reduction", _per_input(1)),
    "nll_loss_backward": ("reduction", _per_output(1)),
    "nll_loss2d_forward": ("reduction", _per_input(1)),
    "nll_loss2d_backward": ("reduction", _per_output(1)),
    "binary_cross_entropy": ("reduction", _per_input(4)),
    "binary_cross_entropy_backward": ("reduction", _per_input(4)),
    "binary_cross_entropy_with_logits": ("reduction", _per_input(6)),
    "mse_loss": ("reduction", _per_input(3)),
    "mse_loss_backward": ("reduction", _per_input(3)),
    "sum": ("reduction", _per_input(1)),
    "mean": ("reduction", _per_input(1)),
    "amax": ("reduction", _per_input(1)),
    "all": ("reduction", _per_input(1)),
    "any": ("reduction", _per_input(1)),
    "max": ("reduction", _per_input(1)),
    "var_mean": ("reduction", _per_input(3)),
    "var": ("reduction", _per_input(3)),
    "linalg_vector_norm": ("reduction", _per_input(2)),
    "norm": ("reduction", _per_input(2)),
    # pooling
    "max_pool2d_with_indices": ("pool", _pool_fwd),
    "max_pool3d_with_indices": ("pool", _pool_fwd),
    "avg_pool2d": ("pool", _pool_fwd),
    "avg_pool3d": ("pool", _pool_fwd),
    "max_pool2d_with_indices_backward": ("pool", _pool_bwd),
    "max_pool3d_with_indices_backward": ("pool", _pool_bwd),
    "avg_pool2d_backward": ("pool", _pool_bwd),
    "avg_pool3d_backward": ("pool", _pool_bwd),
    "_adaptive_avg_pool2d": ("pool", _adaptive_pool),
    "_adaptive_avg_pool2d_backward": ("pool", _pool_bwd),
    "adaptive_max_pool2d": ("pool", _adaptive_pool),
    "adaptive_max_pool2d_backward": ("pool", _pool_bwd),
    # activations with more than one op per element
    "gelu": ("elementwise", _per_input(8)),
    "gelu_backward": ("elementwise", _per_input(12)),
    "silu": ("elementwise", _per_input(4)),
    "silu_backward": ("elementwise", _per_input(6)),
    "tanh": ("elementwise", _per_input(4)),
    "tanh_backward": ("elementwise", _per_input(2)),
    "sigmoid": ("elementwise", _per_input(4)),
    "sigmoid_backward": ("elementwise", _per_input(2)),
    "pow": ("elementwise", _per_input(2)),
    "rsqrt": ("elementwise", _per_input(2)),
    "exp": ("elementwise", _per_input(2)),
    "native_dropout": ("elementwise", _per_input(2)),
    "native_dropout_backward": ("elementwise", _per_input(1)),
    "hardtanh": ("elementwise", _per_input(2)),
    "hardtanh_backward": ("elementwise", _per_input(2)),
    "leaky_relu": ("elementwise", _per_input(2)),
    "leaky_relu_backward": ("elementwise", _per_input(2)),
    "threshold_backward": ("elementwise", _per_input(1)),
    # gathers
    "embedding": ("embedding", _per_output(0)),
    "embedding_dense_backward": ("embedding", _per_input(1)),
    "index_select": ("embedding", _per_output(0)),
    "gather": ("embedding", _per_output(0)),
    "index_put": ("embedding", _per_output(0)),
    "index_add": ("embedding", _per_input(1)),
    "scatter_add": ("embedding", _per_input(1)),
    # copies and fills: no arithmetic, bytes only
    "copy": ("copy", _per_output(0)),
    "_to_copy": ("copy", _per_output(0)),
    "clone": ("copy", _per_output(0)),
    "fill": ("copy", _per_output(0)),
    "zero": ("copy", _per_output(0)),
    "zeros_like": ("copy", _per_output(0)),
    "ones_like": ("copy", _per_output(0)),
    "full_like": ("copy", _per_output(0)),
    "cat": ("copy", _per_output(0)),
    "stack": ("copy", _per_output(0)),
    "constant_pad_nd": ("copy", _per_output(0)),
    "contiguous": ("copy", _per_output(0)),
    "new_zeros": ("copy", _per_output(0)),
    "tril": ("copy", _per_output(0)),
    "triu": ("copy", _per_output(0)),
    "where": ("elementwise", _per_output(1)),
    # optimizers: multi-tensor (foreach) kernels
    "_foreach_add": ("optimizer", _foreach(1)),
    "_foreach_add_": ("optimizer", _foreach(1)),
    "_foreach_mul": ("optimizer", _foreach(1)),
    "_foreach_mul_": ("optimizer", _foreach(1)),
    "_foreach_div": ("optimizer", _foreach(1)),
    "_foreach_div_": ("optimizer", _foreach(1)),
    "_foreach_addcmul_": ("optimizer", _foreach(2)),
    "_foreach_addcdiv_": ("optimizer", _foreach(2)),
    "_foreach_lerp_": ("optimizer", _foreach(3)),
    "_foreach_sqrt": ("optimizer", _foreach(1)),
    "_foreach_sqrt_": ("optimizer", _foreach(1)),
    "_foreach_maximum_": ("optimizer", _foreach(1)),
    "_foreach_sub_": ("optimizer", _foreach(1)),
    "_foreach_neg": ("optimizer", _foreach(1)),
    "_foreach_pow": ("optimizer", _foreach(1)),
    "_foreach_reciprocal_": ("optimizer", _foreach(1)),
    "_foreach_copy_": ("optimizer", _foreach(0)),
    "_foreach_zero_": ("optimizer", _foreach(0)),
    "_fused_sgd_": ("optimizer", _foreach(3)),
    "_fused_adam_": ("optimizer", _foreach(12)),
    "_fused_adamw_": ("optimizer", _foreach(13)),
}

# Ops whose FLOPs torch.utils.flop_counter knows, and the class each belongs to.
_TORCH_CLASSES = {
    "mm": "matmul",
    "addmm": "matmul",
    "bmm": "matmul",
    "baddbmm": "matmul",
    "_scaled_mm": "matmul",
    "convolution": "conv",
    "_convolution": "conv",
    "cudnn_convolution": "conv",
    "convolution_backward": "conv",
    "convolution_overrideable": "conv",
    "_slow_conv2d_forward": "conv",
}

# Elementwise ops with one FLOP per output element; listed so that the
# unregistered-op report stays meaningful.
_ONE_FLOP = {
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "relu", "relu_",
    "neg", "abs", "sqrt", "reciprocal", "clamp", "clamp_min", "maximum", "minimum",
    "eq", "ne", "gt", "lt", "ge", "le", "logical_not", "masked_fill", "masked_fill_",
    "sign", "rsub", "bitwise_and", "bitwise_or", "log", "sin", "cos", "erf",
    "addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_", "threshold",
    "square", "floor", "ceil", "round", "lt_", "fmod", "remainder", "sgn",
    "hardswish", "hardswish_backward", "hardsigmoid", "hardsigmoid_backward",
    "softplus", "softplus_backward", "mish", "elu", "elu_backward", "scalar_tensor",
    "bernoulli", "bernoulli_", "uniform_", "normal_", "rand_like", "randn_like", "arange",
}

def gathered_read_bytes(name: str, ins) -> int | None:
    """Bytes a gathering op reads, where that is less than its whole inputs:
    ``embedding`` reads one weight row per index, ``nll_loss`` one logit per
    target (not the whole vocabulary). None for other ops. ``ins`` are its
    input tensors in call order."""
    try:
        if name == "embedding":
            w, idx = ins[0], ins[1]
            return idx.numel() * idx.element_size() + idx.numel() * w.shape[-1] * w.element_size()
        if name in ("nll_loss_forward", "nll_loss2d_forward"):
            x, tgt = ins[0], ins[1]
            rest = sum(t.numel() * t.element_size() for t in ins[2:])  # class weights, if any
            return tgt.numel() * (tgt.element_size() + x.element_size()) + rest
    except (IndexError, AttributeError):
        return None
    return None


# Ops that allocate or alias but move no data through the memory system.
FREE_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "detach", "view", "_unsafe_view", "alias", "lift_fresh", "resize_", "set_",
    "_local_scalar_dense", "is_same_size", "sym_size", "sym_stride", "sym_numel",
    "_to_copy_meta", "_has_compatible_shallow_copy_type", "zeros", "ones", "full",
    "_record_function_enter_new", "_record_function_exit", "randint", "randn", "rand",
    "split", "unsafe_split", "split_with_sizes", "unsafe_split_with_sizes", "unbind", "chunk",
}


def op_name(func) -> str:
    """The overload-packet name of an aten op, e.g. ``convolution_backward``."""
    return func.overloadpacket.__name__


def classify(name: str, phase: str) -> str:
    name = base_name(name)
    if name in _TORCH_CLASSES:
        return _TORCH_CLASSES[name]
    if "attention" in name:
        return "attention"
    if name in _FORMULAS:
        cls = _FORMULAS[name][0]
        if phase == "optimizer" and cls in ("elementwise", "copy"):
            return "optimizer"
        return cls
    if phase == "optimizer":
        return "optimizer"
    return "elementwise"


def is_registered(name: str) -> bool:
    return (
        name in _FORMULAS
        or name in _ONE_FLOP
        or name in FREE_OPS
        or name.startswith("_foreach_")
        or name in _TORCH_FLOP_NAMES
    )


_TORCH_FLOP_NAMES = {getattr(k, "__name__", str(k)) for k in _torch_flop_registry}


def _torch_formula(func) -> Callable | None:
    return _torch_flop_registry.get(func.overloadpacket) or _torch_flop_registry.get(func)


def base_name(name: str) -> str:
    """``relu_`` -> ``relu``: in-place variants cost what their out-of-place twins do."""
    if name.endswith("_") and not name.startswith("_foreach_") and not name.startswith("_fused_"):
        return name[:-1]
    return name


def conv_backward_flops(args, kwargs, out) -> int:
    """FLOPs of ``convolution_backward`` for the gradients it computes.

    Each of grad-input and grad-weight costs what the forward convolution
    does: 2 x (output elements) x (input channels per group) x kernel area for
    an ordinary convolution, 2 x (input elements) x (output channels per
    group) x kernel area for a transposed one. torch's registered formula
    ignores ``groups`` in the weight gradient and overcounts depthwise
    convolutions by the channel count; this one does not.
    """
    grad_out, x, w = args[0], args[1], args[2]
    transposed = bool(args[7])
    mask = args[10] if len(args) > 10 else kwargs.get("output_mask", [True, True, True])
    fwd = 2 * (x.numel() if transposed else grad_out.numel()) * math.prod(w.shape[1:])
    return int(fwd * (bool(mask[0]) + bool(mask[1])) + (grad_out.numel() if mask[2] else 0))


def flops_of(func, args, kwargs, out) -> tuple[int, bool]:
    """FLOPs of one call and whether a formula (rather than the fallback) was used."""
    name = base_name(op_name(func))
    if name == "convolution_backward":
        return conv_backward_flops(args, kwargs, out), True
    tf = _torch_formula(func)
    if tf is not None:
        return int(tf(*args, **kwargs, out_val=out)), True
    if name in _FORMULAS:
        return int(_FORMULAS[name][1](args, kwargs, out)), True
    if name.startswith("_foreach_"):
        return _foreach(1)(args, kwargs, out), True
    if name in _ONE_FLOP:
        return _out_numel(out), True
    return _out_numel(out), False
