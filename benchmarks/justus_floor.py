"""How much of the Justus 2018 leave-one-GPU-out error is the machine's per-layer floor, not the GPU?

The lightest Justus layers (small dense and conv layers, TensorFlow 1.x, one ``session.run`` per timing) take
a fixed time that the GPU's specs do not explain: the host, driver and TensorFlow build set it. For each GPU
this prints that floor (the 10th percentile of the forward dense-layer times, and the median of the forward
layers under 0.05 GFLOP) beside its datasheet fp32 TFLOPS, and the rank correlation of floor and peak over the
six machines. Then, fitting without each GPU in turn (the shipped estimator and normalizer, both datasets,
as ``layers_logo.py``), it splits the held-out GPU's rows into *floor-bound* (measured time under 3x that GPU's
floor) and the rest, and prints MAPE and the median predicted / measured ratio of each part: a model that knows
only the specs carries the other machines' floor to the held-out one.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/justus_floor.py [--data DIR] [--rows-per-file 300]
       [--seeds 0,1,2] [--floor-multiple 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.predict import opfeatures as F  # noqa: E402
from traincast.fit.learn import OpTimeRegressor, mape, training_rows  # noqa: E402
from traincast.fit.train import DEFAULT_ESTIMATOR  # noqa: E402


def floors(justus) -> dict:
    """GPU -> (dense forward p10 ms, median ms of forward layers under 0.05 GFLOP, fp32 TFLOPS)."""
    fwd = justus[justus["train_step"] == 0]
    flops, _, _ = F.costs(fwd)
    light = fwd[flops < 5e7]
    out = {}
    for gpu, d in fwd.groupby("gpu"):
        dense = d[d["kind"] == "matmul"]["time_ms"]
        out[str(gpu)] = (float(dense.quantile(0.1)), float(light[light["gpu"] == gpu]["time_ms"].median()),
                         float(d["dev_fp32_tflops"].iloc[0]))
    return out


def main(argv=None) -> int:
    from scipy.stats import spearmanr

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--rows-per-file", type=int, default=300)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--floor-multiple", type=float, default=3.0)
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--seeds must be a comma list of integers, got {args.seeds!r}")
    if not seeds or args.floor_multiple <= 0 or args.rows_per_file <= 0:
        ap.error("give at least one seed, a positive --floor-multiple and a positive --rows-per-file")

    for seed in seeds:
        rows = training_rows(args.data, max_rows_per_file=args.rows_per_file, seed=seed)
        justus = rows[rows["source"] == "justus2018"]
        fl = floors(justus)
        print(f"seed {seed}: {args.rows_per_file} rows per GPU x op file")
        print(f"  {'GPU':<12} {'dense p10 ms':>12} {'light median ms':>16} {'fp32 TFLOPS':>12}")
        for gpu, (p10, light, peak) in sorted(fl.items(), key=lambda kv: kv[1][0]):
            print(f"  {gpu:<12} {p10:12.3f} {light:16.3f} {peak:12.2f}")
        rho = spearmanr([v[0] for v in fl.values()], [v[2] for v in fl.values()]).statistic
        print(f"  floor spread (max / min) {max(v[0] for v in fl.values()) / min(v[0] for v in fl.values()):.1f}x; "
              f"Spearman rank correlation of floor and fp32 peak: {rho:+.2f}")
        print(f"  held out      floor-bound rows (< {args.floor_multiple:g}x floor)   other rows")
        print(f"  {'GPU':<12} {'n':>5} {'MAPE %':>7} {'pred/meas':>10}   {'n':>5} {'MAPE %':>7} {'pred/meas':>10}  all MAPE %")
        est = OpTimeRegressor(estimator=DEFAULT_ESTIMATOR)
        for gpu in sorted(fl):
            group = F.gpu_group(gpu)
            train = rows[rows["gpu_group"] != group]
            test = justus[justus["gpu"] == gpu]
            m = OpTimeRegressor(**est.get_params()).fit(train, train["time_ms"].to_numpy())
            p, y = m.predict(test), test["time_ms"].to_numpy()
            bound = y < args.floor_multiple * fl[gpu][0]
            cells = []
            for sel in (bound, ~bound):
                cells.append(f"{int(sel.sum()):5d} {mape(p[sel], y[sel]):7.1f} {np.median(p[sel] / y[sel]):10.2f}"
                             if sel.any() else f"{0:5d} {'-':>7} {'-':>10}")
            print(f"  {gpu:<12} {cells[0]}   {cells[1]}  {mape(p, y):9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
