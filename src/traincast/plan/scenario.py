"""Scenarios for the cluster simulator: VM types, job classes, arrivals, deadlines.

A scenario is read from YAML (a built-in name such as ``ardagna2019`` or a file
path) into frozen records. Jobs are either listed explicitly in the file or
generated: Poisson arrivals (exponential inter-arrival times), a job class
drawn by its ``share``, a deadline ``arrival + factor x fastest duration`` and
a tardiness weight in dollars per hour late.

Every mistake a user can make in a scenario file raises ``SpecError``,
``ConfigError`` or ``UnknownNameError`` with a one-line message.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import numpy as np

from pydantic import Field

from traincast.errors import ConfigError, SpecError, UnknownNameError, read_text_file
from traincast.schema import Document, Fraction, NonNegativeFloat, PositiveFloat, parse

def gpu_key(name: str) -> str:
    """A GPU name normalised for matching: 'GeForce GTX 1080 Ti' == 'gtx1080ti'."""
    s = re.sub(r"[^a-z0-9]", "", name.lower())
    for prefix in ("nvidia", "tesla", "geforce"):
        if s.startswith(prefix):
            s = s[len(prefix):]
    return s


@dataclass(frozen=True)
class VMType:
    """An on-demand VM type (or in-house server) a node can run."""

    name: str
    gpu: str
    gpus: int
    usd_per_hour: float
    provider: str = ""
    max_count: int | None = None  # at most this many active at once (None: no limit)

    @property
    def usd_per_s(self) -> float:
        return self.usd_per_hour / 3600.0


@dataclass(frozen=True)
class JobClass:
    """A kind of training job: model, data, epochs, batch, and optional durations."""

    name: str
    model: str
    dataset_size: int
    epochs: float
    batch_size: int
    share: float = 1.0
    framework: str = ""
    precision: str = "fp32"
    # explicit durations (whole job, seconds): ((gpu_key, gpus), seconds) pairs
    durations_s: tuple[tuple[tuple[str, int], float], ...] = ()

    def override_s(self, gpu: str, gpus: int) -> float | None:
        key = (gpu_key(gpu), gpus)
        for k, v in self.durations_s:
            if k == key:
                return v
        return None

    @property
    def has_overrides(self) -> bool:
        return bool(self.durations_s)


@dataclass(frozen=True)
class Estimate:
    """Data for the first-order fallback estimate of durations."""

    efficiency: float
    scaling_efficiency_per_doubling: float
    fwd_gflops_per_sample: tuple[tuple[str, float], ...]
    peak_tflops_fp32: tuple[tuple[str, float], ...]
    source: str = ""

    def gflops(self, model: str) -> float | None:
        return dict(self.fwd_gflops_per_sample).get(model)

    def peak_tflops(self, gpu: str) -> float | None:
        return {gpu_key(k): v for k, v in self.peak_tflops_fp32}.get(gpu_key(gpu))


@dataclass(frozen=True)
class Job:
    """One submitted job. Times are seconds from the start of the simulation."""

    id: int
    job_class: str
    arrival_s: float
    deadline_s: float
    weight_usd_per_h: float  # tardiness penalty: dollars per hour past the deadline


@dataclass(frozen=True)
class Scenario:
    name: str
    vm_types: tuple[VMType, ...]
    job_classes: tuple[JobClass, ...]
    nodes: int
    n_jobs: int
    mean_interarrival_s: float
    deadline_factor: tuple[float, float] = (1.5, 4.0)
    deadline_reference: str = "median"  # duration the factor multiplies: fastest | median option
    weight_usd_per_h: tuple[float, float] = (0.5, 5.0)
    rescheduling_period_s: float = 600.0
    gpu_counts: tuple[int, ...] = (1, 2, 4, 8)
    estimate: Estimate | None = None
    jobs: tuple[Job, ...] | None = None  # explicit jobs; None: generate them
    description: str = ""
    source: str = ""
    notes: tuple[str, ...] = field(default=(), compare=False)

    def vm(self, name: str) -> VMType:
        for v in self.vm_types:
            if v.name == name:
                return v
        raise UnknownNameError("VM type", name, [v.name for v in self.vm_types])

    def job_class(self, name: str) -> JobClass:
        for c in self.job_classes:
            if c.name == name:
                return c
        raise UnknownNameError("job class", name, [c.name for c in self.job_classes])

    def with_overrides(self, *, nodes: int | None = None, n_jobs: int | None = None,
                       mean_interarrival_s: float | None = None) -> Scenario:
        """A copy with other cluster size, job count or arrival rate (validated)."""
        changes: dict[str, Any] = {}
        if nodes is not None:
            _check_int("nodes", nodes)
            changes["nodes"] = nodes
            if n_jobs is None and self.jobs is None:
                changes["n_jobs"] = max(1, round(self.n_jobs / self.nodes * nodes))
        if n_jobs is not None:
            _check_int("jobs", n_jobs)
            changes["n_jobs"] = n_jobs
        if mean_interarrival_s is not None:
            _check_pos("mean inter-arrival time (s)", mean_interarrival_s)
            changes["mean_interarrival_s"] = float(mean_interarrival_s)
        return dataclasses.replace(self, **changes)


# ---------------------------------------------------------------- loading

def builtin_scenarios() -> list[str]:
    files = resources.files("traincast.plan") / "data"
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".yaml"))


def load_scenario(ref: str | Path) -> Scenario:
    """A built-in scenario by name (``ardagna2019``) or a YAML file by path."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        if not path.is_file():
            what = "is a folder" if path.is_dir() else "does not exist"
            raise SpecError(f"scenario file {str(path)!r} {what}; give a YAML file "
                            f"or one of the built-in scenarios: {', '.join(builtin_scenarios())}")
        text = read_text_file(path, "scenario file")
        where = str(path)
    else:
        names = builtin_scenarios()
        if str(ref) not in names:
            raise UnknownNameError("scenario", str(ref), names)
        text = (resources.files("traincast.plan") / "data" / f"{ref}.yaml").read_text()
        where = f"built-in scenario {ref}"
    import yaml
    from traincast import yamlio

    try:
        doc = yamlio.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{where}: not valid YAML{at}; a scenario is a YAML mapping "
                        "with vm_types, job_classes, nodes, arrivals") from None
    return parse_scenario(doc, where=where)


