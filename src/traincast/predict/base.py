"""The one predictor interface: ``predict(workload, device) -> per-op times``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from traincast.hardware.records import Device
from traincast.workload.records import Workload


@dataclass(frozen=True)
class OpTimes:
    """Predicted seconds of each op of a workload (same order as ``workload.ops``).

    ``bound`` says per op what limits it: ``compute``, ``memory`` or ``latency``
    (launch/dispatch floor). ``step_overhead_s`` is the fixed cost per step.
    """

    predictor: str
    times_s: tuple[float, ...]
    bound: tuple[str, ...]
    step_overhead_s: float = 0.0

    def total_s(self) -> float:
        return sum(self.times_s) + self.step_overhead_s


@runtime_checkable
class Predictor(Protocol):
    name: str

    def predict(self, workload: Workload, device: Device, precision: str = "fp32") -> OpTimes: ...
