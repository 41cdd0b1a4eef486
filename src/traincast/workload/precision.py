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
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from traincast.registry import Registry


@dataclass(frozen=True)
class Precision:
    name: str
    autocast: str | None  # the half dtype autocast gives matmuls, convolutions, attention: fp16 | bf16 | None
    tf32_matmul: bool  # torch.backends.cuda.matmul.allow_tf32
    tf32_conv: bool  # torch.backends.cudnn.allow_tf32
    fp32_matrix: bool  # fp32 GEMMs and convolutions may run on full-FP32 matrix units (AMD CDNA MFMA)

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


def get_precision(name: str | Precision) -> Precision:
    """The registered precision ``name`` (UnknownNameError with did-you-mean otherwise)."""
    return name if isinstance(name, Precision) else PRECISIONS.get(name)
