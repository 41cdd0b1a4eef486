"""End-to-end job regression (Gianniti/Ardagna 2018-19, AI Gauge offline) on the shared whole-model data.

1. vTrain: 1,440 Megatron-GPT iterations on 2/4/8 A100 (target iteration_ms). Model ranking by 5-fold CV
   (RMSE, MAPE) like the AI Gauge slide, with and without feature selection of the linear models (forward
   selection by CV MAPE, Draper-Smith stepwise by partial-F p-values); then extrapolation: train on <= 4
   GPUs predict 8, train on micro batch <= 2 predict 4-8, train on global batch <= 16 predict 32-128 (the
   Gianniti tables extrapolate on batch size and GPU count), every model (features of the linear models
   chosen by --select), and the augmented linear models with each selection side by side.
2. MLPerf training v0.6-v1.0 (time to train, minutes; V100/A100/TPU-v3 rows): ranking by 5-fold CV and
   leave-one-accelerator-type-out.

References: AI Gauge reports 7 % MRE for a decision tree and 84 % for linear regression on epoch time;
Gianniti et al. report 1-25 % MAPE for batch-size and GPU-count extrapolation.

Usage: .venv/bin/python benchmarks/job_regression.py [--data ../shared/data] [--fast] [--select none|sfs|stepwise]
       .venv/bin/python benchmarks/job_regression.py --selection-only   # only the selection comparison on vTrain
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.fit import jobs as J  # noqa: E402
from traincast.fit.datasets import default_data_dir  # noqa: E402


def show_holdout(h: J.HoldoutResult) -> None:
    print(f"\n{h.description}  ({h.n_train} train / {h.n_test} test rows)")
    print(J.format_ranking(h.scores))


SPLITS = [("gpus", 4), ("micro_batch", 2), ("global_batch", 16)]
LINEAR = ["linear", "ridge"]  # the families that selection applies to
SELECTION_NAMES = {"sfs": "forward selection by CV MAPE", "stepwise": "Draper-Smith stepwise selection"}


def selection_comparison(rec: J.JobRecords, splits) -> None:
    """CV and extrapolation MAPE of the augmented linear models with all features, SFS and stepwise."""
    rows = []
    for select in J.SELECTIONS:
        t0 = time.time()
        reg = J.JobRegressor(models=LINEAR, select=select).fit(rec)
        kept = "all" if select == "none" else len(reg.selected_features_)
        print(f"\n5-fold CV, select={select}: {kept} of {len(reg.features_.feature_names_)} augmented features "
              f"({time.time() - t0:.1f} s)" + (f": {', '.join(reg.selected_features_)}" if select != "none" else ""))
        print(J.format_ranking(reg.ranking_))
        cv = {s.model: s.mape_pct for s in reg.ranking_}
        for col, thr in splits:
            t0 = time.time()
            h = J.extrapolate(rec, col, thr, models=LINEAR, select=select)
            rows.append((select, h.description, h.n_train, h.n_test, cv, {s.model: s.mape_pct for s in h.scores},
                         len(h.selected_features) if select != "none" else len(reg.features_.feature_names_),
                         time.time() - t0))
            if select != "none":
                print(f"  {h.description}: kept {len(h.selected_features)} on the training rows: "
                      f"{', '.join(h.selected_features)}")
    print("\nselection of the augmented linear models: MAPE % (5-fold CV on all rows; extrapolation test rows)")
    print(f"{'select':9s} {'extrapolation':46s} {'train':>5s} {'test':>5s} {'feat':>4s} "
          f"{'CV lin':>7s} {'CV ridge':>8s} {'lin':>8s} {'ridge':>8s} {'s':>5s}")
    for select, desc, ntr, nte, cv, ext, nf, dt in rows:
        print(f"{select:9s} {desc:46s} {ntr:5d} {nte:5d} {nf:4d} {cv.get('linear', float('nan')):7.2f} "
              f"{cv.get('ridge', float('nan')):8.2f} {ext.get('linear', float('nan')):8.2f} "
              f"{ext.get('ridge', float('nan')):8.2f} {dt:5.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None, help="shared data folder (default ../shared/data)")
    ap.add_argument("--fast", action="store_true", help="only the vTrain ranking and the GPU-count extrapolation")
    ap.add_argument("--select", default="none", choices=J.SELECTIONS,
                    help="feature selection of the linear models in the all-model extrapolation runs")
    ap.add_argument("--selection-only", action="store_true",
                    help="only the vTrain comparison of none / sfs / stepwise for the linear models")
    a = ap.parse_args(argv)
    data = Path(a.data) if a.data else default_data_dir()
    t_all = time.time()

    frame, target = J.build_job_records(data, "vtrain")
    rec = J.records_from_frame(frame, target)
    print(f"== vTrain Megatron-GPT on A100: {len(rec.frame)} rows, target {target}, "
          f"features {', '.join(rec.features)}")
    splits = SPLITS[:1] if a.fast else SPLITS
    if a.selection_only:
        selection_comparison(rec, splits)
        print(f"\ntotal {time.time() - t_all:.1f} s")
        return 0
    t0 = time.time()
    reg = J.JobRegressor().fit(rec)
    print(f"\n5-fold CV ranking, all {len(reg.features_.feature_names_)} augmented features for the linear models "
          f"({time.time() - t0:.1f} s)")
    print(J.format_ranking(reg.ranking_))

    for col, thr in splits:
        h = J.extrapolate(rec, col, thr, select=a.select)
        show_holdout(h)
        if h.selected_features:
            print(f"({SELECTION_NAMES[a.select]} on the training rows kept {len(h.selected_features)}: "
                  f"{', '.join(h.selected_features)})")
    if not a.fast:
        selection_comparison(rec, splits)
        frame, target = J.build_job_records(data, "mlperf")
        rec = J.records_from_frame(frame, target)
        print(f"\n== MLPerf training v0.6-v1.0: {len(rec.frame)} rows, target {target} (time to train), "
              f"features {', '.join(rec.features)}")
        reg = J.JobRegressor().fit(rec)
        print("\n5-fold CV ranking")
        print(J.format_ranking(reg.ranking_))
        for h in J.leave_one_group_out(rec, "gpu"):
            show_holdout(h)
    print(f"\ntotal {time.time() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
