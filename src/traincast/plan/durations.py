"""Job durations on each (VM type, GPU count): the simulator's only view of speed.

A *duration provider* answers ``duration_s(job_class, vm, gpus)`` with the
seconds a whole job takes on ``gpus`` GPUs of one VM of type ``vm``, or
``None`` when it cannot run there (out of memory, no data). Providers:

- ``ForecastDurations``: traincast's own forecasts (``traincast.predict.forecast``),
  cached per (model, GPU, GPUs, batch, epochs, dataset, precision).
- ``TableDurations``: a fixed table, for tests and hand-made instances.
- ``EstimateDurations``: a first-order FLOPs / peak estimate from the scenario's
  ``estimate`` data, used only where forecasts are unavailable.
- ``ScenarioDurations``: the chain used by default - a class's explicit
  ``durations_s`` in the scenario file, else the forecast, else the estimate -
  counting where each figure came from.

``OptionTable`` turns a provider into the per-class list of run options
(VM type, GPUs, duration) once, so the simulator never forecasts per event.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from traincast.errors import ConfigError, UnknownNameError
from traincast.plan.scenario import Estimate, JobClass, Scenario, VMType, gpu_key
from traincast.predict.roofline import roofline_s


class DurationProvider(Protocol):
    def duration_s(self, job_class: JobClass, vm: VMType, gpus: int) -> float | None: ...


class TableDurations:
    """Durations from a table keyed by (class or model name, GPU name, GPUs)."""

    def __init__(self, table: Mapping[tuple[str, str, int], float]):
        self._table = {(k[0], gpu_key(k[1]), int(k[2])): float(v) for k, v in table.items()}

    def duration_s(self, job_class: JobClass, vm: VMType, gpus: int) -> float | None:
        g = gpu_key(vm.gpu)
        for name in (job_class.name, job_class.model):
            v = self._table.get((name, g, gpus))
            if v is not None:
                return v
        return None


class ForecastDurations:
    """Durations from ``traincast.predict.forecast``, one call per distinct key.

    The global batch stays fixed when the GPU count grows (strong scaling,
    ``per_gpu_batch=False``), as the job mix's batch sizes are global.
    Configurations that do not fit in GPU memory give ``None``.
    """

    def __init__(self, optimizer: str = "sgd"):
        self.optimizer = optimizer
        self._cache: dict[tuple, float | None] = {}
        self.calls = 0

    def duration_s(self, job_class: JobClass, vm: VMType, gpus: int) -> float | None:
        key = (job_class.model, gpu_key(vm.gpu), gpus, job_class.batch_size, job_class.epochs,
               job_class.dataset_size, job_class.precision)
        if key in self._cache:
            return self._cache[key]
        from traincast.predict import forecast  # lazy: tracing needs torch
        if gpus > job_class.batch_size:
            self._cache[key] = None
            return None
        self.calls += 1
        fc = forecast(job_class.model, gpu=vm.gpu, gpus=gpus, nodes=1,
                      batch_size=job_class.batch_size, per_gpu_batch=False,
                      epochs=job_class.epochs, dataset_size=job_class.dataset_size,
                      precision=job_class.precision, optimizer=self.optimizer)
        value = float(fc.total_s) if fc.fits_in_memory else None
        if value is not None and not (value > 0 and math.isfinite(value)):
            value = None
        self._cache[key] = value
        return value


class EstimateDurations:
    """First-order estimate: 3 x forward GFLOPs x samples / (peak x efficiency),
    divided by the GPU count with ``scaling_efficiency_per_doubling`` per doubling."""

    def __init__(self, estimate: Estimate):
        self.estimate = estimate

    def duration_s(self, job_class: JobClass, vm: VMType, gpus: int) -> float | None:
        gf = self.estimate.gflops(job_class.model)
        peak = self.estimate.peak_tflops(vm.gpu)
        if gf is None or peak is None or gpus > job_class.batch_size:
            return None
        flops = 3.0 * gf * 1e9 * job_class.dataset_size * job_class.epochs
        scale = gpus * self.estimate.scaling_efficiency_per_doubling ** math.log2(gpus)
        # compute only (the scenario gives no bytes): the roofline's compute term at the scenario's efficiency
        speed = peak * 1e12 * self.estimate.efficiency * scale
        return float(roofline_s([flops], [0.0], speed, math.inf)[0])


class ScenarioDurations:
    """The default chain: scenario override -> forecast -> estimate.

    ``origins`` counts how many distinct (class, GPU, GPUs) durations came from
    each source: ``scenario``, ``forecast``, ``estimate``.
    """

    def __init__(self, scenario: Scenario, forecaster: DurationProvider | None = None,
                 use_forecast: bool = True):
        self.forecaster = forecaster if forecaster is not None else ForecastDurations()
        self.use_forecast = use_forecast
        self.estimator = EstimateDurations(scenario.estimate) if scenario.estimate else None
        self.origins: Counter[str] = Counter()
        self._cache: dict[tuple, float | None] = {}

    def duration_s(self, job_class: JobClass, vm: VMType, gpus: int) -> float | None:
        key = (job_class.name, gpu_key(vm.gpu), gpus)
        if key in self._cache:
            return self._cache[key]
        value, origin = self._lookup(job_class, vm, gpus)
        self._cache[key] = value
        if value is not None:
            self.origins[origin] += 1
        return value

    def _lookup(self, job_class: JobClass, vm: VMType, gpus: int) -> tuple[float | None, str]:
        if job_class.has_overrides:
            # explicit durations are the whole truth for that class
            return job_class.override_s(vm.gpu, gpus), "scenario"
        if self.use_forecast:
            try:
                return self.forecaster.duration_s(job_class, vm, gpus), "forecast"
            except UnknownNameError:
                # a GPU or model the forecaster does not know: estimate if we can
                if self.estimator is None or self.estimator.duration_s(job_class, vm, gpus) is None:
                    raise
        if self.estimator is not None:
            return self.estimator.duration_s(job_class, vm, gpus), "estimate"
        return None, "none"


@dataclass(frozen=True)
class Option:
    """One way to run a job: ``gpus`` GPUs of a VM of type ``vm`` for ``duration_s``."""

    vm: VMType
    gpus: int
    duration_s: float

    @property
    def alone_cost_usd(self) -> float:
        """Cost of running it alone on a fresh VM (the whole VM is paid)."""
        return self.vm.usd_per_s * self.duration_s


class OptionTable:
    """Per job class, every feasible (VM type, GPUs, duration), computed once."""

    def __init__(self, scenario: Scenario, provider: DurationProvider):
        self.scenario = scenario
        self._options: dict[str, tuple[Option, ...]] = {}
        self._fastest: dict[str, float] = {}
        self._median: dict[str, float] = {}
        for cls in scenario.job_classes:
            opts = []
            for vm in scenario.vm_types:
                counts = sorted({g for g in scenario.gpu_counts if g <= vm.gpus} | {vm.gpus})
                for g in counts:
                    d = provider.duration_s(cls, vm, g)
                    if d is not None:
                        if not (d > 0 and math.isfinite(d)):
                            raise ConfigError(f"duration of job class {cls.name} on {vm.name} x{g} "
                                              f"must be a positive number of seconds, got {d!r}")
                        opts.append(Option(vm, g, float(d)))
            if not opts:
                raise ConfigError(
                    f"job class {cls.name} ({cls.model}, batch {cls.batch_size}) can run on none of "
                    f"the VM types {', '.join(v.name for v in scenario.vm_types)} (out of memory or no "
                    "duration); add a bigger VM type or give durations_s")
            self._options[cls.name] = tuple(opts)
            self._fastest[cls.name] = min(o.duration_s for o in opts)
            self._median[cls.name] = float(sorted(o.duration_s for o in opts)[len(opts) // 2])

    def options(self, job_class: str) -> tuple[Option, ...]:
        return self._options[job_class]

    def fastest_s(self, job_class: str) -> float:
        return self._fastest[job_class]

    def median_s(self, job_class: str) -> float:
        """The median duration over the class's options (VM types x GPU counts)."""
        return self._median[job_class]

    def reference_s(self, job_class: str) -> float:
        """The duration a deadline factor multiplies, per the scenario."""
        if self.scenario.deadline_reference == "fastest":
            return self.fastest_s(job_class)
        return self.median_s(job_class)
