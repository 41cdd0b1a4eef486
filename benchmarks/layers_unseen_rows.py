"""Accuracy of the learned per-op model on rows of its training GPUs that the fit did not see.

Fits on ``--rows-per-file`` rows of every GPU x op file (as ``traincast fit layers`` does, seed 0), then
predicts rows drawn with another seed, keeping only those not in the training sample, and prints MAPE per
GPU and its mean per data set. The in-distribution counterpart of ``layers_logo.py`` (GPUs left out).

Usage: PYTHONPATH=src .venv/bin/python benchmarks/layers_unseen_rows.py [--estimator hybrid|hgb|mlp|ensemble|hgb_nohw|auto]
       [--normalizer tf-compute|compute|roofline]
       [--rows-per-file 1500] [--test-rows-per-file 1800]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.fit.learn import ESTIMATORS, NORMALIZERS, OpTimeRegressor, mape, training_rows  # noqa: E402
from traincast.fit.train import DEFAULT_ESTIMATOR, DEFAULT_ROWS_PER_FILE  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--estimator", choices=ESTIMATORS, default=DEFAULT_ESTIMATOR)
    ap.add_argument("--normalizer", choices=NORMALIZERS, default=NORMALIZERS[0])
    ap.add_argument("--rows-per-file", type=int, default=DEFAULT_ROWS_PER_FILE)
    ap.add_argument("--test-rows-per-file", type=int, default=1800, help="drawn with seed 7 before removing training rows")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    train = training_rows(args.data, max_rows_per_file=args.rows_per_file, seed=0)
    test = training_rows(args.data, max_rows_per_file=args.test_rows_per_file, seed=7)
    key = ["source", "gpu", "kind", "time_ms"]
    seen = set(map(tuple, train[key].astype(str).to_numpy()))
    test = test[[tuple(r) not in seen for r in test[key].astype(str).to_numpy()]].reset_index(drop=True)
    print(f"{len(train)} training rows, {len(test)} unseen rows of the same GPUs")
    model = OpTimeRegressor(estimator=args.estimator, normalizer=args.normalizer).fit(train, train["time_ms"].to_numpy())  # as fit_layers does
    pred, y = model.predict(test), test["time_ms"].to_numpy()
    for src in ("justus2018", "neusight"):
        s = (test["source"] == src).to_numpy()
        rows = {g: s & (test["gpu"] == g).to_numpy() for g in sorted(test.loc[s, "gpu"].unique())}
        per = {g: mape(pred[r], y[r]) for g, r in rows.items()}
        print(f"{src}: " + "  ".join(f"{g} {v:.1f}" for g, v in per.items()))
        print(f"  mean over GPUs {np.mean(list(per.values())):.1f}%  (estimator {args.estimator}, normalizer {args.normalizer}, n={int(s.sum())})")
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
