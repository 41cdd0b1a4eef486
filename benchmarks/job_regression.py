"""End-to-end job regression (Gianniti/Ardagna 2018-19, AI Gauge offline) on the shared whole-model data.

1. vTrain: 1,440 Megatron-GPT iterations on 2/4/8 A100 (target iteration_ms). Model ranking by 5-fold CV
   (RMSE, MAPE) like the AI Gauge slide, with and without forward feature selection of the linear models;
   then extrapolation: train on <= 4 GPUs predict 8, train on micro batch <= 2 predict 4-8, train on
   global batch <= 16 predict 32-128 (the Gianniti tables extrapolate on batch size and GPU count).
2. MLPerf training v0.6-v1.0 (time to train, minutes; V100/A100/TPU-v3 rows): ranking by 5-fold CV and
   leave-one-accelerator-type-out.

References: AI Gauge reports 7 % MRE for a decision tree and 84 % for linear regression on epoch time;
Gianniti et al. report 1-25 % MAPE for batch-size and GPU-count extrapolation.

Usage: .venv/bin/python benchmarks/job_regression.py [--data ../shared/data] [--fast]
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None, help="shared data folder (default ../shared/data)")
    ap.add_argument("--fast", action="store_true", help="only the vTrain ranking and the GPU-count extrapolation")
    a = ap.parse_args(argv)
    data = Path(a.data) if a.data else default_data_dir()
    t_all = time.time()

    frame, target = J.build_job_records(data, "vtrain")
    rec = J.records_from_frame(frame, target)
    print(f"== vTrain Megatron-GPT on A100: {len(rec.frame)} rows, target {target}, "
          f"features {', '.join(rec.features)}")
    t0 = time.time()
    reg = J.JobRegressor().fit(rec)
    print(f"\n5-fold CV ranking, all {len(reg.features_.feature_names_)} augmented features for the linear models "
          f"({time.time() - t0:.1f} s)")
    print(J.format_ranking(reg.ranking_))
    t0 = time.time()
    sel = J.JobRegressor(models=["linear", "ridge"], select="sfs").fit(rec)
    print(f"\nforward selection by CV MAPE kept {len(sel.selected_features_)} features ({time.time() - t0:.1f} s): "
          f"{', '.join(sel.selected_features_)}")
    print(J.format_ranking(sel.ranking_))

    splits = [("gpus", 4)] if a.fast else [("gpus", 4), ("micro_batch", 2), ("global_batch", 16)]
    for col, thr in splits:
        show_holdout(J.extrapolate(rec, col, thr))

    if not a.fast:
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
