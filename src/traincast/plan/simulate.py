"""Event-based simulator of a cluster of on-demand GPU VMs running training jobs.

Events - a job arrives, a job completes, a policy's re-planning period elapses -
sit in a heap; all events at one instant are applied, then the policy decides
which waiting jobs start, where and on how many GPUs. A node slot is paid
(its VM type's $/hour, per second) from the moment a job starts on it while
off, until its last job ends; then it is switched off. Durations come from an
``OptionTable`` computed once per scenario (traincast forecasts by default).

``simulate`` runs one policy on one job list; ``compare`` runs several
policies on the same generated job lists (common random numbers) over
replications and summarises mean +- sd of every metric.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from traincast.errors import ConfigError, TraincastError
from traincast.plan.durations import DurationProvider, OptionTable, ScenarioDurations
from traincast.plan.policies import ClusterState, NodeState, Placement, Policy, greedy_place, make_policy
from traincast.plan.scenario import Job, Scenario, generate_jobs

_ARRIVAL, _COMPLETION, _TICK = 1, 0, 2  # completions first at equal times: GPUs free before arrivals


@dataclass(frozen=True)
class JobRecord:
    """How one job ran."""

    job_id: int
    job_class: str
    arrival_s: float
    start_s: float
    end_s: float
    deadline_s: float
    weight_usd_per_h: float
    node: int
    vm: str
    gpus: int

    @property
    def tardiness_s(self) -> float:
        return max(0.0, self.end_s - self.deadline_s)


@dataclass(frozen=True)
class RunResult:
    """Metrics of one policy on one replication."""

    policy: str
    replication: int
    n_jobs: int
    cost_usd: float                 # VM cost
    tardiness_cost_usd: float       # sum of weight x tardiness
    objective_usd: float            # cost + tardiness cost (what the MILP minimises)
    total_tardiness_s: float
    max_tardiness_s: float
    deadline_misses: int
    utilisation: float              # busy GPU-seconds / paid GPU-seconds
    makespan_s: float               # last completion - first arrival
    mean_wait_s: float
    wall_s: float                   # simulation wall-clock time
    events: int
    solver: tuple[tuple[str, float], ...] = ()  # policy statistics (MILP: solves, gaps...)
    jobs: tuple[JobRecord, ...] = field(default=(), repr=False, compare=False)

    def solver_stat(self, name: str, default: float = float("nan")) -> float:
        return dict(self.solver).get(name, default)


METRICS = ("cost_usd", "tardiness_cost_usd", "objective_usd", "total_tardiness_s",
           "max_tardiness_s", "deadline_misses", "utilisation", "makespan_s", "mean_wait_s", "wall_s")


def simulate(scenario: Scenario, jobs: Sequence[Job], policy: Policy, table: OptionTable, *,
             replication: int = 0, max_wall_s: float | None = None) -> RunResult:
    """Run ``policy`` on ``jobs``; return the metrics. Never loops forever: every
    event either starts, ends or re-plans jobs, events are capped, and a policy
    that leaves an idle cluster with waiting jobs is overridden by a greedy pass."""
    t0 = time.perf_counter()
    if not jobs:
        raise ConfigError("no jobs to simulate; give n_jobs >= 1 or a jobs list")
    by_id = {j.id: j for j in jobs}
    nodes = [NodeState(i) for i in range(scenario.nodes)]
    heap: list[tuple[float, int, int, object]] = []
    seq = 0
    for j in jobs:
        heapq.heappush(heap, (j.arrival_s, _ARRIVAL, seq, j))
        seq += 1
    waiting: list[Job] = []
    running: dict[int, Job] = {}
    starts: dict[int, tuple[float, Placement]] = {}
    records: list[JobRecord] = []
    cost_usd = 0.0
    paid_gpu_s = 0.0
    busy_gpu_s = 0.0
    tick_at: float | None = None
    period = getattr(policy, "period_s", None)
    events = 0
    max_events = 50 * len(jobs) + 10_000
    forced = 0

    def release(node: NodeState, now: float) -> None:
        nonlocal cost_usd, paid_gpu_s
        span = now - node.active_since_s
        cost_usd += node.vm.usd_per_s * span
        paid_gpu_s += node.vm.gpus * span
        node.vm, node.free_gpus, node.busy_until_s = None, 0, now

    def apply(placements: list[Placement], now: float) -> None:
        nonlocal seq, busy_gpu_s
        started = set()
        for p in placements:
            job = by_id.get(p.job_id)
            if job is None or p.job_id in started or job not in waiting:
                raise RuntimeError(f"policy {policy.name} placed job {p.job_id}, which is not waiting")
            node = nodes[p.node]
            if node.vm is None:
                node.vm = scenario.vm(p.vm)
                node.free_gpus = node.vm.gpus
                node.active_since_s = now
                node.busy_until_s = now
            elif node.vm.name != p.vm:
                raise RuntimeError(f"policy {policy.name} put a {p.vm} job on a {node.vm.name} node")
            if p.gpus > node.free_gpus or p.gpus < 1:
                raise RuntimeError(f"policy {policy.name} over-filled node {p.node}")
            node.free_gpus -= p.gpus
            end = now + p.duration_s
            node.busy_until_s = max(node.busy_until_s, end)
            node.running[p.job_id] = (p.gpus, end)
            started.add(p.job_id)
            running[p.job_id] = job
            starts[p.job_id] = (now, p)
            busy_gpu_s += p.gpus * p.duration_s
            heapq.heappush(heap, (end, _COMPLETION, seq, (p.node, p.job_id)))
            seq += 1
        if started:
            waiting[:] = [j for j in waiting if j.id not in started]

    table_state = ClusterState(now_s=0.0, waiting=waiting, nodes=nodes, table=table, running_jobs=running)
    while heap:
        now = heap[0][0]
        while heap and heap[0][0] <= now:
            _, kind, _, payload = heapq.heappop(heap)
            events += 1
            if kind == _ARRIVAL:
                waiting.append(payload)  # type: ignore[arg-type]
            elif kind == _COMPLETION:
                idx, jid = payload  # type: ignore[misc]
                node = nodes[idx]
                gpus, _ = node.running.pop(jid)
                node.free_gpus += gpus
                job = running.pop(jid)
                start, p = starts.pop(jid)
                records.append(JobRecord(jid, job.job_class, job.arrival_s, start, now,
                                         job.deadline_s, job.weight_usd_per_h, idx, p.vm, p.gpus))
                if not node.running:
                    release(node, now)
            else:
                if tick_at is not None and payload == tick_at:
                    tick_at = None
        if events > max_events:
            raise TraincastError(f"simulation stopped after {events} events with {len(waiting)} jobs "
                                 f"waiting (policy {policy.name}); this is a bug, please report it")
        if max_wall_s is not None and time.perf_counter() - t0 > max_wall_s:
            raise TraincastError(f"simulation of policy {policy.name} ran past {max_wall_s:.0f} s "
                                 "of wall-clock; use fewer jobs or a heuristic policy")
        if not waiting:
            continue
        table_state.now_s = now
        placements = policy.decide(table_state)
        apply(placements, now)
        if waiting and not running and not any(k != _TICK for _, k, _, _ in heap):
            # nothing will ever free capacity or bring news: never wait forever
            forced += 1
            apply(greedy_place(table_state, sorted(waiting, key=lambda j: j.deadline_s),
                               pack=True, strict=False), now)
            if waiting and not running:
                raise ConfigError(f"{len(waiting)} jobs can never start on {scenario.nodes} nodes "
                                  "(no VM type allowed by max_count fits them)")
        if waiting and period and tick_at is None:
            tick_at = now + period
            heapq.heappush(heap, (tick_at, _TICK, seq, tick_at))
            seq += 1

    assert not waiting and not running
    records.sort(key=lambda r: r.job_id)
    tard = np.array([r.tardiness_s for r in records])
    tcost = float(sum(r.tardiness_s / 3600.0 * r.weight_usd_per_h for r in records))
    first = min(j.arrival_s for j in jobs)
    stats = dict(getattr(policy, "stats", lambda: {})())
    if forced:
        stats["forced_greedy"] = forced
    return RunResult(
        policy=policy.name, replication=replication, n_jobs=len(records), cost_usd=cost_usd,
        tardiness_cost_usd=tcost, objective_usd=cost_usd + tcost,
        total_tardiness_s=float(tard.sum()), max_tardiness_s=float(tard.max()),
        deadline_misses=int((tard > 1e-6).sum()),
        utilisation=busy_gpu_s / paid_gpu_s if paid_gpu_s > 0 else 0.0,
        makespan_s=max(r.end_s for r in records) - first,
        mean_wait_s=float(np.mean([r.start_s - r.arrival_s for r in records])),
        wall_s=time.perf_counter() - t0, events=events,
        solver=tuple(sorted((k, float(v)) for k, v in stats.items())), jobs=tuple(records),
    )


# ---------------------------------------------------------------- comparison

@dataclass(frozen=True)
class MetricSummary:
    name: str
    mean: float
    sd: float  # sample standard deviation over replications (0 with one)


@dataclass(frozen=True)
class PolicySummary:
    policy: str
    replications: int
    metrics: tuple[MetricSummary, ...]

    def get(self, name: str) -> MetricSummary:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)


@dataclass(frozen=True)
class Comparison:
    scenario: str
    nodes: int
    n_jobs: int
    mean_interarrival_s: float
    replications: int
    seed: int
    runs: tuple[RunResult, ...]
    summaries: tuple[PolicySummary, ...]
    duration_origins: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = ()

    def summary(self, policy: str) -> PolicySummary:
        for s in self.summaries:
            if s.policy == policy:
                return s
        raise KeyError(policy)

    def improvement(self, policy: str, baseline: str, metric: str = "objective_usd") -> MetricSummary:
        """Relative reduction of ``metric`` by ``policy`` against ``baseline``,
        paired per replication: mean +- sd of 1 - policy / baseline."""
        a = {r.replication: getattr(r, metric) for r in self.runs if r.policy == policy}
        b = {r.replication: getattr(r, metric) for r in self.runs if r.policy == baseline}
        vals = [1.0 - a[k] / b[k] for k in a if k in b and b[k] > 0]
        if not vals:
            return MetricSummary(f"{metric} reduction vs {baseline}", float("nan"), float("nan"))
        return MetricSummary(f"{metric} reduction vs {baseline}", float(np.mean(vals)),
                             float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0)


def _summarise(policy: str, runs: Sequence[RunResult]) -> PolicySummary:
    ms = []
    names = list(METRICS)
    extra = sorted({k for r in runs for k, _ in r.solver})
    for name in names + [f"solver.{k}" for k in extra]:
        if name.startswith("solver."):
            vals = [r.solver_stat(name[7:]) for r in runs]
        else:
            vals = [float(getattr(r, name)) for r in runs]
        vals = [v for v in vals if not math.isnan(v)]
        if not vals:
            continue
        ms.append(MetricSummary(name, float(np.mean(vals)),
                                float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0))
    return PolicySummary(policy, len(runs), tuple(ms))


def build_table(scenario: Scenario, provider: DurationProvider | None = None
                ) -> tuple[OptionTable, tuple[tuple[str, int], ...], tuple[str, ...]]:
    """The scenario's option table, where its durations came from, and notes."""
    prov = provider if provider is not None else ScenarioDurations(scenario)
    table = OptionTable(scenario, prov)
    origins = tuple(sorted(getattr(prov, "origins", {}).items()))
    notes = list(scenario.notes)
    err = getattr(prov, "forecast_error", None)
    if err:
        notes.append(f"forecasts unavailable ({err}); durations estimated from the scenario's "
                     "estimate data")
    return table, origins, tuple(notes)


