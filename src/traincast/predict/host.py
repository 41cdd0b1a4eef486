"""The host that issues the kernels: when the GPU finishes kernels faster than eager PyTorch launches them.

In eager PyTorch the host (Python, the dispatcher, autograd's bookkeeping, the caching allocator and the
driver's launch) spends some microseconds on every op before its kernel reaches the GPU's queue, and the GPU
runs the queue in order. While kernels are long the host runs ahead and the queue hides its cost; when they are
short (small micro-batches, element-wise ops, many small layers) the GPU waits for the host between kernels.

The step is simulated as two workers in order: the host issues op ``i`` at ``H_i = H_{i-1} + h_i``, the GPU
starts it at ``max(G_{i-1}, H_i)`` and ends it ``g_i`` later (the predictor's time of the op). ``h_i`` is
``host_forward_us`` for ops of the forward pass, the loss and the optimizer (issued by Python code) and
``host_backward_us`` for ops of the backward pass (issued by autograd's engine, in C++). The step starts with
both idle (the previous step ended at a synchronisation: reading the loss, the optimizer's step). Each op's
effective time is ``G_i - G_{i-1}``: its kernel plus the time the GPU waited for it; the sum is the step.

The recurrence ``G_i = max(G_{i-1}, H_i) + g_i`` has the closed form
``G_i = S_i + max(0, max_{k<=i} (H_k - S_{k-1}))`` with ``S`` the running sum of ``g``: one pass of NumPy.

The defaults (``efficiency.yaml``) are measured on a CPU, not fitted to GPU measurements:
``benchmarks/host_dispatch.py`` runs eager training steps of small models whose kernels take a microsecond
or two on this machine's CPU, so that their step time is the host's work, and divides by the ops traincast
traces. CPUs (the device is the host) leave them at 0: their dispatch cost is in ``op_overhead_us``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from traincast.predict.base import OpTimes, PredictorWrapper

# The slowest GPU host this project measured: `traincast calibrate --device cuda --host-only` on a Firecracker
# virtual machine (16 vCPUs) with one H200, torch 2.11 (benchmarks/data/gpu_campaign/h200_host_profile_2026-11-28.yaml;
# another such machine the day before: 38.7 / 37.0, h200_host_profile_2026-11-27.yaml).
# Not a default: the figure the forecast's note names when a step's time depends on its host.
SLOW_HOST_US = (42.5, 41.4)
# the note is given where that host would lengthen the step by this share or more
SLOW_HOST_NOTE_SHARE = 0.10


def host_seconds(ops: Sequence, forward_us: float, backward_us: float,
                 recurrent: frozenset = frozenset()) -> np.ndarray:
    """Host time to issue each op (seconds). Ops of a recurrent module (``recurrent``: their paths) are traced as
    PyTorch's per-step decomposition but run as one cuDNN call per phase, issued once (predict/rnn.py): the first
    op of each such module and phase carries the call's host time, the others none."""
    out = np.empty(len(ops))
    seen: set = set()
    for i, o in enumerate(ops):
        if o.fusion == 2:  # inside a fused kernel (workload/fusion.py): issued with its group's first op
            out[i] = 0.0
            continue
        h = (backward_us if o.phase == "backward" else forward_us) * 1e-6
        if recurrent and o.module in recurrent:
            key = (o.module, o.phase)
            h = 0.0 if key in seen else h
            seen.add(key)
        out[i] = h
    return out


def issue_bound(gpu_s: Sequence[float], host_s: Sequence[float]) -> np.ndarray:
    """Effective seconds of each op when the host issues them ``host_s`` apart and the GPU runs each for
    ``gpu_s`` in order (module docstring)."""
    g = np.asarray(gpu_s, dtype=float)
    h = np.asarray(host_s, dtype=float)
    if g.size == 0:
        return g
    issued = np.cumsum(h)
    done_before = np.concatenate(([0.0], np.cumsum(g)[:-1]))
    lead = np.maximum(0.0, np.maximum.accumulate(issued - done_before))
    end = np.cumsum(g) + lead
    return np.diff(np.concatenate(([0.0], end)))


def predict_with_host(predictor, workload, device, precision: str = "fp32", by_phase: bool = False) -> OpTimes:
    """``predictor``'s times of ``workload.ops`` on ``device``; on a GPU, with its wait for the host that issues
    them (:func:`with_host`, at :func:`host_costs`). What every forecast of a step times its ops by."""
    ot = predictor.predict(workload, device, precision)
    if device.kind == "gpu":  # the GPU waits where the host issues kernels slower than they run
        ot = with_host(ot, workload, *host_costs(predictor, device), by_phase=by_phase)
    return ot


