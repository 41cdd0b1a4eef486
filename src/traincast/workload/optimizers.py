"""The optimizers traincast models, by name (a :class:`~traincast.registry.Registry`), with foreach
(multi-tensor) kernels as on GPUs. Each entry is a factory ``(params, lr) -> torch.optim.Optimizer``."""

from __future__ import annotations

import functools

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


@functools.cache
def _fused_adamw_class():
    """AdamW stepped by PyTorch's fused multi-tensor kernel (``torch._fused_adamw_``: one pass over parameters,
    gradients and both moments per chunk of tensors, as ``torch.optim.AdamW(fused=True)`` and torchtitan's default
    ``implementation: fused`` run it). ``torch.optim.AdamW(fused=True)`` refuses meta tensors, so the kernel is
    called directly: the same op the tracer then records, on any device that has it (CUDA, CPU)."""
    import torch

    class FusedAdamW(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
            super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                ps = [p for p in group["params"] if p.grad is not None]
                if not ps:
                    continue
                for p in ps:
                    st = self.state[p]
                    if not st:
                        st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                        st["exp_avg"] = torch.zeros_like(p)
                        st["exp_avg_sq"] = torch.zeros_like(p)
                sts = [self.state[p] for p in ps]
                torch._foreach_add_([s["step"] for s in sts], 1)
                b1, b2 = group["betas"]
                torch._fused_adamw_(ps, [p.grad for p in ps], [s["exp_avg"] for s in sts],
                                    [s["exp_avg_sq"] for s in sts], [], [s["step"] for s in sts],
                                    lr=group["lr"], beta1=b1, beta2=b2, weight_decay=group["weight_decay"],
                                    eps=group["eps"], amsgrad=False, maximize=False)
            return None

    return FusedAdamW


@OPTIMIZERS.register("adamw-fused", help="AdamW stepped by the fused kernel (torch.optim.AdamW(fused=True); "
                     "torchtitan's default): one pass over weights, gradients and both moments")
def _adamw_fused(params, lr: float | None = None):
    return _fused_adamw_class()(params, lr=lr or 1e-3)
