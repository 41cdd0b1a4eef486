"""How long ``traincast parallelize`` takes for a 70B model on 1,024 GPUs (goal: under 30 s), in a fresh process
each time (imports, both traces and the search counted, as a user sees them); median and spread of repeats.

    python benchmarks/parallelize_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONFIG = Path(__file__).resolve().parent / "data" / "configs" / "llama2-70b.json"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "traincast", "parallelize", str(CONFIG), "--gpu", "H100", "--gpus", "1024", "-b",
           "1024", "--seq-len", "4096", "--json"]
    walls, considered, best, inside = [], None, None, []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        walls.append(time.perf_counter() - t0)
        d = json.loads(out)
        considered, best = d["considered"], d["best"]["config"]["label"]
        inside.append(d["elapsed_s"])
    q = statistics.quantiles(walls, n=4) if len(walls) > 1 else [walls[0]] * 3
    print(f"parallelize llama2-70b (H100 x 1024, batch 1024, seq 4096): {considered} layouts, best {best}")
    print(f"wall time per run: median {statistics.median(walls):.1f} s (IQR {q[0]:.1f}-{q[2]:.1f}, n={len(walls)}; "
          f"tracing + search alone {statistics.median(inside):.1f} s); goal < 30 s: "
          f"{'met' if statistics.median(walls) < 30 else 'not met'}")


if __name__ == "__main__":
    main()
