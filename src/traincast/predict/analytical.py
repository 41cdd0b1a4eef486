"""The analytical predictor: PALEO's per-op model, done as a roofline (:mod:`traincast.predict.roofline`).

Compute and memory are a roofline (the larger wins), not PALEO's sum. The parameters come per device
generation from the catalog's ``efficiency.yaml`` and can be overridden, wholly or in part, by a calibrated
device profile (``overrides``, the roofline's YAML form).
"""

from __future__ import annotations

from collections.abc import Mapping

from traincast.hardware.records import Device
from traincast.predict.base import OpTimes, Predictor
from traincast.predict.roofline import RooflineParams, compile_ops
from traincast.workload.records import Workload


class AnalyticalPredictor(Predictor):
    """Roofline per op. ``overrides`` replaces catalog parameters (a calibrated profile's)."""

    def __init__(self, overrides: Mapping | None = None, name: str = "analytical"):
        self.overrides = dict(overrides or {})
        self.name = name

    def __repr__(self) -> str:
        return f"AnalyticalPredictor(name={self.name!r}, overrides={'yes' if self.overrides else 'none'})"

    def params(self, device: Device) -> RooflineParams:
        return RooflineParams.for_device(device, self.overrides)

    def predict(self, workload: Workload, device: Device, precision: str = "fp32") -> OpTimes:
        p = self.params(device)
        ops = compile_ops(workload.ops, device, precision, p, getattr(workload, "sdpa", "auto"))
        t, bound = ops.times(p, with_bound=True)
        return OpTimes(self.name, tuple(t.tolist()), tuple(bound), p.step_overhead_ms * 1e-3)