def with_host(ot: OpTimes, workload, forward_us: float, backward_us: float, by_phase: bool = False) -> OpTimes:
    """``ot`` (the times of ``workload.ops``) with each op's time stretched by the GPU's wait for the host; ops
    the GPU waited for are ``latency`` bound. ``by_phase``: the backward ops are one sequence and the others
    another (for op lists grouped by layer, not in the order a step runs them: the parallel engine's)."""
    ops = workload.ops
    if not (forward_us or backward_us) or not ops:
        return ot
    h = host_seconds(ops, forward_us, backward_us, recurrent_modules(workload))
    if by_phase:
        eff = np.empty(len(ops))
        back = np.array([o.phase == "backward" for o in ops])
        g = np.asarray(ot.times_s, dtype=float)
        for sel in (back, ~back):
            if sel.any():
                eff[sel] = issue_bound(g[sel], h[sel])
    else:
        eff = issue_bound(ot.times_s, h)
    waited = eff > np.asarray(ot.times_s, dtype=float) * (1 + 1e-9) + 1e-15
    bound = tuple("latency" if w else b for w, b in zip(waited, ot.bound))
    return replace(ot, times_s=tuple(float(x) for x in eff), bound=bound,
                   kernel_s=ot.kernel_s if ot.kernel_s is not None else tuple(ot.times_s))


def recurrent_modules(workload) -> frozenset:
    """The paths of the workload's recurrent modules (issued once per phase: :func:`host_seconds`)."""
    return frozenset(c.module for c in getattr(workload, "recurrent_calls", ()) or ())


def _overrides(predictor) -> dict | None:
    """The parameter overrides (a device profile's) the predictor or one it wraps carries, if any."""
    p, overrides = predictor, None
    while p is not None and overrides is None:
        overrides = getattr(p, "overrides", None)
        p = getattr(p, "inner", None)
    return overrides if isinstance(overrides, dict) else None


def host_measured(predictor) -> bool:
    """Whether the predictor's host costs come from a profile (measured), not from the catalog."""
    return bool({"host_forward_us", "host_backward_us"} & set(_overrides(predictor) or ()))


def predictor_params(predictor, device):
    """The roofline parameters of forecasts on ``device`` by ``predictor``: a device profile's where the predictor
    (or one it wraps) carries one (``overrides``), else the catalog's for the device's generation."""
    from traincast.predict.roofline import RooflineParams

    return RooflineParams.for_device(device, _overrides(predictor))


def host_costs(predictor, device) -> tuple[float, float]:
    """(host_forward_us, host_backward_us) for forecasts on ``device`` by ``predictor`` (:func:`predictor_params`)."""
    params = predictor_params(predictor, device)
    return params.host_forward_us, params.host_backward_us


def slow_host_note(ot: OpTimes, workload, predictor, device, iteration_s: float) -> str | None:
    """A note for a GPU forecast made with the catalog's host whose step would be ``SLOW_HOST_NOTE_SHARE`` or more
    longer on the slowest host measured here (``SLOW_HOST_US``): the step there, and how to measure one's own.
    None where the host costs come from a profile (measured), no host was applied, or the step barely depends on it."""
    if device.kind != "gpu" or ot.kernel_s is None or not workload.ops or host_measured(predictor):
        return None
    fwd, bwd = host_costs(predictor, device)
    if fwd >= SLOW_HOST_US[0]:
        return None
    slow = issue_bound(ot.kernel_s, host_seconds(workload.ops, *SLOW_HOST_US, recurrent_modules(workload))).sum()
    longer = float(slow) - float(np.sum(ot.times_s))
    if iteration_s <= 0 or longer < SLOW_HOST_NOTE_SHARE * iteration_s:
        return None
    return (f"short kernels: the step waits on the host that issues them (the catalog's host, {fwd:g} / {bwd:g} us "
            f"per forward / backward op); on a host as slow as the slowest measured here ({SLOW_HOST_US[0]:g} / "
            f"{SLOW_HOST_US[1]:g} us, a virtual machine) it takes {1e3 * (iteration_s + longer):.4g} ms "
            f"(+{100 * longer / iteration_s:.0f}%): `traincast calibrate --device cuda --host-only` measures yours")


class WithHost(PredictorWrapper):
    """``inner``'s op times, issued by a host measured elsewhere (a ``calibrate --host-only`` profile used with
    another catalog GPU): its ``overrides`` hold only the two host costs, which :func:`host_costs` reads."""

    def __init__(self, inner, forward_us: float, backward_us: float):
        super().__init__(inner)
        self.overrides = {"host_forward_us": float(forward_us), "host_backward_us": float(backward_us)}

    def predict(self, workload, device, precision: str = "fp32") -> OpTimes:
        return self.inner.predict(workload, device, precision)