def compare(scenario: Scenario, policies: Sequence[str], *, replications: int = 5, seed: int = 0,
            provider: DurationProvider | None = None, milp_options: dict | None = None,
            progress: Callable[[str, int, RunResult], None] | None = None) -> Comparison:
    """Every policy on the same ``replications`` job lists drawn from ``seed``."""
    if replications < 1:
        raise ConfigError(f"replications must be >= 1, got {replications}")
    if not policies:
        raise ConfigError("give at least one policy")
    pols = [p.strip().lower() for p in policies]
    for p in pols:
        make_policy(p)  # validate names before any work
    table, origins, notes = build_table(scenario, provider)
    streams = np.random.SeedSequence(seed).spawn(replications)
    runs = []
    for r, ss in enumerate(streams):
        jobs = generate_jobs(scenario, table.reference_s, np.random.default_rng(ss))
        for p in pols:
            pol = make_policy(p, **(milp_options or {})) if p == "milp" else make_policy(p)
            res = simulate(scenario, jobs, pol, table, replication=r)
            runs.append(res)
            if progress:
                progress(p, r, res)
    summaries = tuple(_summarise(p, [x for x in runs if x.policy == p]) for p in pols)
    return Comparison(scenario.name, scenario.nodes, len(runs[0].jobs), scenario.mean_interarrival_s,
                      replications, seed, tuple(runs), summaries, origins, notes)
