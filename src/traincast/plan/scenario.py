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
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from traincast.errors import ConfigError, SpecError, UnknownNameError

# The model names traincast's zoo forecasts (contract with traincast.workload).
ZOO_MODELS = (
    "alexnet", "vgg16", "vgg19", "resnet18", "resnet50", "resnet101", "inception_v3",
    "googlenet", "mobilenet_v2", "densenet121", "dcgan", "bert-base", "bert-large",
    "gpt2", "gpt2-large", "gpt3-xl", "llama-7b",
)


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
        text = path.read_text()
        where = str(path)
    else:
        names = builtin_scenarios()
        if str(ref) not in names:
            raise UnknownNameError("scenario", str(ref), names)
        text = (resources.files("traincast.plan") / "data" / f"{ref}.yaml").read_text()
        where = f"built-in scenario {ref}"
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{where}: not valid YAML{at}; a scenario is a YAML mapping "
                        "with vm_types, job_classes, nodes, arrivals") from None
    return parse_scenario(doc, where=where)


def parse_scenario(doc: Any, *, where: str = "scenario") -> Scenario:
    """Validate a scenario mapping (as read from YAML) into a ``Scenario``."""
    if not isinstance(doc, Mapping):
        raise SpecError(f"{where}: a scenario must be a YAML mapping, got {type(doc).__name__}")
    known = {"name", "description", "source", "date", "nodes", "jobs_per_node", "n_jobs",
             "arrivals", "deadline", "weight_usd_per_h", "rescheduling_period_s", "gpu_counts",
             "vm_types", "job_classes", "estimate", "jobs"}
    for k in doc:
        if k not in known:
            raise SpecError(f"{where}: unknown key {k!r}; known keys: {', '.join(sorted(known))}")

    def need(key: str) -> Any:
        if key not in doc:
            raise SpecError(f"{where}: missing key {key!r}")
        return doc[key]

    nodes = need("nodes")
    _check_int(f"{where}: nodes", nodes)
    gpu_counts = tuple(doc.get("gpu_counts", (1, 2, 4, 8)))
    for g in gpu_counts:
        _check_int(f"{where}: gpu_counts entry", g)

    vm_rows = need("vm_types")
    if not isinstance(vm_rows, list) or not vm_rows:
        raise SpecError(f"{where}: vm_types must be a non-empty list of VM types")
    vm_types = tuple(_resolve_vm(row, where) for row in vm_rows)
    _no_duplicates([v.name for v in vm_types], f"{where}: VM type")
    gpu_names = {gpu_key(v.gpu) for v in vm_types}

    estimate = _parse_estimate(doc.get("estimate"), where)
    cls_rows = need("job_classes")
    if not isinstance(cls_rows, list) or not cls_rows:
        raise SpecError(f"{where}: job_classes must be a non-empty list")
    classes = tuple(_parse_class(row, where, gpu_names, estimate) for row in cls_rows)
    _no_duplicates([c.name for c in classes], f"{where}: job class")

    arrivals = doc.get("arrivals", {}) or {}
    if not isinstance(arrivals, Mapping):
        raise SpecError(f"{where}: arrivals must be a mapping like {{process: poisson, mean_interarrival_s: 30}}")
    process = arrivals.get("process", "poisson")
    if process != "poisson":
        raise SpecError(f"{where}: arrivals.process {process!r} is not supported; use 'poisson'")
    mean_ia = arrivals.get("mean_interarrival_s", 30.0)
    _check_pos(f"{where}: arrivals.mean_interarrival_s", mean_ia)

    if "n_jobs" in doc:
        n_jobs = doc["n_jobs"]
    else:
        per = doc.get("jobs_per_node", 10)
        _check_pos(f"{where}: jobs_per_node", per)
        n_jobs = max(1, round(per * nodes))
    _check_int(f"{where}: n_jobs", n_jobs)

    deadline = doc.get("deadline", {}) or {}
    factor = _range(deadline.get("factor", (1.5, 4.0)) if isinstance(deadline, Mapping) else None,
                    f"{where}: deadline.factor", low=1.0)
    reference = deadline.get("reference", "median")
    if reference not in ("fastest", "median"):
        raise SpecError(f"{where}: deadline.reference must be 'fastest' or 'median', got {reference!r}")
    weights = _range(doc.get("weight_usd_per_h", (0.5, 5.0)), f"{where}: weight_usd_per_h", low=0.0)
    period = doc.get("rescheduling_period_s", 600.0)
    _check_pos(f"{where}: rescheduling_period_s", period)

    jobs = None
    if doc.get("jobs") is not None:
        jobs = _parse_jobs(doc["jobs"], where, {c.name for c in classes})
        n_jobs = len(jobs)

    notes = []
    if any(c.has_overrides for c in classes):
        notes.append("classes " + ", ".join(c.name for c in classes if c.has_overrides)
                     + " carry explicit durations from the scenario file")
    return Scenario(
        name=str(doc.get("name", Path(where).stem)), vm_types=vm_types, job_classes=classes,
        nodes=int(nodes), n_jobs=int(n_jobs), mean_interarrival_s=float(mean_ia),
        deadline_factor=factor, deadline_reference=reference, weight_usd_per_h=weights, rescheduling_period_s=float(period),
        gpu_counts=gpu_counts, estimate=estimate, jobs=jobs,
        description=str(doc.get("description", "")), source=str(doc.get("source", "")),
        notes=tuple(notes),
    )


