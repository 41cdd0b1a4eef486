"""Keras-like layer specs (JSON or YAML) turned into PyTorch models.

```yaml
name: mnist-cnn
input: {shape: [28, 28, 1]}        # Keras order: height, width, channels
loss: categorical_crossentropy     # or binary_crossentropy, mse
layers:
  - {type: conv2d, filters: 32, kernel_size: 3, activation: relu}
  - {type: maxpool, pool_size: 2}
  - {type: flatten}
  - {type: dense, units: 10}
```
Layer types: conv2d, dense, maxpool, avgpool, flatten, dropout, batchnorm,
activation. Errors name the layer (index and type) and the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from traincast.errors import SpecError, UnknownNameError
from traincast.workload.steps import supervised_step

EXAMPLES_DIR = Path(__file__).parent / "examples"

_ACTIVATIONS = {
    "relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "gelu": nn.GELU,
    "elu": nn.ELU, "leaky_relu": nn.LeakyReLU, "softplus": nn.Softplus, "silu": nn.SiLU,
    "softmax": None, "linear": None, None: None,
}
# field -> (type, required, default)
_FIELDS: dict[str, dict[str, tuple[type | tuple, bool, object]]] = {
    "conv2d": {"filters": (int, True, None), "kernel_size": ((int, list), True, None),
               "strides": ((int, list), False, 1), "padding": (str, False, "valid"),
               "activation": (str, False, None), "use_bias": (bool, False, True)},
    "dense": {"units": (int, True, None), "activation": (str, False, None), "use_bias": (bool, False, True)},
    "maxpool": {"pool_size": ((int, list), False, 2), "strides": ((int, list), False, None),
                "padding": (str, False, "valid")},
    "avgpool": {"pool_size": ((int, list), False, 2), "strides": ((int, list), False, None),
                "padding": (str, False, "valid")},
    "flatten": {},
    "dropout": {"rate": ((float, int), True, None)},
    "batchnorm": {},
    "activation": {"activation": (str, True, None)},
}
_LOSSES = ("categorical_crossentropy", "sparse_categorical_crossentropy", "binary_crossentropy", "mse")


def example_path(name: str) -> Path:
    return EXAMPLES_DIR / f"{name.replace('-', '_')}.yaml"


def load_spec(source: str | Path | dict) -> dict:
    """Read a spec from a dict, a .json/.yaml file path."""
    if isinstance(source, dict):
        return source
    path = Path(source)
    if not path.exists():
        raise SpecError(f"spec file {str(path)!r} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # json/yaml syntax errors
        raise SpecError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a spec is a mapping with 'input' and 'layers'")
    data.setdefault("name", path.stem.replace("_", "-"))
    return data


def _pair(v, what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return (v[0], v[1])
    raise SpecError(f"{what} must be an integer or a list of two integers, got {v!r}")


def _same_pad(size: tuple[int, int], k: tuple[int, int], s: tuple[int, int]) -> tuple[int, int, int, int]:
    """TensorFlow SAME padding (left, right, top, bottom)."""
    pads = []
    for n, kk, ss in zip(size, k, s):
        out = math.ceil(n / ss)
        total = max((out - 1) * ss + kk - n, 0)
        pads.append((total // 2, total - total // 2))
    (top, bottom), (left, right) = pads
    return (left, right, top, bottom)


def _validate_layer(i: int, layer) -> tuple[str, dict]:
    if not isinstance(layer, dict):
        raise SpecError(f"layer {i}: must be a mapping like {{type: dense, units: 10}}, got {layer!r}")
    layer = dict(layer)
    kind = layer.pop("type", None)
    if kind is None and len(layer) == 1:  # short form: {dense: {units: 10}}
        kind, fields = next(iter(layer.items()))
        layer = dict(fields or {})
    if kind is None:
        raise SpecError(f"layer {i}: missing field 'type' (one of {', '.join(_FIELDS)})")
    kind = str(kind).lower()
    if kind not in _FIELDS:
        raise UnknownNameError(f"layer type (layer {i})", kind, list(_FIELDS))
    allowed = _FIELDS[kind]
    for key in layer:
        if key not in allowed:
            hint = f"; fields of {kind}: {', '.join(allowed) or 'none'}"
            raise SpecError(f"layer {i} ({kind}): unknown field {key!r}{hint}")
    out = {}
    for key, (typ, required, default) in allowed.items():
        if key not in layer:
            if required:
                raise SpecError(f"layer {i} ({kind}): missing field {key!r}")
            out[key] = default
            continue
        v = layer[key]
        if v is not None and (not isinstance(v, typ) or (isinstance(v, bool) and typ is int)):
            raise SpecError(f"layer {i} ({kind}): field {key!r} has the wrong type: {v!r}")
        if isinstance(v, int) and not isinstance(v, bool) and key in ("filters", "units", "kernel_size", "pool_size", "strides") and v <= 0:
            raise SpecError(f"layer {i} ({kind}): field {key!r} must be positive, got {v}")
        out[key] = v
    if kind == "dropout" and not 0 <= out["rate"] < 1:
        raise SpecError(f"layer {i} (dropout): rate must be in [0, 1), got {out['rate']}")
    for key in ("activation",):
        if key in out and out[key] is not None and out[key] not in _ACTIVATIONS:
            raise UnknownNameError(f"activation (layer {i}, {kind})", out[key], [a for a in _ACTIVATIONS if a])
    if "padding" in out and out["padding"] not in ("valid", "same"):
        raise SpecError(f"layer {i} ({kind}): padding must be 'valid' or 'same', got {out['padding']!r}")
    return kind, out


class SpecModel(nn.Sequential):
    """The nn.Sequential a spec describes (layers named as in Keras: conv2d, conv2d_1...)."""


def build_spec_module(spec: dict, device: torch.device | str = "meta") -> tuple[SpecModel, tuple[int, int, int], str]:
    """Build the model; returns (module, (C, H, W) input, loss name). Shapes are checked layer by layer."""
    inp = spec.get("input")
    if not isinstance(inp, dict) or "shape" not in inp:
        hint = ("" if "layers" in spec else
                "; a Hugging Face config.json needs a 'model_type' (e.g. \"model_type\": \"gpt2\")")
        raise SpecError("spec: missing 'input: {shape: [height, width, channels]}'" + hint)
    shape = inp["shape"]
    if not (isinstance(shape, list) and len(shape) in (1, 3) and all(isinstance(x, int) and x > 0 for x in shape)):
        raise SpecError(f"spec: input.shape must be [height, width, channels] or [features] of positive integers, got {shape!r}")
    layout = inp.get("layout", "channels_last")
    if len(shape) == 3:
        c, h, w = (shape[2], shape[0], shape[1]) if layout == "channels_last" else tuple(shape)
        cur: tuple[int, ...] = (c, h, w)
    else:
        cur = (shape[0],)
    start = cur
    loss = spec.get("loss", "categorical_crossentropy")
    if loss not in _LOSSES:
        raise UnknownNameError("loss", loss, _LOSSES)
    layers = spec.get("layers")
    if not isinstance(layers, list) or not layers:
        raise SpecError("spec: 'layers' must be a non-empty list")
    mods: list[tuple[str, nn.Module]] = []
    counts: dict[str, int] = {}

    def add(kind: str, m: nn.Module):
        n = counts.get(kind, 0)
        counts[kind] = n + 1
        mods.append((kind if n == 0 else f"{kind}_{n}", m))

    def window(where: str, what: str, k, s, padding: str) -> tuple[int, int, int]:
        """(C, H, W) a sliding window sees after TensorFlow SAME padding (zero padding:
        the same cost as the max-pool's -inf padding); checks the window fits."""
        c, h, w = cur
        if padding == "same":
            pad = _same_pad((h, w), k, s)
            if any(pad):
                add("zero_padding2d", nn.ZeroPad2d(pad))
            h, w = h + pad[2] + pad[3], w + pad[0] + pad[1]
        if k[0] > h or k[1] > w:
            raise SpecError(f"{where}: {what} {list(k)} is larger than its input {h}x{w}")
        return c, h, w

    def act(name):
        cls = _ACTIVATIONS.get(name)
        if cls is not None:
            add(name, cls())

    with torch.device(device):
        for i, raw in enumerate(layers):
            kind, f = _validate_layer(i, raw)
            where = f"layer {i} ({kind})"
            if kind in ("conv2d", "maxpool", "avgpool", "batchnorm") and len(cur) != 3:
                raise SpecError(f"{where}: needs an image input (channels, height, width) but gets a flat vector of {cur[0]}; put it before 'flatten'")
            if kind == "dense" and len(cur) != 1:
                raise SpecError(f"{where}: needs a flat input but gets shape {list(cur)}; add {{type: flatten}} before it")
            if kind == "conv2d":
                k = _pair(f["kernel_size"], f"{where}: kernel_size")
                s = _pair(f["strides"], f"{where}: strides")
                c, h, w = window(where, "kernel", k, s, f["padding"])
                add("conv2d", nn.Conv2d(c, f["filters"], k, s, bias=f["use_bias"]))
                cur = (f["filters"], (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1)
                act(f["activation"])
            elif kind in ("maxpool", "avgpool"):
                k = _pair(f["pool_size"], f"{where}: pool_size")
                s = _pair(f["strides"] if f["strides"] is not None else list(k), f"{where}: strides")
                c, h, w = window(where, "pool", k, s, f["padding"])
                cls = nn.MaxPool2d if kind == "maxpool" else nn.AvgPool2d
                add("max_pooling2d" if kind == "maxpool" else "average_pooling2d", cls(k, s))
                cur = (c, (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1)
            elif kind == "flatten":
                add("flatten", nn.Flatten())
                cur = (math.prod(cur),)
            elif kind == "dense":
                add("dense", nn.Linear(cur[0], f["units"], bias=f["use_bias"]))
                cur = (f["units"],)
                act(f["activation"])
            elif kind == "dropout":
                add("dropout", nn.Dropout(f["rate"]))
            elif kind == "batchnorm":
                add("batch_normalization", nn.BatchNorm2d(cur[0]))
            elif kind == "activation":
                act(f["activation"])
    if len(cur) != 1:
        raise SpecError(f"spec: the last layer outputs shape {list(cur)}; end with flatten and dense layers")
    model = SpecModel()
    for n, m in mods:
        model.add_module(n, m)
    return model, start, loss


def build_spec_step(source, *, batch_size, device, optimizer="sgd", precision="fp32", freeze=None, seq_len=None, **_):
    spec = load_spec(source)
    model, shape, loss = build_spec_module(spec, device)
    n_out = model[-1].out_features if isinstance(model[-1], nn.Linear) else None
    last_act = next((m for m in reversed(model) if not isinstance(m, nn.Dropout)), None)
    if n_out is None:
        n_out = next(m.out_features for m in reversed(model) if isinstance(m, nn.Linear))

    def make_batch(dev):
        x = torch.randn(batch_size, *shape, device=dev)
        if loss in ("categorical_crossentropy", "sparse_categorical_crossentropy"):
            y = torch.randint(0, n_out, (batch_size,), device=dev)
        else:
            y = torch.rand(batch_size, n_out, device=dev)
        return (x,), {}, y

    def loss_fn(out, y):
        if loss in ("categorical_crossentropy", "sparse_categorical_crossentropy"):
            return F.cross_entropy(out, y)
        if loss == "binary_crossentropy":
            if isinstance(last_act, nn.Sigmoid):
                return F.binary_cross_entropy(out, y)
            return F.binary_cross_entropy_with_logits(out, y)
        return F.mse_loss(out, y)

    dims = "x".join(str(d) for d in shape)
    return supervised_step(
        spec.get("name", "spec"), model, make_batch, loss_fn,
        batch_size=batch_size, device=device, optimizer=optimizer, precision=precision,
        freeze=freeze, input_description=f"{batch_size}x{dims} (from spec)",
    )