# ---------------------------------------------------------------- the schema

PosInt = Annotated[int, Field(strict=True, ge=1, le=10**9)]
Range = Union[NonNegativeFloat, Annotated[list[NonNegativeFloat], Field(min_length=2, max_length=2)]]


class _VMRow(Document):
    name: Annotated[str, Field(min_length=1)]
    provider: str = ""
    gpu: str | None = None
    gpus: PosInt | None = None
    usd_per_hour: NonNegativeFloat | None = None
    max_count: PosInt | None = None


class _ClassRow(Document):
    name: Annotated[str, Field(min_length=1)]
    model: Annotated[str, Field(min_length=1)]
    dataset_size: Annotated[int, Field(strict=True, ge=1, le=10**13)]
    epochs: Annotated[float, Field(gt=0, le=10**6, allow_inf_nan=False)]
    batch_size: Annotated[int, Field(strict=True, ge=1, le=2**31 - 1)]
    share: PositiveFloat = 1.0
    framework: str = ""
    precision: str = "fp32"
    # GPU type -> GPU count -> seconds for the whole job
    durations_s: dict[str, dict[PosInt, PositiveFloat]] = {}


class _Arrivals(Document):
    process: Literal["poisson"] = "poisson"
    mean_interarrival_s: PositiveFloat = 30.0


class _Deadline(Document):
    factor: Range = (1.5, 4.0)
    reference: Literal["fastest", "median"] = "median"


class _EstimateRow(Document):
    efficiency: Fraction = 0.35
    scaling_efficiency_per_doubling: Fraction = 0.9
    fwd_gflops_per_sample: dict[str, PositiveFloat] = {}
    peak_tflops_fp32: dict[str, PositiveFloat] = {}
    source: str = ""
    date: Union[str, datetime.date] = ""


class _JobRow(Document):
    job_class: str = Field(alias="class")
    arrival_s: NonNegativeFloat = 0.0
    deadline_s: NonNegativeFloat
    weight_usd_per_h: NonNegativeFloat = 1.0
    id: Annotated[int, Field(strict=True, ge=0)] | None = None


