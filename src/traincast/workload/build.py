"""Build a model's training step from any model source, and trace it (``build_step``, ``trace``)."""


from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from traincast.errors import ConfigError, TraceError, TraincastError, positive
from traincast.workload.precision import PRECISIONS
from traincast.workload.records import Workload
from traincast.workload.selections import unsized_selection
from traincast.workload.steps import TrainingStep, resolve_device, supervised_step


def _module_step(module: nn.Module, inputs, *, batch_size, device, optimizer, precision, freeze, name=None):
    """A step for a user's nn.Module.

    ``inputs``: a per-sample shape ``(3, 224, 224)``, a list of shapes, or a
    callable ``inputs(batch_size, device) -> tuple of tensors``. The loss is
    cross-entropy for 2-D outputs against random labels, else mean squared error
    against zeros.
    """
    if inputs is None:
        raise ConfigError("an nn.Module needs an input description: inputs=(C, H, W) or a callable")
    module = module.to(device) if device.type != "meta" else module.to_empty(device="meta") if any(
        p.device.type != "meta" for p in module.parameters()) else module

    def make_batch(dev):
        if callable(inputs):
            args = inputs(batch_size, dev)
            args = args if isinstance(args, tuple) else (args,)
        else:
            shapes = inputs if inputs and isinstance(inputs[0], (tuple, list)) else [inputs]
            args = tuple(torch.randn(batch_size, *s, device=dev) for s in shapes)
        return args, {}, None

    def loss_fn(out, _t):
        out = out[0] if isinstance(out, (tuple, list)) else out
        if out.dim() == 2 and out.shape[1] > 1:
            y = torch.randint(0, out.shape[1], (out.shape[0],), device=out.device)
            return F.cross_entropy(out, y)
        return F.mse_loss(out, torch.zeros_like(out))

    desc = f"{batch_size} x {inputs}" if not callable(inputs) else f"{batch_size} x (callable inputs)"
    return supervised_step(
        name or type(module).__name__, module, make_batch, loss_fn, batch_size=batch_size,
        device=device, optimizer=optimizer, precision=precision, freeze=freeze, input_description=desc,
    )


def hf_folder_config(model) -> str:
    """``model`` as text; a folder holding a ``config.json`` (a Hugging Face model folder) is that file."""
    text = str(model)
    if Path(text).is_dir() and (Path(text) / "config.json").is_file():
        return str(Path(text) / "config.json")
    return text


def build_step(
    model: str | Path | nn.Module,
    *,
    batch_size: int,
    device: str | torch.device = "meta",
    optimizer: str = "sgd",
    precision: str = "fp32",
    seq_len: int | None = None,
    freeze: str | None = None,
    inputs: tuple | list | Callable | None = None,
) -> TrainingStep:
    """A full training step of ``model`` on synthetic data on ``device``."""
    positive("batch size", batch_size)
    if batch_size > 2**31 - 1:
        raise ConfigError(f"batch size {batch_size} is beyond what one tensor dimension holds (2^31 - 1)")
    if seq_len is not None:
        positive("sequence length", seq_len)
    precision = PRECISIONS.canonical(precision)
    dev = resolve_device(device)
    kw = dict(batch_size=batch_size, device=dev, optimizer=optimizer, precision=precision, freeze=freeze)
    if isinstance(model, nn.Module):
        return _module_step(model, inputs, **kw)
    from traincast.workload.sources import source_of

    text = hf_folder_config(model)
    return source_of(text).build(text, seq_len=seq_len, inputs=inputs, **kw)


def trace(
    model: str | Path | nn.Module,
    *,
    batch_size: int,
    optimizer: str = "sgd",
    precision: str = "fp32",
    seq_len: int | None = None,
    freeze: str | None = None,
    inputs=None,
    fused_attention: bool | None = None,
) -> Workload:
    """Trace one training step on the meta device (no memory, no arithmetic).

    ``model``: any text a model source of ``workload.sources.SOURCES`` recognises (a zoo or torchvision
    name, ``timm:NAME``, ``package.module:factory``, a diffusers or Hugging Face config, a layer spec) or
    an ``nn.Module`` with ``inputs``. ``fused_attention`` (default: the source's, on except for zoo CNNs,
    GANs and specs, which have no attention) traces ``scaled_dot_product_attention`` as the fused GPU
    kernel CUDA picks (``workload.fused``) rather than its math decomposition.
    """
    from traincast.workload.tracer import trace_step

    if isinstance(model, (str, Path)):
        model = hf_folder_config(model)

    if fused_attention is None:
        from traincast.workload.sources import source_of

        fused_attention = True if isinstance(model, nn.Module) else source_of(str(model)).fused_attention(str(model))

    step = build_step(model, batch_size=batch_size, device="meta", optimizer=optimizer,
                      precision=precision, seq_len=seq_len, freeze=freeze, inputs=inputs)
    try:
        return trace_step(step, precision=precision, fused_attention=fused_attention)
    except TraincastError:
        raise
    except Exception as exc:  # noqa: BLE001 - a model's own forward (a user's, a config's) can fail in any way
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "nonzero" in msg:
            msg = unsized_selection("its forward")
        elif not isinstance(exc, (RuntimeError, ValueError, IndexError, AttributeError, TypeError, KeyError,
                                  NotImplementedError)):
            msg = f"{type(exc).__name__}: {msg}"
        part = getattr(exc, "traincast_phase", None)
        where = {"forward": "in the forward pass (model and loss)", "backward": "in the backward pass",
                 "optimizer": "in the optimizer step"}.get(part)
        raise TraceError(f"cannot trace {step.name} with batch {batch_size}: "
                         + (f"{where}: {msg}" if where else msg)) from None
