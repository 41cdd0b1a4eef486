"""The summed-layer gap (the practicum report's 1.5x): a whole training step against the sum of its layers
timed one by one, as Justus et al. predict a model, and the per-device correction of such sums."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from traincast.errors import ConfigError


@dataclass(frozen=True)
class LayerSum:
    """Whole step against the sum of its layers timed one by one (Justus et al.).

    ``layer_sum_s``: each leaf module's forward + backward + SGD update, timed
    alone on its real input, summed. ``harness_s``: what timing a layer alone
    costs beyond the layer (a loss, a backward-pass start, an optimizer call),
    measured on a layer that does nothing, times the number of layers.
    ``step_fixed_s``: the per-step fixed cost of the whole step (from the
    calibrated profile). ``residual_s``: what is left — cache effects (a layer
    alone finds its weights and inputs in cache) and ops outside modules.
    """

    model: str
    batch_size: int
    n_layers: int
    measured_s: float
    layer_sum_s: float
    harness_s: float
    step_fixed_s: float

    @property
    def corrected_sum_s(self) -> float:
        return self.layer_sum_s - self.harness_s + self.step_fixed_s

    @property
    def ratio_before(self) -> float:
        return self.layer_sum_s / self.measured_s

    @property
    def ratio_after(self) -> float:
        return self.corrected_sum_s / self.measured_s

    @property
    def residual_s(self) -> float:
        return self.measured_s - self.corrected_sum_s

    def to_dict(self) -> dict:
        return asdict(self) | {"corrected_sum_s": self.corrected_sum_s, "ratio_before": self.ratio_before,
                               "ratio_after": self.ratio_after, "residual_s": self.residual_s}


def _isolated_runner(mod, inputs):
    import torch

    params = [p for p in mod.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9) if params else None
    ins = [x.detach().clone().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x
           for x in inputs]

    def run():
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        out = mod(*ins)
        out = out[0] if isinstance(out, (tuple, list)) else out
        if out.requires_grad:
            out.float().sum().backward()
        if opt is not None:
            opt.step()

    return run


def layer_sum(model, batch_size: int, measured_s: float, *, step_fixed_s: float = 0.0, threads: int | None = None,
              seq_len: int | None = None) -> LayerSum:
    """Time every leaf module of ``model``'s step alone on CPU and compare the sum with ``measured_s``."""
    import torch

    from traincast.measure.timing import QUICK, flush_denormals, pinned_threads, time_fn
    from traincast.workload import build_step

    with pinned_threads(threads), flush_denormals():
        step = build_step(model, batch_size=batch_size, device="cpu", seq_len=seq_len)
        leaves, seen = [], set()

        def hook(mod, args):
            if id(mod) not in seen and args and all(isinstance(a, torch.Tensor) for a in args):
                seen.add(id(mod))
                leaves.append((mod, tuple(a.detach().clone() for a in args)))

        handles = [m.register_forward_pre_hook(hook) for root in step.modules for m in root.modules()
                   if not any(True for _ in m.children())]
        try:
            step.run()
        finally:
            for h in handles:
                h.remove()
        total = 0.0
        for mod, ins in leaves:
            inplace = getattr(mod, "inplace", False)
            if inplace:  # an in-place activation cannot work on a leaf input that needs a gradient
                mod.inplace = False
            try:
                total += time_fn(_isolated_runner(mod, ins), policy=QUICK).median_ms / 1e3
            finally:
                if inplace:
                    mod.inplace = True
        # the harness alone: a layer that does no work (a 1x1 linear on one number)
        tiny = torch.nn.Linear(1, 1)
        harness = time_fn(_isolated_runner(tiny, (torch.randn(1, 1),)), policy=QUICK).median_ms / 1e3
    return LayerSum(str(getattr(step, "name", model)), batch_size, len(leaves), measured_s, total,
                    harness * len(leaves), step_fixed_s)


def fit_layer_sum_correction(sums: list[LayerSum]) -> tuple[float, float]:
    """Per-device correction of summed layer times: measured ~= a x (sum - harness) + b, a, b >= 0.

    ``a`` absorbs what layers cost inside a model rather than alone (cache
    effects, gradients a layer alone computes for its input), ``b`` the
    per-step fixed cost; the practicum report used a = 1/1.5, b = 0 by hand.
    """
    from scipy.optimize import nnls

    if len(sums) < 2:
        raise ConfigError("fitting the summed-layer correction needs at least 2 measured steps")
    A = np.array([[s.layer_sum_s - s.harness_s, 1.0] for s in sums])
    y = np.array([s.measured_s for s in sums])
    w = 1.0 / y  # relative error
    (a, b), _ = nnls(A * w[:, None], y * w)
    return float(a), float(b)
