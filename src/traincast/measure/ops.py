"""Single ops for layer campaigns: realistic shape samplers and builders.

Each ``OpSpec`` knows how to draw a configuration (``params``, a flat dict of
ints/floats/bools) from the ranges that occur in real CNNs and transformers,
with some log-uniform noise around them, and how to build the op on any device
as a closure over its input and weight tensors.

Building the op on the ``meta`` device gives, for nothing, its shapes, its
FLOPs (``torch.utils.flop_counter.FlopCounterMode`` for convolutions, matmuls
and attention, which on meta runs the math attention path) and the bytes it
reads and writes; impossible shapes fail there and become ``ConfigError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from traincast.errors import ConfigError, UnknownNameError

# --------------------------------------------------------------------------- realistic ranges

_BATCH = [1, 2, 4, 8, 16, 32, 64, 128, 256]
_BATCH_P = [0.06, 0.06, 0.1, 0.14, 0.18, 0.2, 0.14, 0.08, 0.04]
_CHANNELS = [3, 16, 24, 32, 40, 48, 64, 96, 128, 144, 160, 192, 256, 320, 384, 512, 576, 768, 960, 1024, 1280, 2048]
_SPATIAL = [7, 8, 14, 16, 28, 32, 56, 64, 112, 224]
_HIDDEN = [128, 256, 384, 512, 768, 1024, 1280, 1536, 2048, 2560, 3072, 4096, 5120, 8192]
_SEQ = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
_VOCAB = [1000, 8192, 30522, 32000, 50257]
_HEAD_DIM = [32, 64, 128]


def _loguniform_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _pick(rng: np.random.Generator, values: Sequence[int], lo: int, hi: int, p=None, noise: float = 0.15) -> int:
    """A common value (probability 1-noise) or a log-uniform one in [lo, hi]."""
    if rng.random() < noise:
        return _loguniform_int(rng, lo, hi)
    return int(values[rng.choice(len(values), p=p)])


def _batch(rng) -> int:
    return _pick(rng, _BATCH, 1, 256, p=_BATCH_P)


def _channels(rng, lo: int = 1) -> int:
    vals = [c for c in _CHANNELS if c >= lo]
    w = np.array([3.0 if c & (c - 1) == 0 else 1.0 for c in vals])  # powers of two are most common
    return _pick(rng, vals, max(lo, 1), 2048, p=w / w.sum())


def _spatial(rng) -> int:
    return _pick(rng, _SPATIAL, 4, 256)


def _hidden(rng) -> int:
    h = _pick(rng, _HIDDEN, 64, 8192)
    return h


def _seq(rng) -> int:
    return _pick(rng, _SEQ, 8, 4096)


def _act_shape(rng) -> dict:
    """An activation tensor as in a CNN (N,C,H,W) or a transformer (B,S,H)."""
    if rng.random() < 0.5:
        return {"batch": _batch(rng), "channels": _channels(rng, 16), "height": _spatial(rng), "width": 0, "seq": 0, "hidden": 0}
    return {"batch": _pick(rng, _BATCH[:7], 1, 64), "channels": 0, "height": 0, "width": 0, "seq": _seq(rng), "hidden": _hidden(rng)}


def _act_tensor_shape(p: dict) -> tuple[int, ...]:
    if p.get("seq"):
        return (p["batch"], p["seq"], p["hidden"])
    w = p.get("width") or p["height"]
    return (p["batch"], p["channels"], p["height"], w)


# --------------------------------------------------------------------------- samplers


def _s_conv2d(rng) -> dict:
    k = int(rng.choice([1, 3, 5, 7], p=[0.35, 0.5, 0.08, 0.07]))
    stride = int(rng.choice([1, 2], p=[0.78, 0.22]))
    h = _spatial(rng)
    cin = _channels(rng)
    depthwise = cin >= 8 and rng.random() < 0.15
    cout = cin if depthwise else _channels(rng, 8)
    if k == 7 and rng.random() < 0.6:  # the stem of ResNets
        cin, h, stride, cout, depthwise = 3, 224 if rng.random() < 0.8 else _spatial(rng), 2, 64, False
    return {
        "batch": _batch(rng),
        "in_channels": cin,
        "out_channels": cout,
        "height": h,
        "width": h,
        "kernel": k,
        "stride": stride,
        "padding": k // 2,
        "groups": cin if depthwise else 1,
        "bias": bool(rng.random() < 0.3),
    }


def _s_conv_transpose2d(rng) -> dict:
    h = _pick(rng, [4, 8, 16, 32], 2, 64)
    return {
        "batch": _batch(rng),
        "in_channels": _channels(rng, 16),
        "out_channels": _pick(rng, [3, 64, 128, 256, 512], 1, 1024),
        "height": h,
        "width": h,
        "kernel": 4,
        "stride": 2,
        "padding": 1,
        "bias": False,
    }


def _s_linear(rng) -> dict:
    if rng.random() < 0.3:  # classifier heads and MLPs: tokens = batch
        return {
            "tokens": _batch(rng),
            "in_features": _pick(rng, [512, 1024, 1280, 2048, 4096, 9216, 25088], 16, 25088),
            "out_features": _pick(rng, [10, 100, 1000, 4096], 2, 8192),
            "bias": True,
        }
    h = _hidden(rng)
    mult = [1, 3, 4, 0.25][int(rng.choice(4, p=[0.4, 0.15, 0.3, 0.15]))]
    inner = max(1, int(h * (4 if mult == 0.25 else mult)))
    fin, fout = (inner, h) if mult == 0.25 else (h, inner)
    return {"tokens": _pick(rng, [1, 2, 4, 8, 16, 32], 1, 64) * _seq(rng), "in_features": fin, "out_features": fout, "bias": bool(rng.random() < 0.8)}


def _s_matmul(rng) -> dict:
    p = _s_linear(rng)
    return {"m": p["tokens"], "k": p["in_features"], "n": p["out_features"]}


def _s_bmm(rng) -> dict:
    h = _hidden(rng)
    d = int(rng.choice(_HEAD_DIM))
    heads = max(1, h // d)
    b = _pick(rng, _BATCH[:7], 1, 64)
    s = _seq(rng)
    if rng.random() < 0.5:  # Q @ K^T
        return {"batch": b * heads, "m": s, "k": d, "n": s}
    return {"batch": b * heads, "m": s, "k": s, "n": d}  # P @ V


def _s_batchnorm(rng) -> dict:
    return {"batch": _batch(rng), "channels": _channels(rng, 8), "height": _spatial(rng)}


def _s_layernorm(rng) -> dict:
    return {"tokens": _pick(rng, [1, 2, 4, 8, 16, 32], 1, 64) * _seq(rng), "hidden": _hidden(rng)}


def _s_softmax(rng) -> dict:
    if rng.random() < 0.7:  # attention probabilities
        s = _seq(rng)
        heads = _pick(rng, [4, 8, 12, 16, 32], 1, 64)
        return {"rows": _pick(rng, _BATCH[:6], 1, 32) * heads * s, "cols": s}
    return {"rows": _batch(rng), "cols": _pick(rng, _VOCAB, 2, 65536)}


def _s_pool(rng) -> dict:
    return {
        "batch": _batch(rng),
        "channels": _channels(rng, 16),
        "height": _pick(rng, [14, 28, 56, 112, 7, 32], 4, 224),
        "kernel": int(rng.choice([2, 3])),
        "stride": 2,
    }


def _s_act(rng) -> dict:
    return _act_shape(rng)


def _s_dropout(rng) -> dict:
    p = _act_shape(rng)
    p["p"] = float(rng.choice([0.1, 0.2, 0.5]))
    return p


def _s_sdpa(rng) -> dict:
    d = int(rng.choice(_HEAD_DIM))
    h = _hidden(rng)
    return {
        "batch": _pick(rng, _BATCH[:6], 1, 32),
        "heads": max(1, h // d),
        "seq": _seq(rng),
        "head_dim": d,
        "causal": bool(rng.random() < 0.5),
    }


def _s_embedding(rng) -> dict:
    return {
        "batch": _pick(rng, _BATCH[:7], 1, 64),
        "seq": _seq(rng),
        "vocab": _pick(rng, _VOCAB, 100, 65536),
        "hidden": _hidden(rng),
    }


def _s_cross_entropy(rng) -> dict:
    if rng.random() < 0.5:
        return {"rows": _batch(rng), "classes": _pick(rng, [10, 100, 1000], 2, 21841)}
    return {"rows": _pick(rng, [1, 2, 4, 8, 16], 1, 32) * _seq(rng), "classes": _pick(rng, _VOCAB, 100, 65536)}


# --------------------------------------------------------------------------- builders
# A builder takes (params, device, dtype, grad) and returns (call, inputs, weights):
# `call()` computes the op's output from `inputs` (activations) and `weights`.


def _t(shape, device, dtype, grad: bool):
    import torch

    if str(device) == "meta":
        t = torch.empty(shape, device="meta", dtype=dtype)
    else:
        t = torch.rand(shape, device=device, dtype=dtype)
    return t.requires_grad_(grad)


def _b_conv2d(p, device, dtype, grad):
    import torch.nn.functional as F

    x = _t((p["batch"], p["in_channels"], p["height"], p["width"]), device, dtype, grad)
    w = _t((p["out_channels"], p["in_channels"] // p["groups"], p["kernel"], p["kernel"]), device, dtype, grad)
    b = _t((p["out_channels"],), device, dtype, grad) if p["bias"] else None
    ws = [w] + ([b] if b is not None else [])
    return (lambda: F.conv2d(x, w, b, stride=p["stride"], padding=p["padding"], groups=p["groups"])), [x], ws


def _b_conv_transpose2d(p, device, dtype, grad):
    import torch.nn.functional as F

    x = _t((p["batch"], p["in_channels"], p["height"], p["width"]), device, dtype, grad)
    w = _t((p["in_channels"], p["out_channels"], p["kernel"], p["kernel"]), device, dtype, grad)
    return (lambda: F.conv_transpose2d(x, w, None, stride=p["stride"], padding=p["padding"])), [x], [w]


def _b_linear(p, device, dtype, grad):
    import torch.nn.functional as F

    x = _t((p["tokens"], p["in_features"]), device, dtype, grad)
    w = _t((p["out_features"], p["in_features"]), device, dtype, grad)
    b = _t((p["out_features"],), device, dtype, grad) if p["bias"] else None
    return (lambda: F.linear(x, w, b)), [x], [w] + ([b] if b is not None else [])


def _b_matmul(p, device, dtype, grad):
    import torch

    a = _t((p["m"], p["k"]), device, dtype, grad)
    b = _t((p["k"], p["n"]), device, dtype, grad)
    return (lambda: torch.matmul(a, b)), [a, b], []


def _b_bmm(p, device, dtype, grad):
    import torch

    a = _t((p["batch"], p["m"], p["k"]), device, dtype, grad)
    b = _t((p["batch"], p["k"], p["n"]), device, dtype, grad)
    return (lambda: torch.bmm(a, b)), [a, b], []


def _b_batchnorm(p, device, dtype, grad):
    import torch
    import torch.nn.functional as F

    c = p["channels"]
    x = _t((p["batch"], c, p["height"], p["height"]), device, dtype, grad)
    w = _t((c,), device, dtype, grad)
    b = _t((c,), device, dtype, grad)
    rm = torch.zeros(c, device=device, dtype=dtype)
    rv = torch.ones(c, device=device, dtype=dtype)
    return (lambda: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1)), [x], [w, b]


def _b_layernorm(p, device, dtype, grad):
    import torch.nn.functional as F

    h = p["hidden"]
    x = _t((p["tokens"], h), device, dtype, grad)
    w = _t((h,), device, dtype, grad)
    b = _t((h,), device, dtype, grad)
    return (lambda: F.layer_norm(x, (h,), w, b)), [x], [w, b]


def _b_softmax(p, device, dtype, grad):
    import torch

    x = _t((p["rows"], p["cols"]), device, dtype, grad)
    return (lambda: torch.softmax(x, dim=-1)), [x], []


def _b_maxpool(p, device, dtype, grad):
    import torch.nn.functional as F

    x = _t((p["batch"], p["channels"], p["height"], p["height"]), device, dtype, grad)
    pad = 1 if p["kernel"] == 3 else 0
    return (lambda: F.max_pool2d(x, p["kernel"], p["stride"], pad)), [x], []


def _b_avgpool(p, device, dtype, grad):
    import torch.nn.functional as F

    x = _t((p["batch"], p["channels"], p["height"], p["height"]), device, dtype, grad)
    pad = 1 if p["kernel"] == 3 else 0
    return (lambda: F.avg_pool2d(x, p["kernel"], p["stride"], pad)), [x], []


def _b_adaptive_avgpool(p, device, dtype, grad):
    import torch.nn.functional as F

    x = _t((p["batch"], p["channels"], p["height"], p["height"]), device, dtype, grad)
    return (lambda: F.adaptive_avg_pool2d(x, 1)), [x], []


def _unary(fn_name: str):
    def build(p, device, dtype, grad):
        import torch
        import torch.nn.functional as F

        fn = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}[fn_name]
        x = _t(_act_tensor_shape(p), device, dtype, grad)
        return (lambda: fn(x)), [x], []

    return build


def _binary(fn_name: str):
    def build(p, device, dtype, grad):
        import torch

        fn = {"add": torch.add, "mul": torch.mul}[fn_name]
        shape = _act_tensor_shape(p)
        x = _t(shape, device, dtype, grad)
        y = _t(shape, device, dtype, grad)
        return (lambda: fn(x, y)), [x, y], []

    return build


def _b_dropout(p, device, dtype, grad):
    import torch.nn.functional as F

    x = _t(_act_tensor_shape(p), device, dtype, grad)
    return (lambda: F.dropout(x, p["p"], training=True)), [x], []


def _b_sdpa(p, device, dtype, grad):
    import torch.nn.functional as F

    shape = (p["batch"], p["heads"], p["seq"], p["head_dim"])
    q, k, v = (_t(shape, device, dtype, grad) for _ in range(3))
    return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"])), [q, k, v], []


def _b_embedding(p, device, dtype, grad):
    import torch
    import torch.nn.functional as F

    if str(device) == "meta":
        idx = torch.empty((p["batch"], p["seq"]), dtype=torch.long, device="meta")
    else:
        idx = torch.randint(0, p["vocab"], (p["batch"], p["seq"]), device=device)
    w = _t((p["vocab"], p["hidden"]), device, dtype, grad)
    return (lambda: F.embedding(idx, w)), [idx], [w]


def _b_cross_entropy(p, device, dtype, grad):
    import torch
    import torch.nn.functional as F

    x = _t((p["rows"], p["classes"]), device, dtype, grad)
    if str(device) == "meta":
        y = torch.empty((p["rows"],), dtype=torch.long, device="meta")
    else:
        y = torch.randint(0, p["classes"], (p["rows"],), device=device)
    return (lambda: F.cross_entropy(x, y)), [x, y], []


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class OpSpec:
    """One op a campaign can time."""

    name: str
    op_class: str  # one of traincast.workload.records.OP_CLASSES
    sample: Callable[[np.random.Generator], dict] = field(repr=False)
    build: Callable = field(repr=False)
    counted: bool  # FLOPs from FlopCounterMode (else `flops_per_elem` formula)
    flops_per_elem: float = 0.0  # forward FLOPs per output element (formula ops)
    shrink_keys: tuple[str, ...] = ("batch",)  # halved to fit a size cap, in order


# forward FLOPs per output element of memory-bound ops (backward counted as 2x);
# rough operation counts, not timings: these ops are bounded by bytes.
OPS: dict[str, OpSpec] = {
    s.name: s
    for s in [
        OpSpec("conv2d", "conv", _s_conv2d, _b_conv2d, True, shrink_keys=("batch", "height", "in_channels", "out_channels")),
        OpSpec("conv_transpose2d", "conv", _s_conv_transpose2d, _b_conv_transpose2d, True,
               shrink_keys=("batch", "height", "in_channels", "out_channels")),
        OpSpec("linear", "matmul", _s_linear, _b_linear, True, shrink_keys=("tokens", "in_features", "out_features")),
        OpSpec("matmul", "matmul", _s_matmul, _b_matmul, True, shrink_keys=("m", "k", "n")),
        OpSpec("bmm", "matmul", _s_bmm, _b_bmm, True, shrink_keys=("batch", "m", "n", "k")),
        OpSpec("batchnorm", "norm", _s_batchnorm, _b_batchnorm, False, 8.0, ("batch", "height", "channels")),
        OpSpec("layernorm", "norm", _s_layernorm, _b_layernorm, False, 8.0, ("tokens", "hidden")),
        OpSpec("softmax", "reduction", _s_softmax, _b_softmax, False, 5.0, ("rows", "cols")),
        OpSpec("maxpool", "pool", _s_pool, _b_maxpool, False, 9.0, ("batch", "height", "channels")),
        OpSpec("avgpool", "pool", _s_pool, _b_avgpool, False, 9.0, ("batch", "height", "channels")),
        OpSpec("adaptive_avgpool", "pool", _s_batchnorm, _b_adaptive_avgpool, False, 1.0, ("batch", "height", "channels")),
        OpSpec("relu", "elementwise", _s_act, _unary("relu"), False, 1.0, ("batch", "seq", "height", "hidden", "channels")),
        OpSpec("gelu", "elementwise", _s_act, _unary("gelu"), False, 8.0, ("batch", "seq", "height", "hidden", "channels")),
        OpSpec("silu", "elementwise", _s_act, _unary("silu"), False, 4.0, ("batch", "seq", "height", "hidden", "channels")),
        OpSpec("tanh", "elementwise", _s_act, _unary("tanh"), False, 4.0, ("batch", "seq", "height", "hidden", "channels")),
        OpSpec("sigmoid", "elementwise", _s_act, _unary("sigmoid"), False, 4.0, ("batch", "seq", "height", "hidden", "channels")),
        OpSpec("add", "elementwise", _s_act, _binary("add"), False, 1.0, ("batch", "seq", "height", "hidden", "channels")),
        OpSpec("mul", "elementwise", _s_act, _binary("mul"), False, 1.0, ("batch", "seq", "height", "hidden", "channels")),
        OpSpec("dropout", "elementwise", _s_dropout, _b_dropout, False, 2.0, ("batch", "seq", "height", "hidden", "channels")),
        OpSpec("sdpa", "attention", _s_sdpa, _b_sdpa, True, shrink_keys=("batch", "seq", "heads")),
        OpSpec("embedding", "embedding", _s_embedding, _b_embedding, False, 0.0, ("batch", "seq", "vocab", "hidden")),
        OpSpec("cross_entropy", "reduction", _s_cross_entropy, _b_cross_entropy, False, 6.0, ("rows", "classes")),
    ]
}

GROUPS: dict[str, tuple[str, ...]] = {
    "pool": ("maxpool", "avgpool", "adaptive_avgpool"),
    "norm": ("batchnorm", "layernorm"),
    "activation": ("relu", "gelu", "silu", "tanh", "sigmoid"),
    "elementwise": ("relu", "gelu", "silu", "tanh", "sigmoid", "add", "mul", "dropout"),
    "cnn": ("conv2d", "batchnorm", "relu", "maxpool", "avgpool", "adaptive_avgpool", "add", "linear"),
    "transformer": ("linear", "matmul", "bmm", "layernorm", "softmax", "gelu", "add", "dropout", "sdpa", "embedding", "cross_entropy"),
    "all": tuple(OPS),
}
ALIASES = {"bn": "batchnorm", "ln": "layernorm", "conv": "conv2d", "mm": "matmul", "attention": "sdpa",
           "pooling": "pool", "deconv": "conv_transpose2d", "max_pool2d": "maxpool", "avg_pool2d": "avgpool"}


def resolve_ops(names: str | Sequence[str] | None) -> tuple[str, ...]:
    """Expand a comma list of op and group names (``None`` or ``all``: every op)."""
    if names is None:
        return tuple(OPS)
    if isinstance(names, str):
        names = [n for n in (s.strip() for s in names.split(",")) if n]
    if not names:
        raise ConfigError(f"no ops given; choose from {', '.join(OPS)} or a group ({', '.join(GROUPS)})")
    out: list[str] = []
    for raw in names:
        n = raw.lower().replace("-", "_")
        n = ALIASES.get(n, n)
        if n in GROUPS:
            out.extend(GROUPS[n])
        elif n in OPS:
            out.append(n)
        else:
            raise UnknownNameError("op", raw, list(OPS) + list(GROUPS))
    return tuple(dict.fromkeys(out))


def get_op(name: str) -> OpSpec:
    n = ALIASES.get(name.lower(), name.lower())
    if n not in OPS:
        raise UnknownNameError("op", name, OPS)
    return OPS[n]


def param_names(name: str) -> tuple[str, ...]:
    """The parameter names of op ``name`` (keys of its sampled configurations)."""
    return tuple(get_op(name).sample(np.random.default_rng(0)).keys())
