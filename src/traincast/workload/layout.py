"""The memory format convolutions run in: PyTorch's default (NCHW, ``contiguous``) or ``channels_last`` (NHWC).

On NVIDIA tensor cores cuDNN's convolution kernels work on NHWC activations; a model left in PyTorch's default
NCHW format pays a transpose kernel before and after each such convolution (the roofline's ``nchw_transpose``,
predict/roofline.py), which ``model.to(memory_format=torch.channels_last)`` and channels-last inputs remove.
Mixed-precision CNN recipes run that way: NVIDIA DeepLearningExamples' ConvNets (``--memory-format nhwc`` in
their AMP commands), timm's ``--channels-last``, TensorFlow's NHWC default on GPUs. ``channels_last`` marks every
convolution of a trace (forward and backward) as NHWC; nothing else in the step changes cost in this model.
"""

from __future__ import annotations

from dataclasses import replace

from traincast.errors import ConfigError

MEMORY_FORMATS = {"contiguous": "PyTorch's default: NCHW activations (tensor-core convolutions pay layout transposes)",
                  "channels_last": "NHWC activations (model and inputs .to(memory_format=torch.channels_last))"}
_ALIASES = {"nchw": "contiguous", "channels_first": "contiguous", "nhwc": "channels_last", "channels-last": "channels_last"}


def check_memory_format(fmt: str) -> str:
    """The canonical name of memory format ``fmt`` (``contiguous`` | ``channels_last``; nchw/nhwc accepted)."""
    name = _ALIASES.get(str(fmt).strip().lower(), str(fmt).strip().lower())
    if name not in MEMORY_FORMATS:
        raise ConfigError(f"--memory-format must be one of {', '.join(MEMORY_FORMATS)} (or nchw / nhwc), got {fmt!r}")
    return name


def apply_memory_format(wl, fmt: str = "contiguous"):
    """``wl`` with its convolutions in memory format ``fmt``."""
    fmt = check_memory_format(fmt)
    if fmt == "contiguous" or wl.memory_format == fmt:
        return wl
    ops = tuple(replace(o, layout="nhwc") if o.op_class.startswith("conv") else o for o in wl.ops)
    return replace(wl, ops=ops, memory_format=fmt)
