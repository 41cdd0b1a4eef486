"""ConvNeXt's 7x7 depthwise convolutions with NCHW inputs against the channels-last-strided inputs its blocks really
feed them (a permute to NHWC for the LayerNorm and back), on this machine's CPU or GPU: forward and backward.

PyTorch picks a convolution's kernels by its input's strides: channels-last-strided inputs go to the channels-last
kernels (oneDNN's on CPUs, cuDNN's on NVIDIA GPUs), contiguous NCHW ones to others (on NVIDIA GPUs, PyTorch's own
depthwise kernels for FP32 and BF16). traincast's trace counts such convolutions and says so in a note
(``Workload.channels_last_strided_convs``) but times them as NCHW ones; this shows how far apart the two are.

Usage: PYTHONPATH=src python benchmarks/depthwise_layouts.py [--device cpu|cuda] [--batch 8] [--threads 2] [--reps 5]
Prints, per ConvNeXt-T stage shape, the median forward and backward (input and weight gradients) ms of each layout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

STAGES = [(96, 56), (192, 28), (384, 14), (768, 7)]  # ConvNeXt-T: channels, feature map at 224 x 224


def timed(fn, device: str, reps: int) -> float:
    """Median ms of ``reps`` calls after a warm-up one, by traincast.measure's clock for ``device``."""
    from traincast.measure.timing import clock_for

    clock = clock_for(device)
    fn()
    clock.sync()
    return statistics.median(clock.measure(fn, reps, 1))


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device", flush=True)
        return 2
    torch.set_num_threads(a.threads)
    print(f"7x7 depthwise convolutions, batch {a.batch}, fp32, on {a.device} ({a.threads} threads); median of {a.reps}")
    for c, hw in STAGES:
        x = torch.randn(a.batch, c, hw, hw, device=a.device)
        w = torch.randn(c, 1, 7, 7, device=a.device, requires_grad=True)
        cl = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # NCHW shape, channels-last strides
        out = []
        for name, t in (("NCHW", x), ("channels-last strides", cl)):
            t = t.clone(memory_format=torch.preserve_format).requires_grad_(True)
            y = F.conv2d(t, w, None, 1, 3, 1, c)
            g = torch.ones_like(y)
            f = timed(lambda t=t: F.conv2d(t, w, None, 1, 3, 1, c), a.device, a.reps)
            b = timed(lambda t=t, y=y, g=g: torch.autograd.grad(y, (t, w), g, retain_graph=True), a.device, a.reps)
            out.append(f"{name}: fwd {f:8.2f} bwd {b:9.2f} ms")
        print(f"C{c:4d} {hw:3d}x{hw:<3d}  " + "   ".join(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
