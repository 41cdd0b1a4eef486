"""How the MILP's solve time grows with waiting jobs and nodes.

For each (nodes, jobs) pair, snapshots of the ardagna2019 scenario (forecast
durations) are built: ``jobs`` jobs waiting at once, a third of the nodes
already running a VM with some GPUs free. One MILP per snapshot is solved
(time limit --time-limit s); several snapshots (different seeds) give the
spread. Prints median and IQR of solve time, variables, constraints, status
counts and the worst gap. A last table times whole simulations with the MILP
policy (jobs = 10 x nodes).

    PYTHONPATH=src .venv/bin/python benchmarks/milp_scaling.py [--repeats 5] [--time-limit 10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from traincast.plan.milp import MilpPolicy
from traincast.plan.policies import ClusterState, NodeState
from traincast.plan.scenario import Job, generate_jobs, load_scenario
from traincast.plan.simulate import build_table, simulate


def snapshot(sc, table, n_jobs: int, rng: np.random.Generator) -> ClusterState:
    classes = [c.name for c in sc.job_classes]
    jobs = []
    for i in range(n_jobs):
        cls = classes[rng.integers(len(classes))]
        dl = rng.uniform(1.5, 4.0) * table.reference_s(cls)
        jobs.append(Job(i, cls, 0.0, dl, float(rng.uniform(0.5, 5.0))))
    nodes = []
    cloud = [v for v in sc.vm_types if v.max_count is None and v.gpus > 1]
    for i in range(sc.nodes):
        if i < sc.nodes // 3:
            vm = cloud[rng.integers(len(cloud))]
            used = int(rng.integers(1, vm.gpus))
            nodes.append(NodeState(i, vm, vm.gpus - used, float(rng.uniform(600, 7200)), 0.0))
        else:
            nodes.append(NodeState(i))
    return ClusterState(0.0, jobs, nodes, table)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--nodes", default="5,10,20,50")
    ap.add_argument("--jobs", default="5,10,20,40")
    ap.add_argument("--sim-nodes", default="5,10,20")
    args = ap.parse_args()
    base = load_scenario("ardagna2019")
    print(f"single MILP solve, time limit {args.time_limit:g} s, {args.repeats} snapshots per cell")
    print(f"{'nodes':>5s} {'jobs':>5s} {'vars':>6s} {'rows':>6s} {'median s':>9s} {'IQR s':>17s} "
          f"{'optimal':>7s} {'limit':>5s} {'worst gap':>9s}")
    for n in [int(x) for x in args.nodes.split(",")]:
        sc = base.with_overrides(nodes=n)
        table, _, _ = build_table(sc)
        for j in [int(x) for x in args.jobs.split(",")]:
            times, nv, nr, opt, lim, gaps = [], [], [], 0, 0, []
            for r in range(args.repeats):
                st = snapshot(sc, table, j, np.random.default_rng(1000 * n + 10 * j + r))
                pol = MilpPolicy(time_limit_s=args.time_limit, max_jobs=j, options_per_job=8)
                t0 = time.perf_counter()
                pol.solve(st)
                times.append(time.perf_counter() - t0)
                rec = pol.solves[-1]
                nv.append(rec.variables)
                nr.append(rec.constraints)
                opt += rec.status == "optimal"
                lim += rec.status == "time_limit"
                if rec.gap == rec.gap:
                    gaps.append(rec.gap)
            q1, med, q3 = np.percentile(times, [25, 50, 75])
            print(f"{n:5d} {j:5d} {int(np.median(nv)):6d} {int(np.median(nr)):6d} {med:9.3f} "
                  f"[{q1:7.3f}, {q3:7.3f}] {opt:7d} {lim:5d} {max(gaps) if gaps else float('nan'):9.2%}")
    print("\nwhole simulation with the milp policy (jobs = 10 x nodes, Poisson mean 30 s, time limit 2 s)")
    print(f"{'nodes':>5s} {'jobs':>5s} {'solves':>6s} {'solve s total':>13s} {'max solve s':>11s} "
          f"{'limit hits':>10s} {'wall s':>7s}")
    for n in [int(x) for x in args.sim_nodes.split(",")]:
        sc = base.with_overrides(nodes=n)
        table, _, _ = build_table(sc)
        jobs = generate_jobs(sc, table.reference_s, np.random.default_rng(n))
        res = simulate(sc, jobs, MilpPolicy(time_limit_s=2.0, period_s=sc.rescheduling_period_s), table)
        st = dict(res.solver)
        print(f"{n:5d} {len(jobs):5d} {int(st['solves']):6d} {st['solve_s_total']:13.2f} "
              f"{st['solve_s_max']:11.3f} {int(st['time_limit_hits']):10d} {res.wall_s:7.2f}")


if __name__ == "__main__":
    main()
