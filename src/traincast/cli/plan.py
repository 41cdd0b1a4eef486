"""`traincast simulate`: compare scheduling policies on a cluster scenario.

Thin wrapper over ``traincast.plan.simulate.compare``; renders a rich table,
JSON (``--json``) and a PNG plot.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

from traincast.errors import ConfigError, png_path


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)


def _policies() -> str:
    from traincast.plan.policies import POLICIES

    return POLICIES.describe()


def simulate_cmd(
    scenario: str = typer.Option("ardagna2019", "--scenario", "-s",
                                 help="built-in scenario name or a scenario YAML file"),
    policy: str = typer.Option("fifo,edf,priority,milp", "--policy", "-p",
                               help="comma-separated, of: " + _policies()),
    replications: int = typer.Option(5, "--replications", "-r", help="job lists drawn per policy"),
    seed: int = typer.Option(0, "--seed", min=0, help="random seed (same seed, same results)"),
    nodes: int | None = typer.Option(None, "--nodes", help="node slots (jobs scale with it)"),
    jobs: int | None = typer.Option(None, "--jobs", help="number of jobs"),
    interarrival: float | None = typer.Option(None, "--interarrival",
                                              help="mean Poisson inter-arrival time, seconds"),
    time_limit: float = typer.Option(2.0, "--milp-time-limit", help="seconds per MILP solve"),
    period: float | None = typer.Option(None, "--period",
                                        help="MILP re-planning period H in seconds (default: scenario's)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    plot: Path | None = typer.Option(None, "--plot", help="save a PNG comparison plot here"),
) -> None:
    """Simulate a cluster of on-demand GPU VMs under scheduling policies and compare
    cost, tardiness, deadline misses, utilisation and makespan (mean ± sd)."""
    from traincast.plan.scenario import load_scenario
    from traincast.plan.simulate import compare

    if plot is not None:
        plot = png_path(plot, create_folder=True)
    sc = load_scenario(scenario)
    sc = sc.with_overrides(nodes=nodes, n_jobs=jobs, mean_interarrival_s=interarrival)
    if replications < 1:
        raise ConfigError(f"--replications must be >= 1, got {replications}")
    pols = [p for p in (x.strip() for x in policy.split(",")) if p]
    milp_options = {"time_limit_s": time_limit,
                    "period_s": period if period is not None else sc.rescheduling_period_s}
    result = compare(sc, pols, replications=replications, seed=seed, milp_options=milp_options)
    if plot is not None:
        plot_comparison(result, plot)
    if as_json:
        typer.echo(json.dumps(comparison_dict(result), indent=2))
    else:
        render(result, plot)


# ---------------------------------------------------------------- rendering

_COLUMNS = (
    ("cost_usd", "VM cost $", 1.0, "{:.2f}"),
    ("tardiness_cost_usd", "tardiness $", 1.0, "{:.2f}"),
    ("objective_usd", "total $", 1.0, "{:.2f}"),
    ("total_tardiness_s", "tardiness h", 1 / 3600, "{:.2f}"),
    ("max_tardiness_s", "max tard. h", 1 / 3600, "{:.2f}"),
    ("deadline_misses", "misses", 1.0, "{:.1f}"),
    ("utilisation", "util.", 1.0, "{:.2f}"),
    ("makespan_s", "makespan h", 1 / 3600, "{:.2f}"),
)


def _fmt(mean: float, sd: float, scale: float, fmt: str) -> str:
    return f"{fmt.format(mean * scale)} ± {fmt.format(sd * scale)}"


def render(result, plot: Path | None) -> None:
    from rich.table import Table

    from traincast.cli.render import make_console

    console = make_console()
    title = (f"{result.scenario}: {result.nodes} nodes, {result.n_jobs} jobs, Poisson mean "
             f"{result.mean_interarrival_s:g} s, {result.replications} replications, seed {result.seed}")
    table = Table(title=title, caption="mean ± sd over replications")
    table.add_column("policy", no_wrap=True, min_width=max(len(s.policy) for s in result.summaries))
    for _, label, _, _ in _COLUMNS:
        table.add_column(label, justify="right", no_wrap=True)
    for s in result.summaries:
        table.add_row(s.policy, *(_fmt(s.get(k).mean, s.get(k).sd, sc, f) for k, _, sc, f in _COLUMNS))
    console.print(table)
    for s in result.summaries:
        names = {m.name for m in s.metrics}
        if "solver.solves" in names and s.get("solver.solves").mean > 0:
            g = s.get
            gap = g("solver.gap_max").mean if "solver.gap_max" in names else float("nan")
            console.print(
                f"{s.policy}: {g('solver.solves').mean:.0f} solves per run, "
                f"{g('solver.solve_s_mean').mean * 1e3:.0f} ms mean, "
                f"{g('solver.solve_s_max').mean * 1e3:.0f} ms max, worst gap {gap:.2%}, "
                f"{g('solver.time_limit_hits').mean:.1f} time-limit hits, "
                f"{g('solver.fallbacks').mean:.1f} greedy fallbacks per run")
    pols = [s.policy for s in result.summaries]
    if "milp" in pols:
        for base in pols:
            if base == "milp":
                continue
            imp = result.improvement("milp", base)
            if not math.isnan(imp.mean):
                word = "lower" if imp.mean >= 0 else "higher"
                console.print(f"milp vs {base}: total $ {abs(imp.mean):.1%} ± {imp.sd:.1%} {word} "
                              "(paired per replication)")
    if result.duration_origins:
        console.print("durations: " + ", ".join(f"{n} from {k}" for k, n in result.duration_origins))
    for note in result.notes:
        console.print(f"note: {note}")
    if plot is not None:
        console.print(f"plot saved to {plot}")


def comparison_dict(result) -> dict:
    return {
        "scenario": result.scenario, "nodes": result.nodes, "n_jobs": result.n_jobs,
        "mean_interarrival_s": result.mean_interarrival_s, "replications": result.replications,
        "seed": result.seed,
        "policies": {s.policy: {m.name: {"mean": _num(m.mean), "sd": _num(m.sd)} for m in s.metrics}
                     for s in result.summaries},
        "improvement_of_milp": {
            b.policy: {"objective_reduction_mean": _num(result.improvement("milp", b.policy).mean),
                       "objective_reduction_sd": _num(result.improvement("milp", b.policy).sd)}
            for b in result.summaries if b.policy != "milp"
        } if any(s.policy == "milp" for s in result.summaries) else {},
        "runs": [{k: _num(getattr(r, k)) if isinstance(getattr(r, k), float) else getattr(r, k)
                  for k in ("policy", "replication", "n_jobs", "cost_usd", "tardiness_cost_usd",
                            "objective_usd", "total_tardiness_s", "max_tardiness_s",
                            "deadline_misses", "utilisation", "makespan_s", "mean_wait_s", "wall_s")}
                 | {"solver": {k: _num(v) for k, v in r.solver}} for r in result.runs],
        "duration_origins": dict(result.duration_origins),
        "notes": list(result.notes),
    }


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def plot_comparison(result, path: Path) -> Path:
    """Bars of VM cost + tardiness cost (mean ± sd) and deadline misses per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pols = [s.policy for s in result.summaries]
    cost = [s.get("cost_usd") for s in result.summaries]
    tard = [s.get("tardiness_cost_usd") for s in result.summaries]
    miss = [s.get("deadline_misses") for s in result.summaries]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    xs = range(len(pols))
    ax1.bar(xs, [c.mean for c in cost], label="VM cost", color="tab:blue")
    ax1.bar(xs, [t.mean for t in tard], bottom=[c.mean for c in cost], label="weighted tardiness",
            color="tab:orange")
    tot = [s.get("objective_usd") for s in result.summaries]
    ax1.errorbar(xs, [t.mean for t in tot], yerr=[t.sd for t in tot], fmt="none", ecolor="black",
                 capsize=4)
    ax1.set_xticks(list(xs), pols)
    ax1.set_ylabel("$ (mean ± sd)")
    ax1.set_title("cost + weighted tardiness")
    ax1.legend()
    ax2.bar(xs, [m.mean for m in miss], yerr=[m.sd for m in miss], capsize=4, color="tab:red")
    ax2.set_xticks(list(xs), pols)
    ax2.set_ylabel("jobs")
    ax2.set_title("deadline misses")
    fig.suptitle(f"{result.scenario}: {result.nodes} nodes, {result.n_jobs} jobs, "
                 f"{result.replications} replications")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
