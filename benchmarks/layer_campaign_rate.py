"""Layer-campaign throughput: samples per minute on this machine, with spread.

    python benchmarks/layer_campaign_rate.py [--samples 100] [--repeats 3] [--phase forward,train] [--ops all]

Each repeat runs a fresh campaign (new database, new seed) of small shapes, as
``traincast bench layers --size small`` does, and the rate counts everything
the command does per sample: drawing, meta-device FLOP count, building, timing
and committing. Goal (issue 3): >= 300 samples/min on the 2-core CI CPU.
The last line is the figure to quote.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--phase", default="forward,train")
    ap.add_argument("--ops", default="all")
    ap.add_argument("--size", default="small")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    import torch

    from traincast.measure import CampaignConfig, run_campaign
    from traincast.measure.ops import resolve_ops
    from traincast.store import Store

    ops = resolve_ops(args.ops)
    print(f"torch {torch.__version__}, {os.cpu_count()} cpus, threads {args.threads or torch.get_num_threads()}, "
          f"load {os.getloadavg()[0]:.2f}; {args.samples} samples x {args.repeats} repeats, size {args.size}")
    all_rates = []
    for phase in args.phase.split(","):
        rates = []
        for r in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                store = Store(Path(tmp) / "rate.db")
                t0 = time.perf_counter()
                res = run_campaign(store.conn, CampaignConfig(ops=ops, n_samples=args.samples, phase=phase,
                                                              size=args.size, seed=1000 + r, threads=args.threads))
                wall = time.perf_counter() - t0
                store.close()
            rate = 60.0 * res.n_new / wall
            rates.append(rate)
            print(f"  {phase:7s} repeat {r}: {res.n_new} samples ({res.n_failed_new} failed) in {wall:.1f} s = "
                  f"{rate:.0f} samples/min (load {os.getloadavg()[0]:.2f})")
        q = statistics.quantiles(rates, n=4) if len(rates) > 1 else [rates[0]] * 3
        print(f"{phase}: median {statistics.median(rates):.0f} samples/min, IQR {q[2] - q[0]:.0f}, "
              f"min {min(rates):.0f}, max {max(rates):.0f}")
        all_rates.extend(rates)
    print(f"samples/min over all runs: median {statistics.median(all_rates):.0f} "
          f"(min {min(all_rates):.0f}, max {max(all_rates):.0f}, n={len(all_rates)})")


if __name__ == "__main__":
    main()
