"""Leave-one-GPU-out accuracy of the learned per-op model on the Justus 2018 layers and NeuSight kernels.

For every GPU model in a dataset: fit on all rows (both datasets) of the other GPU models, predict the
held-out GPU's rows of that dataset from its catalog specs alone, print MAPE and RMSE (and the analytical
roofline's MAPE on the same rows). P100 is in both datasets and is held out of both at once; the A100
rows (40 GB for most kernels, 80 GB for conv) are one group. Then the batch-range extrapolation test of the
issue: fit on batch <= 32, predict batch 33-64 (Justus rows, all GPUs).

Reference: Justus et al. 2018 report 39.6% MAPE leaving the V100 out.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/layers_logo.py [--rows-per-file 1000] [--dataset justus2018|neusight]
       [--estimator hybrid|hgb|mlp|ensemble|hgb_nohw|auto]
       [--normalizer tf-compute|compute|roofline] [--cv-splits K] [--cv-max-rows N] [--adapt 10,30 --draws 5] [--seeds 0,1,2]
With ``--estimator auto`` each held-out fit chooses its model per op family and framework by a CV grouped by
GPU over the remaining GPUs only (nested: the held-out GPU never takes part in the choice).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.fit.learn import ESTIMATORS, NORMALIZERS, OpTimeRegressor, leave_one_gpu_out, mape, training_rows  # noqa: E402
from traincast.fit.train import DEFAULT_ESTIMATOR  # noqa: E402  the shipped model's


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--rows-per-file", type=int, default=1000, help="rows sampled per GPU x op file (train and test)")
    ap.add_argument("--dataset", action="append", choices=("justus2018", "neusight"))
    ap.add_argument("--max-iter", type=int, default=200)
    ap.add_argument("--skip-batch-range", action="store_true")
    ap.add_argument("--estimator", choices=ESTIMATORS, default=DEFAULT_ESTIMATOR,
                    help="the regressor (mlp: as Justus et al.; auto: chosen by GPU-grouped CV)")
    ap.add_argument("--normalizer", choices=NORMALIZERS, default=NORMALIZERS[0],
                    help="the datasheet time the ratios are learned against")
    ap.add_argument("--cv-splits", type=int, default=None, help="auto: GroupKFold folds (default: leave one GPU out)")
    ap.add_argument("--cv-max-rows", type=int, default=20000, help="auto: rows per family in the CV (0: all)")
    ap.add_argument("--adapt", default="", help="comma list of K: also adapt each held-out fit with K random rows "
                    "of the held-out GPU (GpuAdapter) and score it on the other rows")
    ap.add_argument("--draws", type=int, default=5, help="random draws of the K adaptation rows per GPU")
    ap.add_argument("--seeds", default="0", help="comma list of row-sample seeds: the leave-one-GPU-out run is "
                    "repeated on each sample and the spread of the per-GPU MAPEs printed")
    args = ap.parse_args(argv)
    adapt = [int(k) for k in args.adapt.split(",") if k.strip()]
    seeds = [int(v) for v in args.seeds.split(",") if v.strip()] or [0]
    t0 = time.perf_counter()
    rows = training_rows(args.data, max_rows_per_file=args.rows_per_file, seed=seeds[0])
    print(f"{len(rows)} rows ({args.rows_per_file} per GPU x op file, seed {seeds[0]}) loaded in "
          f"{time.perf_counter() - t0:.0f} s")
    est = OpTimeRegressor(max_iter=args.max_iter, estimator=args.estimator, normalizer=args.normalizer,
                          cv_splits=args.cv_splits,
                          cv_max_rows=args.cv_max_rows or None)
    print(f"estimator {args.estimator}, normalizer {args.normalizer}, max_iter {args.max_iter}"
          + (f", CV {'leave one GPU out' if args.cv_splits is None else f'GroupKFold({args.cv_splits})'}"
             f" on <= {args.cv_max_rows or 'all'} rows per family" if args.estimator == "auto" else ""))
    seed_rows: dict = {}  # the other seeds' row samples
    for ds in args.dataset or ("justus2018", "neusight"):
        print(f"\n{ds}: leave one GPU out")
        res = leave_one_gpu_out(rows, ds, estimator=est, adapt=adapt, draws=args.draws)
        print(f"  {'held out':<12} {'n':>6} {'MAPE %':>7} {'RMSE ms':>9} {'analytical %':>13}  per op MAPE %"
              + ("  [choice]" if args.estimator == "auto" else ""))
        for r in res:
            per = "  ".join(f"{k} {v:.1f}" for k, v in r.per_kind_mape_pct.items())
            ch = ("  [" + " ".join(f"{c}={v}" for c, v in sorted(r.choice.items())) + "]") if args.estimator == "auto" else ""
            print(f"  {r.gpu:<12} {r.n_rows:6d} {r.mape_pct:7.1f} {r.rmse_ms:9.3f} {r.analytical_mape_pct:13.1f}  {per}{ch}")
        print(f"  mean over held-out GPUs: learned {np.mean([r.mape_pct for r in res]):.1f}%  "
              f"analytical {np.mean([r.analytical_mape_pct for r in res]):.1f}%  (paper, V100 out: 39.6%)")
        for k in adapt:
            print(f"  adapted with {k} measured rows of the held-out GPU, MAPE % on its other rows, "
                  f"median [min-max] of {args.draws} draws:")
            for r in res:
                v = r.adapted_mape_pct[k]
                print(f"    {r.gpu:<12} {np.median(v):6.1f}  [{min(v):.1f}-{max(v):.1f}]")
            print(f"    mean of the medians: {np.mean([np.median(r.adapted_mape_pct[k]) for r in res]):.1f}%")
        if len(seeds) > 1:
            per = {r.gpu: [r.mape_pct] for r in res}
            means = [float(np.mean([r.mape_pct for r in res]))]
            for seed in seeds[1:]:
                if seed not in seed_rows:  # loaded once for both datasets
                    seed_rows[seed] = training_rows(args.data, max_rows_per_file=args.rows_per_file, seed=seed)
                got = leave_one_gpu_out(seed_rows[seed], ds, estimator=est, log=None)
                for r in got:
                    per.setdefault(r.gpu, []).append(r.mape_pct)
                means.append(float(np.mean([r.mape_pct for r in got])))
            print(f"  over row-sample seeds {', '.join(map(str, seeds))}: MAPE % per held-out GPU [min-max]")
            for g, v in per.items():
                print(f"    {g:<12} " + " ".join(f"{x:5.1f}" for x in v) + f"  [{min(v):.1f}-{max(v):.1f}]")
            print(f"    mean         " + " ".join(f"{x:5.1f}" for x in means) + f"  [{min(means):.1f}-{max(means):.1f}]")
    if not args.skip_batch_range:
        j = rows[rows["source"] == "justus2018"]
        batch = np.where(j["kind"] == "conv", j["cn"], j["m"])
        train, test = j[batch <= 32], j[(batch > 32) & (batch <= 64)]
        m = OpTimeRegressor(**est.get_params()).fit(train, train["time_ms"].to_numpy())
        p = m.predict(test)
        print(f"\nJustus batch-range extrapolation (fit batch <= 32, predict 33-64, all GPUs): "
              f"n={len(test)} MAPE {mape(p, test['time_ms'].to_numpy()):.1f}%")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
