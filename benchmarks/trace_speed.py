"""How fast tracing is: ResNet-50 (goal < 3 s) and a LLaMA-7B-shaped model at
sequence 2048 (goal < 15 s and < 3 GB RAM).

Each trace runs in a fresh process (so imports are counted as a user sees them
and peak RSS is that of one trace); repeats give median and spread.

    python benchmarks/trace_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from traincast.workload import trace
import torchvision, transformers  # the zoo's libraries: import cost, not trace cost
t1 = time.perf_counter()
name, b, seq, opt = sys.argv[1], int(sys.argv[2]), (int(sys.argv[3]) or None), sys.argv[4]
wl = trace(name, batch_size=b, seq_len=seq, optimizer=opt)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "trace_s": t2 - t1, "ops": len(wl.ops), "params": wl.parameters,
                  "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}))
"""

CASES = [
    ("resnet50", 32, 0, "sgd", 3.0, None),
    ("llama-7b", 1, 2048, "adamw", 15.0, 3.0),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for name, b, seq, opt, goal_s, goal_gb in CASES:
        runs = []
        for _ in range(args.repeats):
            out = subprocess.run([sys.executable, "-c", CHILD, name, str(b), str(seq), opt],
                                 capture_output=True, text=True, check=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        tr = [r["trace_s"] for r in runs]
        tot = [r["trace_s"] + r["import_s"] for r in runs]
        rss = max(r["rss_gb"] for r in runs)
        q = statistics.quantiles(tr, n=4) if len(tr) > 1 else [tr[0]] * 3
        print(f"{name:10s} batch {b} seq {seq or '-':>4} {opt:5s}: trace median {statistics.median(tr):.2f} s "
              f"(IQR {q[0]:.2f}-{q[2]:.2f}, n={len(tr)}), with imports {statistics.median(tot):.2f} s, "
              f"{runs[0]['ops']} ops, {runs[0]['params'] / 1e9:.2f}B params, peak RSS {rss:.2f} GB "
              f"[goal < {goal_s:g} s{'' if goal_gb is None else f', < {goal_gb:g} GB'}: "
              f"{'met' if statistics.median(tr) < goal_s and (goal_gb is None or rss < goal_gb) else 'MISSED'}]")


if __name__ == "__main__":
    main()
