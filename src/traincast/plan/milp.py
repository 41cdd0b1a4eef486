"""The optimising policy: a MILP re-planned at every event, solved by HiGHS.

After Jahani, Lattuada, Ciavotta, Ardagna, Amaldi, Zhang (ICCCS 2019): at each
arrival, completion, and every H seconds while jobs wait, decide jointly which
waiting jobs start now, the VM type of every node switched on, how the GPUs of
each VM are partitioned among jobs, and which jobs wait - minimising VM cost
plus weighted tardiness. Jobs already running are not moved (no pre-emption).

Variables, for the (at most ``max_jobs``) most urgent waiting jobs ``j``:

- ``x[j, n, o]`` in {0, 1}: job j starts now on active node n with option o
  (o fixes the GPU count and the duration ``d_o`` on n's VM type);
- ``y[v, k]`` in {0, 1}: the k-th new VM of type v is switched on, and
  ``x[j, (v, k), o]`` puts job j on it;
- ``c_n >= 0``: the extra VM cost node n incurs (how long it stays up);
- ``p_j`` in [0, 1]: job j waits.

Minimise  sum x * w_j * max(0, now + d_o - D_j) + sum c_n + sum p_j * pi_j
subject to  sum_n,o x[j,n,o] + p_j = 1                  (start once or wait)
            sum_j,o g_o x[j,n,o] <= free_n              (GPUs of an active node)
            sum_j,o g_o x[j,(v,k),o] <= G_v y[v,k]      (GPUs of a new VM)
            sum_v,k y[v,k] <= empty nodes; per-type caps; y[v,k] >= y[v,k+1]
            c_n >= price_n * (now + d_o - busy_until_n) * x[j,n,o]   (active)
            c_(v,k) >= price_v * d_o * x[j,(v,k),o]                  (new)

``pi_j`` prices waiting: the job's cheapest-to-run option started H seconds
later, so a job waits only when starting it now costs more than that. Every
solve has a time limit; the incumbent is used with its gap reported, and when
HiGHS has none the greedy EDF packer decides instead.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from traincast.errors import ConfigError
from traincast.plan.durations import Option
from traincast.plan.policies import ClusterState, NodeState, Placement, greedy_place
from traincast.plan.scenario import Job


@dataclass(frozen=True)
class SolveRecord:
    """One MILP solve."""

    now_s: float
    jobs: int
    variables: int
    constraints: int
    solve_s: float
    status: str        # optimal, time_limit, infeasible, error
    gap: float         # relative MIP gap of the solution used (nan without one)
    objective_usd: float
    fallback: bool     # the greedy decided instead


class MilpPolicy:
    """Re-plan by MILP at every event and every ``period_s`` seconds."""

    name = "milp"

    def __init__(self, *, time_limit_s: float = 2.0, period_s: float = 600.0, max_jobs: int = 12,
                 options_per_job: int = 8, mip_rel_gap: float = 1e-3, max_rounds: int = 4):
        if not time_limit_s > 0:
            raise ConfigError(f"MILP time limit must be > 0 s, got {time_limit_s!r}")
        if not period_s > 0:
            raise ConfigError(f"re-planning period must be > 0 s, got {period_s!r}")
        if max_jobs < 1 or options_per_job < 1:
            raise ConfigError("max_jobs and options_per_job must be >= 1")
        self.time_limit_s = float(time_limit_s)
        self.period_s = float(period_s)
        self.max_jobs = int(max_jobs)
        self.options_per_job = int(options_per_job)
        self.mip_rel_gap = float(mip_rel_gap)
        self.max_rounds = int(max_rounds)
        self.solves: list[SolveRecord] = []

    # ------------------------------------------------------------ policy API
    def decide(self, state: ClusterState) -> list[Placement]:
        nodes = [NodeState(n.index, n.vm, n.free_gpus, n.busy_until_s, n.active_since_s)
                 for n in state.nodes]
        remaining = list(state.waiting)
        out: list[Placement] = []
        for _ in range(self.max_rounds):
            batch = self.select(remaining, state)
            if not batch:
                break
            sub = ClusterState(state.now_s, batch, nodes, state.table)
            placed = self.solve(sub)
            out.extend(placed)
            _apply(nodes, placed, state)
            if len(placed) < len(batch):
                break  # capacity is exhausted for this event
            started = {p.job_id for p in placed}
            remaining = [j for j in remaining if j.id not in started]
        return out

    def select(self, waiting: list[Job], state: ClusterState) -> list[Job]:
        """The jobs one MILP sees: half the most urgent (deadline), half the
        costliest to delay (tardiness weight), up to ``max_jobs``."""
        if len(waiting) <= self.max_jobs:
            return list(waiting)
        by_deadline = sorted(waiting, key=lambda j: (j.deadline_s, j.id))
        by_weight = sorted(waiting, key=lambda j: (-j.weight_usd_per_h, j.deadline_s, j.id))
        chosen: dict[int, Job] = {}
        for a, b in zip(by_deadline, by_weight):
            for j in (a, b):
                if len(chosen) < self.max_jobs:
                    chosen.setdefault(j.id, j)
            if len(chosen) >= self.max_jobs:
                break
        return list(chosen.values())

    def stats(self) -> dict[str, float]:
        s = self.solves
        if not s:
            return {"solves": 0}
        gaps = [r.gap for r in s if r.gap == r.gap]
        times = [r.solve_s for r in s]
        return {
            "solves": len(s),
            "solve_s_mean": float(np.mean(times)),
            "solve_s_max": float(np.max(times)),
            "solve_s_total": float(np.sum(times)),
            "gap_max": float(max(gaps)) if gaps else float("nan"),
            "gap_mean": float(np.mean(gaps)) if gaps else float("nan"),
            "time_limit_hits": sum(r.status == "time_limit" for r in s),
            "fallbacks": sum(r.fallback for r in s),
            "variables_max": max(r.variables for r in s),
        }

    # ------------------------------------------------------------ the model
    def solve(self, state: ClusterState) -> list[Placement]:
        """Build and solve the MILP for ``state.waiting``; return the starts."""
        model = build_model(state, options_per_job=self.options_per_job, period_s=self.period_s)
        if model is None:  # nowhere to put anything
            return []
        t0 = time.perf_counter()
        try:
            with _quiet_stdout():  # HiGHS may print from C++ despite disp=False
                res = milp(model.c, constraints=model.constraints, integrality=model.integrality,
                           bounds=model.bounds,
                           options={"time_limit": self.time_limit_s,
                                    "mip_rel_gap": self.mip_rel_gap, "disp": False})
            status = {0: "optimal", 1: "time_limit", 2: "infeasible"}.get(res.status, "error")
            x = res.x
            gap = float(getattr(res, "mip_gap", float("nan")) or 0.0) if x is not None else float("nan")
            obj = float(res.fun) if x is not None else float("nan")
        except Exception:  # a solver failure must not stop the simulation
            status, x, gap, obj = "error", None, float("nan"), float("nan")
        dt = time.perf_counter() - t0
        placements = model.decode(x, state) if x is not None else None
        fallback = placements is None
        if fallback:
            placements = greedy_place(state, state.waiting, pack=True, strict=False)
        self.solves.append(SolveRecord(state.now_s, len(state.waiting), len(model.c),
                                       model.n_rows, dt, status, gap, obj, fallback))
        return placements


@dataclass
class _Model:
    c: np.ndarray
    constraints: list
    integrality: np.ndarray
    bounds: Bounds
    n_rows: int
    assign: list  # per x variable: (job, slot, option)
    slots: list   # per slot: ("node", index) or ("new", vm_name, k)
    n_x: int
    y_index: dict

    def decode(self, x: np.ndarray, state: ClusterState) -> list[Placement] | None:
        empty = [n.index for n in state.nodes if n.vm is None]
        new_nodes: dict[tuple[str, int], int] = {}
        free = {n.index: n.free_gpus for n in state.nodes if n.vm is not None}
        out = []
        seen = set()
        for i in range(self.n_x):
            if x[i] <= 0.5:
                continue
            job, slot, opt = self.assign[i]
            if job.id in seen:
                return None
            seen.add(job.id)
            kind = self.slots[slot]
            if kind[0] == "node":
                idx = kind[1]
            else:
                key = (kind[1], kind[2])
                if key not in new_nodes:
                    if not empty:
                        return None
                    new_nodes[key] = empty.pop(0)
                    free[new_nodes[key]] = opt.vm.gpus
                idx = new_nodes[key]
            free[idx] -= opt.gpus
            if free[idx] < 0:
                return None
            out.append(Placement(job.id, idx, opt.vm.name, opt.gpus, opt.duration_s))
        return out


def build_model(state: ClusterState, *, options_per_job: int = 8, period_s: float = 600.0) -> _Model | None:
    now = state.now_s
    jobs = list(state.waiting)
    active = [n for n in state.nodes if n.vm is not None and n.free_gpus > 0]
    n_empty = sum(1 for n in state.nodes if n.vm is None)
    counts: dict[str, int] = {}
    for n in state.nodes:
        if n.vm is not None:
            counts[n.vm.name] = counts.get(n.vm.name, 0) + 1

    def tard_usd(job: Job, opt: Option, delay_s: float = 0.0) -> float:
        return job.weight_usd_per_h / 3600.0 * max(0.0, now + delay_s + opt.duration_s - job.deadline_s)

    # slots: active nodes, then candidate new VMs (v, k)
    slots: list[tuple] = [("node", n.index) for n in active]
    slot_cap = [n.free_gpus for n in active]
    slot_price = [n.vm.usd_per_s for n in active]
    slot_busy = [n.busy_until_s for n in active]
    slot_vm = [n.vm.name for n in active]
    new_opts: dict[int, list[Option]] = {}
    per_type_jobs: dict[str, int] = {}
    vms = {}
    for job in jobs:
        opts = state.options(job)
        # keep the options best for this job on its own, pricing a GPU share of the VM
        ranked = sorted(opts, key=lambda o: (tard_usd(job, o) + o.vm.usd_per_s * o.duration_s * o.gpus / o.vm.gpus,
                                             o.duration_s))
        keep = ranked[:options_per_job]
        new_opts[job.id] = keep
        for v in {o.vm.name for o in keep}:
            per_type_jobs[v] = per_type_jobs.get(v, 0) + 1
        for o in keep:
            vms[o.vm.name] = o.vm
    y_index: dict[tuple[str, int], int] = {}
    if n_empty > 0:
        for vname, nj in sorted(per_type_jobs.items()):
            vm = vms[vname]
            cap = n_empty if vm.max_count is None else min(n_empty, vm.max_count - counts.get(vname, 0))
            for k in range(max(0, min(cap, nj))):
                y_index[(vname, k)] = len(slots)
                slots.append(("new", vname, k))
                slot_cap.append(vm.gpus)
                slot_price.append(vm.usd_per_s)
                slot_busy.append(now)
                slot_vm.append(vname)
    if not slots:
        return None

    assign: list[tuple[Job, int, Option]] = []
    cost: list[float] = []
    for job in jobs:
        all_opts = state.options(job)
        for s, kind in enumerate(slots):
            if kind[0] == "node":
                cands = [o for o in all_opts if o.vm.name == slot_vm[s] and o.gpus <= slot_cap[s]]
            else:
                cands = [o for o in new_opts[job.id] if o.vm.name == slot_vm[s]]
            for o in cands:
                assign.append((job, s, o))
                cost.append(tard_usd(job, o))
    n_x = len(assign)
    if n_x == 0:
        return None
    n_y = sum(1 for k in slots if k[0] == "new")
    n_s = len(slots)
    n_j = len(jobs)
    # variable layout: x (n_x) | y (n_y) | c (n_s) | p (n_j)
    y0, c0, p0 = n_x, n_x + n_y, n_x + n_y + n_s
    nv = p0 + n_j
    slot_y = {s: y0 + i for i, s in enumerate(s for s, k in enumerate(slots) if k[0] == "new")}
    obj = np.zeros(nv)
    obj[:n_x] = cost
    obj[c0:c0 + n_s] = 1.0
    job_pos = {j.id: i for i, j in enumerate(jobs)}
    free_by_type: dict[str, int] = {}
    for n in active:
        free_by_type[n.vm.name] = max(free_by_type.get(n.vm.name, 0), n.free_gpus)

    def available(o: Option) -> bool:
        if free_by_type.get(o.vm.name, 0) >= o.gpus:
            return True
        return n_empty > 0 and (o.vm.max_count is None or counts.get(o.vm.name, 0) < o.vm.max_count)

    for j in jobs:
        # waiting costs what the best option open now would cost if started H later
        opts = [o for o in state.options(j) if available(o)] or list(state.options(j))
        obj[p0 + job_pos[j.id]] = min(o.alone_cost_usd + tard_usd(j, o, period_s) for o in opts) + 1e-6

    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def row(entries, lb, ub):
        nonlocal r
        for col, val in entries:
            rows.append(r)
            cols.append(col)
            vals.append(val)
        lo.append(lb)
        hi.append(ub)
        r += 1

    by_job: dict[int, list[int]] = {}
    by_slot: dict[int, list[int]] = {}
    for i, (job, s, o) in enumerate(assign):
        by_job.setdefault(job.id, []).append(i)
        by_slot.setdefault(s, []).append(i)
    for j in jobs:  # start once or wait
        row([(i, 1.0) for i in by_job.get(j.id, [])] + [(p0 + job_pos[j.id], 1.0)], 1.0, 1.0)
    for s, idxs in by_slot.items():  # GPU capacity
        entries = [(i, float(assign[i][2].gpus)) for i in idxs]
        if slots[s][0] == "new":
            row(entries + [(slot_y[s], -float(slot_cap[s]))], -np.inf, 0.0)
        else:
            row(entries, -np.inf, float(slot_cap[s]))
        for i in idxs:  # cost of keeping the VM up: c_s >= price * extension * x
            ext = (now + assign[i][2].duration_s - slot_busy[s]) * slot_price[s]
            if ext > 0:
                row([(c0 + s, 1.0), (i, -ext)], 0.0, np.inf)
    if n_y:
        row([(y, 1.0) for y in slot_y.values()], -np.inf, float(n_empty))
        for (vname, k), s in y_index.items():
            if k > 0:
                row([(slot_y[y_index[(vname, k - 1)]], 1.0), (slot_y[s], -1.0)], 0.0, np.inf)
    A = coo_matrix((vals, (rows, cols)), shape=(r, nv)).tocsr()
    integrality = np.zeros(nv)
    integrality[: n_x + n_y] = 1
    lb = np.zeros(nv)
    ub = np.full(nv, np.inf)
    ub[: n_x + n_y] = 1.0
    ub[p0:] = 1.0
    return _Model(obj, [LinearConstraint(A, np.array(lo), np.array(hi))], integrality, Bounds(lb, ub),
                  r, assign, slots, n_x, y_index)


def _apply(nodes: list[NodeState], placed: list[Placement], state: ClusterState) -> None:
    """Reflect ``placed`` in the policy's private copy of the nodes."""
    table = state.table.scenario
    for p in placed:
        n = nodes[p.node]
        if n.vm is None:
            n.vm = table.vm(p.vm)
            n.free_gpus = n.vm.gpus
            n.busy_until_s = state.now_s
        n.free_gpus -= p.gpus
        n.busy_until_s = max(n.busy_until_s, state.now_s + p.duration_s)


@contextlib.contextmanager
def _quiet_stdout():
    """Send file descriptor 1 to /dev/null for the duration (C++ prints)."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
