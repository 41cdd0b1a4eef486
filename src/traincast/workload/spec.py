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
from typing import Annotated, Literal, Union

import torch
import torch.nn.functional as F
from torch import nn

from pydantic import Field, model_validator

from traincast.errors import SpecError, read_text_file
from traincast.schema import MAX_LAYERS, Document, parse
from traincast.workload.steps import supervised_step

EXAMPLES_DIR = Path(__file__).parent / "examples"
MAX_WINDOW = 2**16  # kernel, pool and stride sides
MAX_WIDTH = 2**20  # filters and units: a dense layer of 2^20 x 2^20 fp32 weights is already 4 TiB
MAX_INPUT_SIDE = 2**20

_ACTIVATIONS = {
    "relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "gelu": nn.GELU,
    "elu": nn.ELU, "leaky_relu": nn.LeakyReLU, "softplus": nn.Softplus, "silu": nn.SiLU,
    "softmax": None, "linear": None, None: None,
}
_LOSSES = ("categorical_crossentropy", "sparse_categorical_crossentropy", "binary_crossentropy", "mse")

# --- the schema ----------------------------------------------------------------------------
Activation = Literal["relu", "sigmoid", "tanh", "gelu", "elu", "leaky_relu", "softplus", "silu", "softmax", "linear"]
Loss = Literal["categorical_crossentropy", "sparse_categorical_crossentropy", "binary_crossentropy", "mse"]
Window = Annotated[int, Field(strict=True, ge=1, le=MAX_WINDOW)]
Size = Union[Window, Annotated[list[Window], Field(min_length=2, max_length=2)]]  # n or [height, width]
Width = Annotated[int, Field(strict=True, ge=1, le=MAX_WIDTH)]


class Conv2dLayer(Document):
    type: Literal["conv2d"]
    filters: Width
    kernel_size: Size
    strides: Size = 1
    padding: Literal["valid", "same"] = "valid"
    activation: Activation | None = None
    use_bias: bool = True


class DenseLayer(Document):
    type: Literal["dense"]
    units: Width
    activation: Activation | None = None
    use_bias: bool = True


class PoolLayer(Document):
    type: Literal["maxpool", "avgpool"]
    pool_size: Size = 2
    strides: Size | None = None
    padding: Literal["valid", "same"] = "valid"


class FlattenLayer(Document):
    type: Literal["flatten"]


class DropoutLayer(Document):
    type: Literal["dropout"]
    rate: Annotated[float, Field(ge=0, lt=1, strict=False, allow_inf_nan=False)]


class BatchNormLayer(Document):
    type: Literal["batchnorm"]


class ActivationLayer(Document):
    type: Literal["activation"]
    activation: Activation


Layer = Annotated[Union[Conv2dLayer, DenseLayer, PoolLayer, FlattenLayer, DropoutLayer, BatchNormLayer,
                        ActivationLayer], Field(discriminator="type")]


class InputShape(Document):
    shape: Annotated[list[Annotated[int, Field(strict=True, ge=1, le=MAX_INPUT_SIDE)]], Field(min_length=1, max_length=3)]
    layout: Literal["channels_last", "channels_first"] = "channels_last"

    @model_validator(mode="after")
    def _rank(self):
        if len(self.shape) == 2:
            raise ValueError("shape must be [height, width, channels] or [features]")
        return self


class LayerSpec(Document):
    """A Keras-like layer spec (the schema of ``.yaml``/``.json`` model files)."""

    name: Annotated[str, Field(min_length=1, max_length=200)] = "spec"
    input: InputShape
    loss: Loss = "categorical_crossentropy"
    layers: Annotated[list[Layer], Field(min_length=1, max_length=MAX_LAYERS)]


