"""The one predictor interface: ``predict(workload, device, precision) -> OpTimes``.

Every way of timing a training step's ops is a :class:`Predictor` subclass: it declares what it can do
(``needs_shapes``: it reads op shapes, so interpolated workloads will not do; :meth:`covers`: the devices
it times itself) and says what a user should know about a forecast it made (:meth:`notes`). Predictors are
registered by name in :data:`traincast.predict.PREDICTORS`; the CLI and the planner take them from there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from traincast.hardware.records import Device
from traincast.workload.records import Workload


@dataclass(frozen=True)
class OpTimes:
    """Predicted seconds of each op of a workload (same order as ``workload.ops``).

    ``bound`` says per op what limits it: ``compute``, ``memory`` or ``latency``
    (launch/dispatch floor). ``step_overhead_s`` is the fixed cost per step. ``kernel_s``: each op's own time
    before the GPU's wait for the host that issues it was added (predict/host.py); None where none was.
    """

    predictor: str
    times_s: tuple[float, ...]
    bound: tuple[str, ...]
    step_overhead_s: float = 0.0
    kernel_s: tuple[float, ...] | None = None

    def total_s(self) -> float:
        return sum(self.times_s) + self.step_overhead_s


class Predictor(ABC):
    """Per-op times of a traced training step on a device."""

    name: str = "predictor"
    needs_shapes: ClassVar[bool] = False  # reads op shapes: exact traces, not interpolated ones

    @abstractmethod
    def predict(self, workload: Workload, device: Device, precision: str = "fp32") -> OpTimes:
        """Seconds of each op of ``workload`` on ``device`` under ``precision``."""

    def covers(self, device: Device) -> bool:
        """Whether this predictor times ``device`` with its own method (else it falls back to another)."""
        return True

    def needs_shapes_on(self, device: Device) -> bool:
        """Whether forecasts on ``device`` read op shapes (exact traces, not interpolated ones): ``needs_shapes``,
        unless the predictor hands ``device`` to one that does not."""
        return self.needs_shapes

    def notes(self, workload: Workload, device: Device, precision: str = "fp32") -> list[str]:
        """What a user should know about a forecast this predictor made (coverage, adaptations...)."""
        return []


class PredictorWrapper(Predictor):
    """A predictor that changes another's times (it keeps the inner one's capabilities and notes)."""

    def __init__(self, inner: Predictor):
        self.inner = inner

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    @property
    def needs_shapes(self) -> bool:  # type: ignore[override]
        return self.inner.needs_shapes

    def covers(self, device: Device) -> bool:
        return self.inner.covers(device)

    def needs_shapes_on(self, device: Device) -> bool:
        return self.inner.needs_shapes_on(device)

    def notes(self, workload: Workload, device: Device, precision: str = "fp32") -> list[str]:
        return self.inner.notes(workload, device, precision)
