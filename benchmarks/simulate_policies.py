"""Policy comparison on the ardagna2019 scenario, and the simulator's scale.

Prints, per policy, mean ± sd over replications (same job lists for every
policy) of VM cost, weighted-tardiness cost, total tardiness, deadline misses;
how much the MILP policy lowers cost + tardiness against each rule (paired per
replication); and the wall-clock time of 1,000 jobs on 50 nodes with the
heuristic policies (median and IQR of repeats; goal < 60 s).

    PYTHONPATH=src .venv/bin/python benchmarks/simulate_policies.py [--replications 5] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from traincast.plan.policies import make_policy
from traincast.plan.scenario import generate_jobs, load_scenario
from traincast.plan.simulate import build_table, compare, simulate

RULES = ["fifo", "edf", "priority", "fifo-pack", "edf-pack", "priority-pack"]


def comparison(sc, replications: int, seed: int, time_limit_s: float) -> None:
    t0 = time.perf_counter()
    res = compare(sc, RULES + ["milp"], replications=replications, seed=seed,
                  milp_options={"time_limit_s": time_limit_s, "period_s": sc.rescheduling_period_s})
    print(f"\n== {sc.name}: {sc.nodes} nodes, {sc.n_jobs} jobs, Poisson mean {sc.mean_interarrival_s:g} s, "
          f"{replications} replications, seed {seed} ({time.perf_counter() - t0:.0f} s)")
    print("durations:", dict(res.duration_origins))
    hdr = f"{'policy':14s} {'VM cost $':>14s} {'tardiness $':>14s} {'total $':>14s} {'tardiness h':>14s} {'misses':>12s} {'util.':>11s}"
    print(hdr)
    for s in res.summaries:
        g = s.get
        print(f"{s.policy:14s} "
              f"{g('cost_usd').mean:7.2f} ± {g('cost_usd').sd:5.2f} "
              f"{g('tardiness_cost_usd').mean:7.2f} ± {g('tardiness_cost_usd').sd:5.2f} "
              f"{g('objective_usd').mean:7.2f} ± {g('objective_usd').sd:5.2f} "
              f"{g('total_tardiness_s').mean / 3600:7.2f} ± {g('total_tardiness_s').sd / 3600:5.2f} "
              f"{g('deadline_misses').mean:5.1f} ± {g('deadline_misses').sd:4.1f} "
              f"{g('utilisation').mean:5.2f} ± {g('utilisation').sd:4.2f}")
    m = res.summary("milp")
    print(f"milp solver: {m.get('solver.solves').mean:.0f} solves/run, mean "
          f"{m.get('solver.solve_s_mean').mean * 1e3:.0f} ms, max {m.get('solver.solve_s_max').mean * 1e3:.0f} ms, "
          f"worst gap {m.get('solver.gap_max').mean:.2%}, time-limit hits "
          f"{m.get('solver.time_limit_hits').mean:.1f}/run, fallbacks {m.get('solver.fallbacks').mean:.1f}/run")
    for base in RULES:
        for metric in ("objective_usd", "cost_usd"):
            imp = res.improvement("milp", base, metric)
            print(f"milp vs {base:14s} {metric:14s} reduction {imp.mean:+7.1%} ± {imp.sd:5.1%}")


def scale(repeats: int) -> None:
    sc = load_scenario("ardagna2019").with_overrides(nodes=50, n_jobs=1000)
    table, origins, _ = build_table(sc)
    jobs = generate_jobs(sc, table.reference_s, np.random.default_rng(0))
    print(f"\n== scale: {len(jobs)} jobs on {sc.nodes} nodes (goal < 60 s per run), {repeats} repeats")
    for pol in ["fifo", "edf", "priority", "edf-pack"]:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = simulate(sc, jobs, make_policy(pol), table)
            times.append(time.perf_counter() - t0)
        q1, med, q3 = np.percentile(times, [25, 50, 75])
        print(f"{pol:10s} median {med:6.3f} s  IQR [{q1:.3f}, {q3:.3f}]  events {r.events}  "
              f"misses {r.deadline_misses}  cost ${r.cost_usd:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replications", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true", help="one arrival rate, 3 scale repeats")
    args = ap.parse_args()
    base = load_scenario("ardagna2019")
    for ia in ([30.0] if args.quick else [30.0, 45.0]):
        comparison(base.with_overrides(mean_interarrival_s=ia), args.replications, args.seed,
                   args.time_limit)
    scale(3 if args.quick else 5)


if __name__ == "__main__":
    main()