def _normalise(doc):
    """Before validation: layer types in any case, and the short form ``{dense: {units: 10}}``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        return doc
    layers = []
    for layer in doc["layers"]:
        if isinstance(layer, dict) and "type" not in layer and len(layer) == 1:
            (kind, fields), = layer.items()
            if fields is None or isinstance(fields, dict):
                layer = {"type": kind, **(fields or {})}
        if isinstance(layer, dict) and isinstance(layer.get("type"), str):
            layer = {**layer, "type": layer["type"].lower()}
        layers.append(layer)
    return {**doc, "layers": layers}


def validate_spec(doc, where: str = "spec") -> LayerSpec:
    """``doc`` (a mapping read from a spec file) checked against :class:`LayerSpec`; SpecError naming the layer
    and field otherwise."""
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: a spec is a mapping with 'input' and 'layers'")
    if "input" not in doc and "layers" not in doc:
        raise SpecError(f"{where}: missing 'input: {{shape: [height, width, channels]}}' and 'layers'; a Hugging "
                        "Face config.json needs a 'model_type' (e.g. \"model_type\": \"gpt2\")")
    return parse(LayerSpec, _normalise(doc), where)


def example_path(name: str) -> Path:
    return EXAMPLES_DIR / f"{name.replace('-', '_')}.yaml"


def load_spec(source: str | Path | dict | LayerSpec) -> LayerSpec:
    """Read and validate a spec from a dict or a .json/.yaml file path."""
    if isinstance(source, LayerSpec):
        return source
    if isinstance(source, dict):
        return validate_spec(source)
    path = Path(source)
    if not path.exists():
        raise SpecError(f"spec file {str(path)!r} does not exist")
    text = read_text_file(path, "spec file")
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            from traincast import yamlio

            data = yamlio.safe_load(text)
    except Exception as exc:  # json/yaml syntax errors
        raise SpecError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {str(exc).splitlines()[0]}") from None
    if isinstance(data, dict):
        data.setdefault("name", path.stem.replace("_", "-"))
    return validate_spec(data, str(path))


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (v[0], v[1])


def _same_pad(size: tuple[int, int], k: tuple[int, int], s: tuple[int, int]) -> tuple[int, int, int, int]:
    """TensorFlow SAME padding (left, right, top, bottom)."""
    pads = []
    for n, kk, ss in zip(size, k, s):
        out = math.ceil(n / ss)
        total = max((out - 1) * ss + kk - n, 0)
        pads.append((total // 2, total - total // 2))
    (top, bottom), (left, right) = pads
    return (left, right, top, bottom)


class SpecModel(nn.Sequential):
    """The nn.Sequential a spec describes (layers named as in Keras: conv2d, conv2d_1...)."""


def build_spec_module(spec: dict | LayerSpec, device: torch.device | str = "meta") -> tuple[SpecModel, tuple[int, int, int], str]:
    """Build the model; returns (module, (C, H, W) input, loss name). Shapes are checked layer by layer."""
    spec = load_spec(spec)
    shape, layout = spec.input.shape, spec.input.layout
    if len(shape) == 3:
        c, h, w = (shape[2], shape[0], shape[1]) if layout == "channels_last" else tuple(shape)
        cur: tuple[int, ...] = (c, h, w)
    else:
        cur = (shape[0],)
    start = cur
    loss = spec.loss
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
        for i, layer in enumerate(spec.layers):
            kind, f = layer.type, layer.model_dump()
            where = f"layer {i} ({kind})"
            if kind in ("conv2d", "maxpool", "avgpool", "batchnorm") and len(cur) != 3:
                raise SpecError(f"{where}: needs an image input (channels, height, width) but gets a flat vector of {cur[0]}; put it before 'flatten'")
            if kind == "dense" and len(cur) != 1:
                raise SpecError(f"{where}: needs a flat input but gets shape {list(cur)}; add {{type: flatten}} before it")
            if kind == "conv2d":
                k, s = _pair(f["kernel_size"]), _pair(f["strides"])
                c, h, w = window(where, "kernel", k, s, f["padding"])
                add("conv2d", nn.Conv2d(c, f["filters"], k, s, bias=f["use_bias"]))
                cur = (f["filters"], (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1)
                act(f["activation"])
            elif kind in ("maxpool", "avgpool"):
                k = _pair(f["pool_size"])
                s = _pair(f["strides"]) if f["strides"] is not None else k
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
        spec.name, model, make_batch, loss_fn,
        batch_size=batch_size, device=device, optimizer=optimizer, precision=precision,
        freeze=freeze, input_description=f"{batch_size}x{dims} (from spec)",
    )