class ScenarioFile(Document):
    """The schema of a scenario file (the built-in ``ardagna2019.yaml`` documents every key)."""

    name: str | None = None
    description: str = ""
    source: str = ""
    date: Union[str, datetime.date] = ""
    nodes: Annotated[int, Field(strict=True, ge=1, le=100_000)]
    jobs_per_node: PositiveFloat | None = None
    n_jobs: Annotated[int, Field(strict=True, ge=1, le=10**6)] | None = None
    arrivals: _Arrivals = _Arrivals()
    deadline: _Deadline = _Deadline()
    weight_usd_per_h: Range = (0.5, 5.0)
    rescheduling_period_s: PositiveFloat = 600.0
    gpu_counts: Annotated[list[PosInt], Field(min_length=1)] = [1, 2, 4, 8]
    vm_types: Annotated[list[Union[str, _VMRow]], Field(min_length=1)]
    job_classes: Annotated[list[_ClassRow], Field(min_length=1)]
    estimate: _EstimateRow | None = None
    jobs: Annotated[list[_JobRow], Field(min_length=1)] | None = None


def parse_scenario(doc: Any, *, where: str = "scenario") -> Scenario:
    """Validate a scenario mapping (as read from YAML) into a ``Scenario``: its shape and bounds by schema
    (:class:`ScenarioFile`), then what a schema cannot say (names the catalog and zoo must know, deadlines
    after arrivals, unique names)."""
    if not isinstance(doc, Mapping):
        raise SpecError(f"{where}: a scenario must be a YAML mapping, got {type(doc).__name__}")
    f = parse(ScenarioFile, dict(doc), where)
    vm_types = tuple(_resolve_vm(row, where) for row in f.vm_types)
    _no_duplicates([v.name for v in vm_types], f"{where}: VM type")
    gpu_names = {gpu_key(v.gpu) for v in vm_types}
    estimate = None
    if f.estimate is not None:
        e = f.estimate
        estimate = Estimate(e.efficiency, e.scaling_efficiency_per_doubling, tuple(e.fwd_gflops_per_sample.items()),
                            tuple(e.peak_tflops_fp32.items()), e.source)
    classes = tuple(_parse_class(row, where, gpu_names, estimate) for row in f.job_classes)
    _no_duplicates([c.name for c in classes], f"{where}: job class")
    n_jobs = f.n_jobs if f.n_jobs is not None else max(1, round((f.jobs_per_node or 10) * f.nodes))
    factor = _range(f.deadline.factor, f"{where}: deadline.factor", low=1.0)
    weights = _range(f.weight_usd_per_h, f"{where}: weight_usd_per_h", low=0.0)
    jobs = None
    if f.jobs is not None:
        jobs = _parse_jobs(f.jobs, where, {c.name for c in classes})
        n_jobs = len(jobs)
    notes = []
    if any(c.has_overrides for c in classes):
        notes.append("classes " + ", ".join(c.name for c in classes if c.has_overrides)
                     + " carry explicit durations from the scenario file")
    return Scenario(
        name=str(f.name if f.name is not None else Path(where).stem), vm_types=vm_types, job_classes=classes,
        nodes=f.nodes, n_jobs=int(n_jobs), mean_interarrival_s=float(f.arrivals.mean_interarrival_s),
        deadline_factor=factor, deadline_reference=f.deadline.reference, weight_usd_per_h=weights,
        rescheduling_period_s=float(f.rescheduling_period_s), gpu_counts=tuple(f.gpu_counts), estimate=estimate,
        jobs=jobs, description=f.description, source=f.source, notes=tuple(notes),
    )


def _resolve_vm(row: str | _VMRow, where: str) -> VMType:
    from traincast.hardware.catalog import get_catalog

    if isinstance(row, str):
        row = _VMRow(name=row)
    name = row.name
    cat = get_catalog()
    try:
        inst = cat.instance(name)
    except UnknownNameError:
        inst = None
    inline = row.gpu is not None and row.gpus is not None and row.usd_per_hour is not None
    if inst is None and not inline:
        raise UnknownNameError("VM type (not in the hardware catalog; or give its gpu, gpus and usd_per_hour inline)",
                               name, list(cat.instances))
    if inline:  # values given inline win over a catalog instance of the same name, and are checked
        gpu, gpus, price = str(row.gpu), int(row.gpus), float(row.usd_per_hour)
        cat.device(gpu)  # an unknown GPU: UnknownNameError with the nearest names
        provider = row.provider or (inst.provider if inst is not None else "")
    else:
        if inst.usd_per_hour is None:
            raise ConfigError(f"{where}: VM type {name}: the catalog has no price for it; give usd_per_hour inline")
        gpu, gpus, price = inst.device.name, int(inst.gpus), float(inst.usd_per_hour)
        provider = inst.provider or row.provider
    return VMType(name=name, gpu=gpu, gpus=gpus, usd_per_hour=price, provider=provider, max_count=row.max_count)


