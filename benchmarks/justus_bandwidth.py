"""What holds the Justus 2018 small-batch dense layers: DRAM bandwidth or the fp32 peak?

For each GPU, the forward dense layers that are memory-bound by the roofline and move the most bytes (batch
<= 8, weights + activations over 40 MB): the bandwidth they reach (bytes / measured time, median and 90th
percentile), as a fraction of the datasheet bandwidth and per datasheet fp32 TFLOPS. If DRAM held them the
fraction would be alike across GPUs; it is not (13-55%), while the GB/s per TFLOPS varies less. This is why
the learned model takes the TensorFlow matmul/conv ratios to the compute time (``normalizer="tf-compute"``,
``docs/learned.md``).

Usage: PYTHONPATH=src .venv/bin/python benchmarks/justus_bandwidth.py [--data DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.predict import opfeatures as F  # noqa: E402
from traincast.fit.datasets import load_justus  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    args = ap.parse_args(argv)
    rows = F.attach_devices(load_justus(args.data))
    dense = rows[(rows["kind"] == "matmul") & (rows["train_step"] == 0)]
    flops, nbytes, _ = F.costs(dense)
    peak, bw = dense["dev_fp32_tflops"].to_numpy(), dense["dev_bw_gbps"].to_numpy()
    tc, tm, _ = F.roofline_ms(flops, nbytes, peak, bw)
    pick = (tm > tc) & (nbytes > 40e6) & (dense["m"].to_numpy() <= 8)
    reached = nbytes / (dense["time_ms"].to_numpy() * 1e-3) / 1e9
    print(f"{'GPU':<12} {'n':>4} {'GB/s p50':>9} {'p90':>6} {'datasheet':>10} {'fraction':>9} {'fp32 TFLOPS':>12} "
          f"{'GB/s per TFLOPS':>16}")
    fractions, per_tflops = [], []
    for gpu in sorted(dense["gpu"].unique()):
        sel = pick & (dense["gpu"] == gpu).to_numpy()
        if not sel.any():
            continue
        p50, p90 = np.median(reached[sel]), np.quantile(reached[sel], 0.9)
        b, p = bw[sel][0], peak[sel][0]
        fractions.append(p50 / b)
        per_tflops.append(p50 / p)
        print(f"{gpu:<12} {int(sel.sum()):4d} {p50:9.0f} {p90:6.0f} {b:10.0f} {p50 / b:9.2f} {p:12.2f} {p50 / p:16.1f}")
    print(f"spread (max / min): fraction of datasheet bandwidth {max(fractions) / min(fractions):.1f}x, "
          f"GB/s per fp32 TFLOPS {max(per_tflops) / min(per_tflops):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
