"""The memory format convolutions run in: PyTorch's default (NCHW, ``contiguous``) or ``channels_last`` (NHWC).

On NVIDIA tensor cores cuDNN's convolution kernels work on NHWC activations; a model left in PyTorch's default
NCHW format pays a transpose kernel before and after each such convolution (the roofline's ``nchw_transpose``,
predict/roofline.py), which ``model.to(memory_format=torch.channels_last)`` and channels-last inputs remove.
Mixed-precision CNN recipes run that way: NVIDIA DeepLearningExamples' ConvNets (``--memory-format nhwc`` in
their AMP commands), timm's ``--channels-last``, TensorFlow's NHWC default on GPUs. ``channels_last`` marks every
convolution and batch norm of a trace (forward and backward) as NHWC: PyTorch's own batch-norm kernels (the ones
BF16 inputs get) have channels-last versions that do not reduce one channel per thread block
(predict/roofline.py, ``native_batch_norm_passes``); nothing else in the step changes cost in this model.
"""

from __future__ import annotations

from dataclasses import replace

from traincast.errors import ConfigError

MEMORY_FORMATS = {"contiguous": "PyTorch's default: NCHW activations (tensor-core convolutions pay layout transposes)",
                  "channels_last": "NHWC activations (model and inputs .to(memory_format=torch.channels_last))"}
# the training batch norms of a trace (aten names)
BATCH_NORM_FORWARD = ("native_batch_norm", "_native_batch_norm_legit")
BATCH_NORM_BACKWARD = ("native_batch_norm_backward",)
_ALIASES = {"nchw": "contiguous", "channels_first": "contiguous", "nhwc": "channels_last", "channels-last": "channels_last"}


def check_memory_format(fmt: str) -> str:
    """The canonical name of memory format ``fmt`` (``contiguous`` | ``channels_last``; nchw/nhwc accepted)."""
    name = _ALIASES.get(str(fmt).strip().lower(), str(fmt).strip().lower())
    if name not in MEMORY_FORMATS:
        raise ConfigError(f"--memory-format must be one of {', '.join(MEMORY_FORMATS)} (or nchw / nhwc), got {fmt!r}")
    return name


def apply_memory_format(wl, fmt: str = "contiguous"):
    """``wl`` with its convolutions and batch norms in memory format ``fmt``."""
    fmt = check_memory_format(fmt)
    if fmt == "contiguous" or wl.memory_format == fmt:
        return wl
    bn = BATCH_NORM_FORWARD + BATCH_NORM_BACKWARD
    ops = tuple(replace(o, layout="nhwc") if o.op_class.startswith("conv") or o.aten in bn else o for o in wl.ops)
    return replace(wl, ops=ops, memory_format=fmt)