def _known_model(name: str) -> bool:
    from traincast.workload import zoo

    try:
        zoo.get(name)
    except UnknownNameError:
        return False
    return True


def _parse_class(row: _ClassRow, where: str, gpu_names: set[str], estimate: Estimate | None) -> JobClass:
    name = row.name
    durations: list[tuple[tuple[str, int], float]] = []
    for gpu, per in row.durations_s.items():
        if gpu_key(gpu) not in gpu_names:
            raise UnknownNameError(f"GPU type in durations_s of job class {name}", gpu, sorted(gpu_names))
        for g, sec in per.items():
            durations.append(((gpu_key(gpu), int(g)), float(sec)))
    model = row.model
    if not durations and (estimate is None or estimate.gflops(model) is None) and not _known_model(model):
        from traincast.workload import zoo

        raise UnknownNameError(f"model (job class {name})", model, list(zoo.ZOO) + list(zoo.all_torchvision_names()))
    return JobClass(name=name, model=model, dataset_size=row.dataset_size, epochs=float(row.epochs),
                    batch_size=row.batch_size, share=float(row.share), framework=row.framework,
                    precision=row.precision, durations_s=tuple(durations))


def _parse_jobs(rows: list[_JobRow], where: str, class_names: set[str]) -> tuple[Job, ...]:
    jobs = []
    for i, row in enumerate(rows):
        if row.job_class not in class_names:
            raise UnknownNameError(f"job class (job {i})", row.job_class, class_names)
        if row.deadline_s <= row.arrival_s:
            raise ConfigError(f"{where}: job {i}: deadline_s {row.deadline_s:g} is not after its arrival "
                              f"{row.arrival_s:g} (a deadline in the past); give a deadline > arrival_s")
        jobs.append(Job(id=row.id if row.id is not None else i, job_class=row.job_class, arrival_s=float(row.arrival_s),
                        deadline_s=float(row.deadline_s), weight_usd_per_h=float(row.weight_usd_per_h)))
    _no_duplicates([j.id for j in jobs], f"{where}: job id")
    return tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.id)))


# ---------------------------------------------------------------- generation

def poisson_arrivals_s(n: int, mean_interarrival_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a Poisson process: cumulative exponential gaps, first at 0."""
    gaps = rng.exponential(mean_interarrival_s, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def generate_jobs(scenario: Scenario, reference_s: Callable[[str], float],
                  rng: np.random.Generator) -> tuple[Job, ...]:
    """Jobs of a scenario: explicit ones, or Poisson arrivals with drawn class,
    deadline (arrival + factor x ``reference_s(class)``) and tardiness weight."""
    if scenario.jobs is not None:
        return scenario.jobs
    n = scenario.n_jobs
    arrivals = poisson_arrivals_s(n, scenario.mean_interarrival_s, rng)
    shares = np.array([c.share for c in scenario.job_classes], dtype=float)
    idx = rng.choice(len(shares), size=n, p=shares / shares.sum())
    factors = rng.uniform(*scenario.deadline_factor, size=n)
    weights = rng.uniform(*scenario.weight_usd_per_h, size=n)
    jobs = []
    for i in range(n):
        cls = scenario.job_classes[idx[i]].name
        jobs.append(Job(id=i, job_class=cls, arrival_s=float(arrivals[i]),
                        deadline_s=float(arrivals[i] + factors[i] * reference_s(cls)),
                        weight_usd_per_h=float(weights[i])))
    return tuple(jobs)


# ---------------------------------------------------------------- checks

def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a whole number >= 1, got {value!r}")


def _check_pos(name: str, value: Any) -> None:
    if not _is_number(value) or value <= 0:
        raise ConfigError(f"{name} must be a number > 0, got {value!r}")


def _range(value: Any, name: str, *, low: float) -> tuple[float, float]:
    if _is_number(value):
        value = (value, value)
    if (not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2
            or not all(_is_number(v) for v in value)):
        raise SpecError(f"{name} must be a [min, max] pair of numbers, got {value!r}")
    lo, hi = float(value[0]), float(value[1])
    if lo < low or hi < lo:
        raise ConfigError(f"{name} must satisfy {low} <= min <= max, got [{lo}, {hi}]")
    return lo, hi


def _no_duplicates(names: Sequence[Any], what: str) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise SpecError(f"{what} {n!r} is listed twice; names must be unique")
        seen.add(n)
