"""Host time per op of eager PyTorch training: what ``host_forward_us`` / ``host_backward_us`` default to.

Eager training steps of small models whose tensors are tiny (width 8, 4 tokens, batch 1) run on this machine's CPU
with one thread, so that each kernel takes a microsecond or two and the step time is the
host's work: Python, the dispatcher, autograd's bookkeeping (forward) or its engine (backward), allocation.
The forward (with the loss) and the backward are timed separately over many steps, and each is divided by the
ops traincast traces for that phase of the same model (``traincast trace``: views and allocations are not
counted, as they launch no kernel). On a GPU the tiny CPU kernels' microsecond stands in for the driver's
launch of the kernel.

    python benchmarks/host_dispatch.py [--steps 300] [--repeats 3] [--device cuda]

The measurement is ``traincast.measure.host`` (``traincast calibrate --device cuda --host-only`` runs it on a GPU
machine and saves the figures in a profile).

Prints per model the microseconds per traced op (median of the repeats, and their range) and the median
over the models, which ``hardware/data/efficiency.yaml`` uses. The host CPUs of GPU servers differ from this
one: a faster host issues faster.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from traincast.measure.host import MODEL_FIELDS, measure_host_costs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="gpt2,llama,bert", help="of " + ",".join(MODEL_FIELDS))
    ap.add_argument("--device", default="cpu", help="cpu (the catalog's defaults) | cuda (this machine's GPU host)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    hc = measure_host_costs(args.device, models=args.models.split(","), steps=args.steps, repeats=args.repeats)
    print(f"{'model':10s} {'ops f/b':>9s}  {'forward us/op':>20s}  {'backward us/op':>20s}")
    for name, m in hc.per_model.items():
        f_us, b_us = m["forward_us"], m["backward_us"]
        print(f"{name:10s} {m['ops'][0]:4d}/{m['ops'][1]:<4d}  {statistics.median(f_us):7.1f} "
              f"({min(f_us):.1f}-{max(f_us):.1f})      {statistics.median(b_us):7.1f} ({min(b_us):.1f}-{max(b_us):.1f})")
    print(f"median over models: forward {hc.forward_us:.1f} us/op, backward {hc.backward_us:.1f} us/op "
          f"(torch {torch.__version__}, one thread, {hc.device})")


if __name__ == "__main__":
    main()
