"""The optimizers traincast models, by name (a :class:`~traincast.registry.Registry`), with foreach
(multi-tensor) kernels as on GPUs. Each entry is a factory ``(params, lr) -> torch.optim.Optimizer``."""

from __future__ import annotations

from traincast.registry import Registry

OPTIMIZERS: Registry = Registry("optimizer")


@OPTIMIZERS.register("sgd", help="SGD with momentum 0.9 (one momentum buffer per parameter)")
def _sgd(params, lr: float | None = None):
    import torch

    return torch.optim.SGD(params, lr=lr or 0.1, momentum=0.9, foreach=True)


@OPTIMIZERS.register("adam", help="Adam (two moments per parameter)")
def _adam(params, lr: float | None = None):
    import torch

    return torch.optim.Adam(params, lr=lr or 1e-3, foreach=True)


@OPTIMIZERS.register("adamw", help="AdamW, weight decay 0.01 (two moments per parameter)")
def _adamw(params, lr: float | None = None):
    import torch

    return torch.optim.AdamW(params, lr=lr or 1e-3, weight_decay=0.01, foreach=True)


@OPTIMIZERS.register("rmsprop", help="RMSprop (one square average per parameter)")
def _rmsprop(params, lr: float | None = None):
    import torch

    return torch.optim.RMSprop(params, lr=lr or 1e-3, foreach=True)
