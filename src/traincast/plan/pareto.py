"""One job: forecast every (instance type x count) configuration, mark the
infeasible ones, and find the Pareto front of expected wall clock (failures,
restarts and checkpoints counted: predict/goodput.py) against its cost.

After AI Gauge's Pareto set of configurations: the fastest, the cheapest, and
the cheapest that meets a deadline (and a budget).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from traincast.errors import ConfigError, positive
from traincast.hardware.catalog import Catalog, get_catalog


@dataclass(frozen=True)
class Config:
    """One forecast configuration and what became of it."""

    instance: str
    device: str
    instances: int
    gpus: int
    per_gpu_batch: int
    global_batch: int
    iteration_s: float
    total_s: float
    cost_usd: float | None
    usd_per_hour: float | None
    peak_memory_bytes: int
    fits_in_memory: bool
    meets_deadline: bool
    within_budget: bool
    pareto: bool = False
    reason: str = ""  # why infeasible
    predictor: str = ""  # the predictor that timed it
    layout: str = ""  # the parallel layout (tp/pp/dp, sharding, micro-batch, ...), "" for data parallelism
    bubble_share: float = 0.0
    # the expected wall clock with failures, restarts and checkpoints and its cost (predict/goodput.py); None: the
    # job never finishes (wall_s), or no price (wall_cost_usd). The deadline, the budget, the front and the picks
    # use these; total_s and cost_usd are the GPUs' training time and its cost, nothing lost
    wall_s: float | None = None
    wall_cost_usd: float | None = None
    goodput: float = 1.0
    mfu: float | None = None  # model FLOPs utilisation of the step (Forecast.mfu)

    @property
    def feasible(self) -> bool:
        return self.fits_in_memory and self.meets_deadline and self.within_budget

    @property
    def wall(self) -> float:
        """The expected wall clock, infinite where the job never finishes."""
        return self.wall_s if self.wall_s is not None else math.inf


@dataclass(frozen=True)
class PlanResult:
    model: str
    configs: tuple[Config, ...]
    deadline_s: float | None
    budget_usd: float | None

    def _best(self, key, pool) -> Config | None:
        pool = [c for c in pool if c.wall_cost_usd is not None]
        return min(pool, key=key) if pool else None

    @property
    def front(self) -> list[Config]:
        return sorted((c for c in self.configs if c.pareto), key=lambda c: c.wall)

    @property
    def fastest(self) -> Config | None:
        """Soonest done (expected wall clock) of those that fit."""
        return self._best(lambda c: (c.wall, c.wall_cost_usd), [c for c in self.configs if c.fits_in_memory])

    @property
    def cheapest(self) -> Config | None:
        return self._best(lambda c: (c.wall_cost_usd, c.wall), [c for c in self.configs if c.fits_in_memory])

    @property
    def cheapest_feasible(self) -> Config | None:
        """Cheapest that fits, meets the deadline and the budget."""
        return self._best(lambda c: (c.wall_cost_usd, c.wall), [c for c in self.configs if c.feasible])

    def records(self) -> list[dict]:
        return [asdict(c) | {"feasible": c.feasible} for c in self.configs]

    def to_dict(self) -> dict:
        pick = lambda c: None if c is None else asdict(c)  # noqa: E731
        return {
            "model": self.model, "deadline_s": self.deadline_s, "budget_usd": self.budget_usd,
            "configurations": self.records(), "pareto_front": [asdict(c) for c in self.front],
            "fastest": pick(self.fastest), "cheapest": pick(self.cheapest),
            "cheapest_feasible": pick(self.cheapest_feasible),
        }


def pareto_flags(points: list[tuple[float, float]]) -> list[bool]:
    """True for points no other point beats on both coordinates (lower is better)."""
    flags = []
    for i, (t, c) in enumerate(points):
        dominated = any(
            (t2 <= t and c2 <= c) and (t2 < t or c2 < c) for j, (t2, c2) in enumerate(points) if j != i
        )
        flags.append(not dominated)
    return flags


def plan(
    model,
    *,
    epochs: float = 1.0,
    dataset_size: int | None = None,
    steps: int | None = None,
    tokens: float | None = None,
    batch_size: int,
    per_gpu_batch: bool = False,
    gpus: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64),
    gpu_types: tuple[str, ...] | None = None,
    instances: tuple[str, ...] | None = None,
    deadline_s: float | None = None,
    budget_usd: float | None = None,
    precision: str = "fp32",
    optimizer: str = "sgd",
    seq_len: int | None = None,
    freeze: str | None = None,
    sync: str = "nccl",
    catalog: Catalog | None = None,
    predictor=None,
    adaptation: str | None = "none",
    layouts: str = "auto",
    kernels: str = "eager",
    memory_format: str = "contiguous",
    host_profile=None,
    sdpa: str = "auto",
    reliability=None,
) -> PlanResult:
    """Forecast every priced (instance type x instance count) whose GPU total is in ``gpus``.

    Each is judged by its expected wall clock with failures, restarts and checkpoints and that time's cost
    (:mod:`traincast.predict.goodput`; ``reliability``: a :class:`~traincast.predict.goodput.Reliability`, the
    defaults if None): the deadline, the budget, the Pareto front and the picks.

    ``host_profile``: a ``calibrate --host-only`` profile (name, file or :class:`DeviceProfile`): every GPU's
    kernels issued by that host (:class:`traincast.predict.host.WithHost`), for a fleet of one kind of machine.

    ``kernels``: ``eager``, ``compiled`` or ``transformer-engine`` (:mod:`traincast.workload.fusion`).
    ``memory_format``: ``contiguous`` or ``channels_last`` (convolutions NHWC: :mod:`traincast.workload.layout`).

    ``layouts``: ``data-parallel`` (replicas only), ``search`` (the fastest layout that fits of every
    configuration: tensor, pipeline and data degrees, ZeRO, micro-batch, recomputation; see
    :mod:`traincast.predict.parallel.search`), or ``auto`` (the default: search where replicas do not fit in
    memory or the model has a billion parameters or more, replicas elsewhere).

    ``predictor``: None (the default predictor, ``auto``), a predictor object used for every GPU, or a name of
    :data:`traincast.predict.PREDICTORS` resolved per GPU type (``auto``: learned on the GPUs the learned model
    was fitted on, analytical elsewhere). ``adaptation`` (learned only): ``none`` (or None, the default) none, ``auto``
    the adaptation ``traincast fit adapt`` saved for a GPU where there is one."""
    from traincast.predict import PREDICTORS, make_predictor
    from traincast.predict.compose import WorkloadFamily, forecast

    from traincast.predict.compose import default_dataset_size
    from traincast.predict.goodput import Reliability, with_wall_clock

    cat = catalog or get_catalog()
    positive("--epochs", epochs)
    if dataset_size is None and steps is None and tokens is None:
        dataset_size = default_dataset_size(model)
        if dataset_size is None:
            raise ConfigError("--dataset-size (training samples per epoch), --tokens or --steps is needed to plan a "
                              "whole run of this model")
    positive("--batch-size", batch_size)
    for g in gpus:
        positive("--gpus entries", g)
    if deadline_s is not None:
        positive("--deadline", deadline_s)
    if budget_usd is not None:
        positive("--budget", budget_usd)
    if instances and gpu_types:
        raise ConfigError("--instances and --gpu-types both choose the hardware; give one of them")
    if instances:
        insts = [cat.instance(n) for n in instances]
    else:
        devs = {cat.device(g).name for g in gpu_types} if gpu_types else None
        insts = [i for i in cat.instances.values()
                 if i.usd_per_hour is not None and i.device.kind == "gpu" and (devs is None or i.device.name in devs)]
    if not insts:
        raise ConfigError("no priced instance matches --gpu-types/--instances")
    from traincast.predict.roofline import check_precision

    if instances or gpu_types:  # hardware the user named must run the precision (FP8 needs FP8 tensor cores)
        for i in insts:
            check_precision(i.device, precision)
    else:  # every catalog instance: those that can run it
        able = []
        for i in insts:
            try:
                check_precision(i.device, precision)
                able.append(i)
            except ConfigError:
                pass
        if not able:
            raise ConfigError(f"no priced instance has the tensor cores --precision {precision} needs")
        insts = able
    if isinstance(predictor, str):
        predictor = PREDICTORS.canonical(predictor)
    if adaptation not in (None, "auto", "none"):
        raise ConfigError(f"--adaptation must be auto or none for a plan (one file cannot adapt every GPU), "
                          f"got {adaptation!r}")
    per_device: dict = {}
    if host_profile is not None:
        from traincast.predict.profile import DeviceProfile, find_profile

        prof = host_profile if isinstance(host_profile, DeviceProfile) else find_profile(str(host_profile))
        host_profile = prof.require_host_only()

    def predictor_for(dev):
        if dev.name not in per_device:
            p = make_predictor(predictor, dev, adaptation) if isinstance(predictor, str) else predictor
            if host_profile is not None:
                p = host_profile.host_predictor(p if p is not None else make_predictor("auto", dev, adaptation))
            per_device[dev.name] = p
        return per_device[dev.name]
    if layouts not in ("auto", "data-parallel", "search"):
        raise ConfigError(f"layouts must be auto, data-parallel or search, got {layouts!r}")
    family = WorkloadFamily(model, optimizer=optimizer, precision=precision, seq_len=seq_len, freeze=freeze,
                            kernels=kernels, memory_format=memory_format, sdpa=sdpa)
    rel = reliability or Reliability.defaults()
    models: dict = {}
    rows: list[Config] = []
    for inst in insts:
        for g in sorted(set(gpus)):
            if g % inst.gpus:
                continue
            if not per_gpu_batch and batch_size < g:
                continue
            kw = dict(instance=inst.name, gpus=g, epochs=epochs, dataset_size=dataset_size, steps=steps, tokens=tokens,
                      precision=precision,
                      optimizer=optimizer, seq_len=seq_len, freeze=freeze, sync=sync, catalog=cat, scaling=False,
                      family=family, exact_trace=False, predictor=predictor_for(inst.device))
            f = forecast(model, batch_size=batch_size, per_gpu_batch=per_gpu_batch, **kw)
            if layouts == "search" or (layouts == "auto" and (not f.fits_in_memory or f.parameters >= 1e9)):
                gb = batch_size * g if per_gpu_batch else batch_size
                cfg = _best_layout(models, family, cat, inst, g, gb, precision, predictor_for(inst.device))
                if cfg is not None:
                    f2 = forecast(model, batch_size=gb, strategy=cfg, **kw)
                    if f2.fits_in_memory and (not f.fits_in_memory or f2.iteration_s < f.iteration_s):
                        f = f2
            wc = with_wall_clock(f, rel).wall_clock
            wall_s = wc["wall_s"] if wc else f.total_s
            wall_cost = wc["cost_usd"] if wc else f.cost_usd
            meets = deadline_s is None or (wall_s is not None and wall_s <= deadline_s)
            within = budget_usd is None or (wall_cost is not None and wall_cost <= budget_usd)
            why = [w for w, bad in (("out of memory", not f.fits_in_memory), ("misses the deadline", not meets),
                                    ("over budget", not within)) if bad]
            rows.append(Config(inst.name, inst.device.name, g // inst.gpus, g, f.per_gpu_batch, f.global_batch,
                               f.iteration_s, f.total_s, f.cost_usd, f.usd_per_hour, f.peak_memory_bytes,
                               f.fits_in_memory, meets, within, reason=", ".join(why), predictor=f.predictor,
                               layout=f.strategy["label"] if f.strategy else "", bubble_share=f.bubble_share,
                               wall_s=wall_s, wall_cost_usd=wall_cost, goodput=wc["goodput"] if wc else 1.0,
                               mfu=f.mfu))
    if not rows:
        raise ConfigError(f"no configuration: the global batch {batch_size} is smaller than every GPU count asked for")
    cand = [i for i, c in enumerate(rows) if c.fits_in_memory and c.wall_cost_usd is not None]
    flags = pareto_flags([(rows[i].wall, rows[i].wall_cost_usd) for i in cand])
    front = {i for i, f in zip(cand, flags) if f}
    rows = [Config(**{**asdict(c), "pareto": i in front}) for i, c in enumerate(rows)]
    name = model if isinstance(model, str) else type(model).__name__
    return PlanResult(name, tuple(rows), deadline_s, budget_usd)


def _best_layout(models: dict, family, cat: Catalog, inst, gpus: int, global_batch: int, precision: str, predictor):
    """The fastest layout that fits of ``gpus`` GPUs of ``inst`` (a trimmed search: 1F1B and interleaved:2,
    replicas / ZeRO-1 / ZeRO-3, no or full recomputation, sequence parallelism with tensor parallelism), or None."""
    from traincast.predict.compose import cluster_of
    from traincast.predict.parallel import ParallelModel
    from traincast.predict.parallel.search import search
    from traincast.predict.registry import default_predictor

    device, cluster, _ = cluster_of(cat, instance=inst.name, gpus=gpus)
    key = (device.name, id(predictor))
    if key not in models:
        models[key] = ParallelModel(family, device, cluster, predictor or default_predictor(), precision)
    pm = models[key].with_cluster(cluster)
    try:
        res = search(pm, gpus, global_batch, top=1, shardings=("none", "zero1", "zero3"), recomputes=("none", "full"),
                     virtual=(2,), micro_batches=(1, 2, 4, 8), sequence_parallel=(True,))
    except ConfigError:
        return None
    return res.best.config if res.best is not None else None


def plot(result: PlanResult, path: str) -> str:
    """All configurations on log-log axes of expected wall clock and its cost, the front highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    ok = [c for c in result.configs if c.fits_in_memory and c.wall_cost_usd is not None]
    oom = [c for c in result.configs if not c.fits_in_memory and c.wall_cost_usd is not None]
    devs = sorted({c.device for c in ok})
    cmap = plt.get_cmap("tab20")
    for k, d in enumerate(devs):
        pts = [c for c in ok if c.device == d]
        ax.scatter([c.wall / 3600 for c in pts], [c.wall_cost_usd for c in pts], s=22, color=cmap(k % 20),
                   label=d, alpha=0.8)
    if oom:
        ax.scatter([c.wall / 3600 for c in oom], [c.wall_cost_usd for c in oom], marker="x", color="grey",
                   label="out of memory")
    front = result.front
    ax.plot([c.wall / 3600 for c in front], [c.wall_cost_usd for c in front], "k-", lw=1.5, label="Pareto front")
    for c in front:
        ax.annotate(f"{c.gpus}x {c.instance}", (c.wall / 3600, c.wall_cost_usd), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    if result.deadline_s:
        ax.axvline(result.deadline_s / 3600, color="red", ls="--", lw=1, label="deadline")
    if result.budget_usd:
        ax.axhline(result.budget_usd, color="orange", ls="--", lw=1, label="budget")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("expected wall clock with failures (hours)")
    ax.set_ylabel("cost (USD)")
    ax.set_title(f"{result.model}: time vs cost of every configuration")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def parse_deadline_s(text: str, now=None) -> float:
    """A deadline as seconds from ``now`` (default: this moment, local time): a duration (``36h``, ``2d``,
    :func:`parse_duration_s`), a date and time (``2026-12-04T17:00``, ``2026-12-04 17:00``, with or without a UTC
    offset), a date (the end of that day) or a weekday (``friday``: the end of the coming Friday, today's if it is
    Friday). One clear error for anything else or a moment already past."""
    import datetime as dt

    t = str(text).strip()
    try:
        return parse_duration_s(t)
    except ConfigError:
        pass
    now = now or dt.datetime.now().astimezone()
    low = t.lower()
    if low in _WEEKDAYS or low in {d[:3] for d in _WEEKDAYS}:  # a weekday's name or its first three letters
        k = [d[:3] for d in _WEEKDAYS].index(low[:3])
        day = now.date() + dt.timedelta(days=(k - now.weekday()) % 7)
        at = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=now.tzinfo)
    else:
        try:
            at = dt.datetime.fromisoformat(t)
        except ValueError:
            raise ConfigError(f"cannot read deadline {text!r}; write a duration (36h, 2d, 1h30m), a date and time "
                              "(2026-12-04T17:00), a date (2026-12-04: the end of that day) or a weekday (friday)") from None
        if len(t) == 10:  # a date alone: the end of that day
            at += dt.timedelta(days=1)
        if at.tzinfo is None:
            at = at.replace(tzinfo=now.tzinfo)
    left = (at - now).total_seconds()
    if left <= 0:
        raise ConfigError(f"deadline {text!r} is already past ({at.isoformat(timespec='minutes')})")
    return left


def parse_duration_s(text: str) -> float:
    """'36h', '90m', '2d', '3600', '1h30m' -> seconds."""
    import re

    t = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([dhms])", t)
    if not parts or "".join(n + u for n, u in parts) != re.sub(r"\s+", "", t):
        raise ConfigError(f"cannot read duration {text!r}; write e.g. 36h, 90m, 2d or 1h30m")
    mult = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return sum(float(n) * mult[u] for n, u in parts)