def _resolve_vm(row: Any, where: str) -> VMType:
    if isinstance(row, str):
        row = {"name": row}
    if not isinstance(row, Mapping) or "name" not in row:
        raise SpecError(f"{where}: each vm_types entry needs a name, e.g. "
                        "{name: NC6, gpu: K80, gpus: 1, usd_per_hour: 0.56}")
    extra = set(row) - {"name", "provider", "gpu", "gpus", "usd_per_hour", "max_count"}
    if extra:
        raise SpecError(f"{where}: VM type {row['name']!r} has unknown keys {sorted(extra)}; "
                        "known: name, provider, gpu, gpus, usd_per_hour, max_count")
    name = str(row["name"])
    inst = _catalog_instance(name)
    inline = all(k in row for k in ("gpu", "gpus", "usd_per_hour"))
    if inst is None and not inline:
        known = _catalog_names()
        if known:
            raise UnknownNameError("VM type", name, known)
        raise SpecError(f"{where}: VM type {name!r} is not in the hardware catalog; give its "
                        "gpu, gpus and usd_per_hour inline")
    if inst is not None and not inline:
        gpu, gpus, price = inst.gpu.name, int(inst.gpus), float(inst.usd_per_hour)
        provider = str(getattr(inst, "provider", "") or row.get("provider", ""))
    else:  # values given inline win over a catalog instance of the same name, and are checked
        from traincast.hardware import get_catalog

        gpu, gpus, price = str(row["gpu"]), row["gpus"], row["usd_per_hour"]
        get_catalog().device(gpu)  # an unknown GPU: UnknownNameError with the nearest names
        provider = str(row.get("provider", "") or (getattr(inst, "provider", "") if inst is not None else ""))
    _check_int(f"{where}: VM type {name}: gpus", gpus)
    if not isinstance(price, (int, float)) or isinstance(price, bool) or price < 0 or not math.isfinite(price):
        raise ConfigError(f"{where}: VM type {name}: usd_per_hour must be a number >= 0, got {price!r}")
    max_count = row.get("max_count")
    if max_count is not None:
        _check_int(f"{where}: VM type {name}: max_count", max_count)
    return VMType(name=name, gpu=gpu, gpus=int(gpus), usd_per_hour=float(price),
                  provider=provider, max_count=max_count)


def _catalog():
    try:
        from traincast.hardware import get_catalog  # type: ignore[attr-defined]
    except ImportError:
        return None
    try:
        return get_catalog()
    except Exception:  # a catalog being written in parallel must not break scenarios
        return None


def _catalog_instance(name: str):
    cat = _catalog()
    if cat is None:
        return None
    try:
        return cat.instance(name)
    except UnknownNameError:
        return None
    except Exception:
        return None


def _catalog_names() -> list[str]:
    cat = _catalog()
    if cat is None:
        return []
    for attr in ("instance_names", "instances"):
        obj = getattr(cat, attr, None)
        try:
            items = obj() if callable(obj) else obj
            if items:
                return [getattr(i, "name", i) for i in items]
        except Exception:
            continue
    return []


