"""Validate a calibrated device profile: predicted vs measured steps of held-out models, op by op comparison
of a measured step with its forecast, and the validation plot (``traincast validate``, ``traincast bench
model --against``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traincast.errors import ConfigError
from traincast.fit.calibration import Measured, _trace_measured, fused_attention_for
from traincast.predict.profile import DeviceProfile


def predict_measured(profile: DeviceProfile, meas: list[Measured], device: str = "cpu") -> list[dict]:
    """Predicted vs measured for each measurement, with the per-phase split."""
    from traincast.hardware.records import Cluster
    from traincast.predict.compose import step_time

    dev = profile.device_record()
    pred = profile.predictor()
    rows = []
    fused = fused_attention_for(device)
    for m in meas:
        wl = _trace_measured(m, fused)
        st = step_time(wl, Cluster(dev), pred)
        rows.append({
            "model": m.model, "batch_size": m.batch_size, "measured_s": m.measured_s, "iqr_s": m.iqr_s,
            "predicted_s": st.iteration_s, "error_pct": (st.iteration_s - m.measured_s) / m.measured_s * 100,
            "predicted_phases_s": {"forward": st.forward_s, "backward": st.backward_s, "optimizer": st.optimizer_s},
            "measured_phases_s": m.phases_s,
        })
    return rows


@dataclass(frozen=True)
class StepComparison:
    """A measured step (``traincast bench model``) beside a device profile's forecast of it, op by op."""

    measured_ms: float  # median step
    predicted_ms: float
    phases: dict  # phase -> (measured ms, predicted ms); measured from the profiler's phase ranges
    ops: list  # (aten, phase, count, measured ms, predicted ms), largest |difference| first
    framework_ms: float  # measured self time outside aten ops (Python, autograd engine, hooks)
    step_overhead_ms: float  # predicted per-step fixed cost


def compare_step(mt, profile: "DeviceProfile") -> StepComparison:
    """Compare a profiled :class:`~traincast.measure.model.ModelTiming` with ``profile``'s forecast of the same
    step. Measured op times are profiler self times (kernels rolled up into the op a dispatch mode sees);
    predicted op times include each op's share of the per-op overhead, which on the measured side is mostly in
    ``framework_ms``."""
    from collections import defaultdict

    from traincast.workload import trace

    b = mt.breakdown
    if b is None:
        raise ConfigError("the step was not profiled (--profile-steps 0): nothing to compare op by op")
    wl = trace(mt.model, batch_size=mt.batch_size, optimizer=mt.optimizer or "sgd", precision=mt.precision or "fp32",
               seq_len=mt.seq_len, fused_attention=fused_attention_for(mt.device))
    ot = profile.predictor().predict(wl, profile.device_record(), mt.precision or "fp32")
    pred, count, phase_pred = defaultdict(float), defaultdict(int), defaultdict(float)
    for op, t in zip(wl.ops, ot.times_s):
        pred[(op.aten, op.phase)] += t * 1e3
        count[(op.aten, op.phase)] += 1
        phase_pred[op.phase] += t * 1e3
    keys = set(pred)
    for a, d in b.per_aten.items():
        keys |= {(a, k[:-3]) for k, v in d.items() if k.endswith("_ms") and k != "total_ms" and v > 0}
    ops = [(a, ph, count.get((a, ph), 0), float(b.per_aten.get(a, {}).get(ph + "_ms", 0.0)), pred.get((a, ph), 0.0))
           for a, ph in keys]
    ops.sort(key=lambda r: -abs(r[3] - r[4]))
    phases = {ph: (float(b.per_phase_ms.get(ph, 0.0)), phase_pred.get(ph, 0.0))
              for ph in dict.fromkeys(list(b.per_phase_ms) + list(phase_pred))}
    framework = sum(v.get("overhead_ms", 0.0) for v in b.per_module.values())
    return StepComparison(float(mt.timing.median_ms), ot.total_s() * 1e3, phases, ops, float(framework),
                          ot.step_overhead_s * 1e3)


def mape(rows: list[dict]) -> float:
    if not rows:
        return float("nan")
    return float(np.mean([abs(r["error_pct"]) for r in rows]))


def plot_validation(cal_rows: list[dict], held_rows: list[dict], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for rows, label, mk in ((cal_rows, "calibration models", "o"), (held_rows, "held-out models", "s")):
        if rows:
            ax.scatter([r["measured_s"] * 1e3 for r in rows], [r["predicted_s"] * 1e3 for r in rows], marker=mk,
                       label=label)
            for r in rows:
                ax.annotate(f"{r['model']}/{r['batch_size']}", (r["measured_s"] * 1e3, r["predicted_s"] * 1e3),
                            fontsize=6, xytext=(2, 2), textcoords="offset points")
    allv = [r["measured_s"] * 1e3 for r in cal_rows + held_rows] + [r["predicted_s"] * 1e3 for r in cal_rows + held_rows]
    lo, hi = min(allv) * 0.7, max(allv) * 1.4
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="exact")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15, label="±10%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured step (ms)")
    ax.set_ylabel("predicted step (ms)")
    ax.set_title(f"held-out MAPE {mape(held_rows):.1f}%")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


