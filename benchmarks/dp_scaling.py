"""Data-parallel speed-ups: forecast vs measured, on what the shared data allows (issue 18's data-parallel part).

Protocol (written 2026-11-25 before the speed-ups were computed):

- Measured speed-ups come from the vTrain single-node rows (``../shared/data/models``): every pair of rows of
  the same model, tensor and pipeline degree, micro-batch and batch per replica, one with data degree 1 and one
  with data degree k (2, 4 or 8): speed-up = k x time(1) / time(k) (samples per second relative to one
  replica). This is weak scaling inside one node (NVSwitch, 2-8 GPUs).
- Forecasts: the same rows under ``benchmarks/parallel_vtrain.py``'s protocol (its primary settings; fused
  attention as a sensitivity run with ``--attention fused``). Nothing is fitted to these rows; the speed-up
  depends on the gradient all-reduce (the collective model fitted to NCCL data), the optimizer step after it,
  the fixed per-step overhead and the wait for the slowest GPU (``parallel.yaml``).
- Reported: speed-up MAPE, median signed error, by data degree; and the same for a naive forecast
  (speed-up = k) for scale.
- Multi-node data parallelism: the shared data has no measured multi-node training steps with matched
  single-node baselines (MLPerf results change the batch, the epochs to converge and often the software between
  system sizes); the collective model's leave-one-GPU-count-out error on 16-128 A100s
  (``benchmarks/fit_collectives.py``) is the multi-node check of the communication part.

    python benchmarks/dp_scaling.py [--attention eager|fused] [--forecasts]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path
import sys

sys.path.insert(0, str(Path(__file__).resolve().parent))

from parallel_vtrain import forecast_rows, load_rows  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--attention", default="eager", choices=("eager", "fused"))
    ap.add_argument("--device", default="A100-SXM4-80GB")
    ap.add_argument("--forecasts", action="store_true", help="also the forecast 8-GPU speed-ups of a few jobs")
    args = ap.parse_args()
    if args.forecasts:
        forecast_speedups()
    recs = forecast_rows(load_rows(), args.device, args.attention)
    groups = defaultdict(dict)
    for r in recs:
        key = (r["h"], r["L"], r["tp"], r["pp"], r["mb"], r["gbs"] // r["dp"])
        groups[key][r["dp"]] = r
    pairs = []
    for key, by_dp in groups.items():
        if 1 not in by_dp:
            continue
        one = by_dp[1]
        for k, r in by_dp.items():
            if k == 1:
                continue
            meas = k * one["measured_ms"] / r["measured_ms"]
            pred = k * one["predicted_ms"] / r["predicted_ms"]
            pairs.append(dict(k=k, tp=key[2], pp=key[3], measured=meas, forecast=pred,
                              err=100 * (pred / meas - 1), naive=100 * (k / meas - 1)))
    if not pairs:
        print("no pairs")
        return
    err = [p["err"] for p in pairs]
    naive = [p["naive"] for p in pairs]
    print(f"vTrain data-parallel pairs (same model, layout, micro-batch and batch per replica; data degree 1 vs k): "
          f"{len(pairs)}, attention {args.attention}")
    print(f"  speed-up MAPE {statistics.mean(abs(e) for e in err):.1f}%, median signed error {statistics.median(err):+.1f}%;"
          f" naive (speed-up = k): MAPE {statistics.mean(abs(e) for e in naive):.1f}%, median {statistics.median(naive):+.1f}%")
    for k in sorted({p["k"] for p in pairs}):
        ps = [p for p in pairs if p["k"] == k]
        print(f"  k={k}: measured speed-up {statistics.median(p['measured'] for p in ps):.2f}x (median; "
              f"{min(p['measured'] for p in ps):.2f}-{max(p['measured'] for p in ps):.2f}), forecast "
              f"{statistics.median(p['forecast'] for p in ps):.2f}x ({min(p['forecast'] for p in ps):.2f}-"
              f"{max(p['forecast'] for p in ps):.2f}); MAPE {statistics.mean(abs(p['err']) for p in ps):.1f}%, "
              f"median {statistics.median(p['err'] for p in ps):+.1f}% (n={len(ps)})")


def forecast_speedups() -> None:
    """The forecast 8-GPU weak-scaling speed-ups of a few data-parallel jobs (issue 18: they were 7.98-7.99x for
    every case), with what makes them less than 8."""
    from traincast.predict import WorkloadFamily, forecast

    print("forecast data-parallel speed-ups at 8 GPUs (per-GPU batch fixed, one node):")
    for model, gpu, b, prec, opt in (("resnet50", "V100-SXM2-16GB", 64, "fp32", "sgd"),
                                     ("resnet50", "A100-SXM4-40GB", 128, "fp32", "sgd"),
                                     ("bert-large", "A100-SXM4-40GB", 8, "amp-fp16", "adamw"),
                                     ("gpt2-large", "V100-SXM2-32GB", 2, "amp-fp16", "adamw")):
        fam = WorkloadFamily(model, precision=prec, optimizer=opt)
        f = forecast(model, gpu=gpu, gpus=8, batch_size=b, per_gpu_batch=True, precision=prec, optimizer=opt,
                     family=fam, dataset_size=100000)
        print(f"  {model} on 8x {gpu}, {b} per GPU: {f.scaling[-1].speedup:.2f}x (exposed communication "
              f"{f.communication_s * 1e3:.1f} ms of {f.communication_total_s * 1e3:.1f} ms, slowest-GPU wait "
              f"{f.straggler_s * 1e3:.1f} ms, step {f.iteration_s * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