def _parse_class(row: Any, where: str, gpu_names: set[str], estimate: Estimate | None) -> JobClass:
    if not isinstance(row, Mapping) or "name" not in row:
        raise SpecError(f"{where}: each job_classes entry needs a name, model, dataset_size, "
                        "epochs and batch_size")
    name = str(row["name"])
    allowed = {"name", "model", "dataset_size", "epochs", "batch_size", "share", "framework",
               "precision", "durations_s"}
    extra = set(row) - allowed
    if extra:
        raise SpecError(f"{where}: job class {name!r} has unknown keys {sorted(extra)}; "
                        f"known: {', '.join(sorted(allowed))}")
    for k in ("model", "dataset_size", "epochs", "batch_size"):
        if k not in row:
            raise SpecError(f"{where}: job class {name!r} is missing {k!r}")
    _check_int(f"{where}: job class {name}: dataset_size", row["dataset_size"])
    _check_int(f"{where}: job class {name}: batch_size", row["batch_size"])
    _check_pos(f"{where}: job class {name}: epochs", row["epochs"])
    share = row.get("share", 1.0)
    _check_pos(f"{where}: job class {name}: share", share)
    durations: list[tuple[tuple[str, int], float]] = []
    table = row.get("durations_s") or {}
    if not isinstance(table, Mapping):
        raise SpecError(f"{where}: job class {name}: durations_s must map GPU type -> "
                        "{gpus: seconds}, e.g. {K80: {1: 3600, 2: 2000}}")
    for gpu, per in table.items():
        if gpu_key(str(gpu)) not in gpu_names:
            raise UnknownNameError(f"GPU type in durations_s of job class {name}", str(gpu),
                                   sorted({v for v in _gpus_display(gpu_names)}))
        if not isinstance(per, Mapping):
            raise SpecError(f"{where}: job class {name}: durations_s[{gpu!r}] must map a GPU "
                            "count to seconds, e.g. {1: 3600, 2: 2000}")
        for g, s in per.items():
            _check_int(f"{where}: job class {name}: GPU count in durations_s[{gpu!r}]", g)
            _check_pos(f"{where}: job class {name}: duration for {gpu} x{g} (s)", s)
            durations.append(((gpu_key(str(gpu)), int(g)), float(s)))
    model = str(row["model"])
    if not durations and model not in ZOO_MODELS and (estimate is None or estimate.gflops(model) is None):
        raise UnknownNameError(f"model (job class {name})", model, ZOO_MODELS)
    return JobClass(name=name, model=model, dataset_size=int(row["dataset_size"]),
                    epochs=float(row["epochs"]), batch_size=int(row["batch_size"]),
                    share=float(share), framework=str(row.get("framework", "")),
                    precision=str(row.get("precision", "fp32")), durations_s=tuple(durations))


def _gpus_display(keys: set[str]) -> list[str]:
    return sorted(keys)


def _parse_estimate(row: Any, where: str) -> Estimate | None:
    if row is None:
        return None
    if not isinstance(row, Mapping):
        raise SpecError(f"{where}: estimate must be a mapping")
    try:
        eff = float(row.get("efficiency", 0.35))
        scal = float(row.get("scaling_efficiency_per_doubling", 0.9))
        fl = tuple((str(k), float(v)) for k, v in (row.get("fwd_gflops_per_sample") or {}).items())
        pk = tuple((str(k), float(v)) for k, v in (row.get("peak_tflops_fp32") or {}).items())
    except (TypeError, ValueError, AttributeError):
        raise SpecError(f"{where}: estimate needs numbers: efficiency, "
                        "scaling_efficiency_per_doubling, fwd_gflops_per_sample, peak_tflops_fp32") from None
    if not 0 < eff <= 1 or not 0 < scal <= 1:
        raise ConfigError(f"{where}: estimate efficiencies must lie in (0, 1]")
    return Estimate(eff, scal, fl, pk, str(row.get("source", "")))


def _parse_jobs(rows: Any, where: str, class_names: set[str]) -> tuple[Job, ...]:
    if not isinstance(rows, list) or not rows:
        raise SpecError(f"{where}: jobs must be a non-empty list of "
                        "{class: NAME, arrival_s: T, deadline_s: T, weight_usd_per_h: W}")
    jobs = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or "class" not in row:
            raise SpecError(f"{where}: job {i} needs a 'class'")
        cls = str(row["class"])
        if cls not in class_names:
            raise UnknownNameError(f"job class (job {i})", cls, class_names)
        arrival = row.get("arrival_s", 0.0)
        if not _is_number(arrival) or arrival < 0:
            raise ConfigError(f"{where}: job {i}: arrival_s must be a time >= 0 s, got {arrival!r}")
        if "deadline_s" not in row:
            raise SpecError(f"{where}: job {i}: missing deadline_s (seconds from the start)")
        deadline = row["deadline_s"]
        if not _is_number(deadline) or deadline < 0:
            raise ConfigError(f"{where}: job {i}: deadline_s must be a time >= 0 s, got {deadline!r}")
        if deadline <= arrival:
            raise ConfigError(f"{where}: job {i}: deadline_s {deadline} is not after its arrival "
                              f"{arrival} (a deadline in the past); give a deadline > arrival_s")
        w = row.get("weight_usd_per_h", 1.0)
        if not _is_number(w) or w < 0:
            raise ConfigError(f"{where}: job {i}: weight_usd_per_h must be >= 0, got {w!r}")
        jobs.append(Job(id=int(row.get("id", i)), job_class=cls, arrival_s=float(arrival),
                        deadline_s=float(deadline), weight_usd_per_h=float(w)))
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
