"""Hopper's BF16 GEMM efficiency from this project's own kernel timings, and the forecast of each timed GEMM.

Data: the BF16 GEMMs of ``benchmarks/fp8_gemm_bench.py`` as run on an H100 SXM (2026-11-27, CUDA events) and an
H200 (2026-11-27, CUDA-graph replays): the 12 GEMMs (forward, input and weight gradient of the QKV, output
projection and two MLP linears) of transformer layers of width 768, 2048, 4096 and 8192 at 8,192 tokens
(``benchmarks/data/gpu_campaign/h1*_fp8_gemm_2026-11-27.json``, 48 rows a board).

Protocol, written 2026-11-28 before this script's figures were printed and before any whole-model set was scored
with its value (the evidence that led here, docs/gpu-accuracy.md "A fourth lease": the 32K-token step's ``mm`` ran
at about 0.75 of the BF16 peak, the FP8 bench's BF16 GEMMs read forecast / measured 1.14-1.15; both seen):

1. Rows: the BF16 GEMMs of both files whose measured time is at least 0.3 ms (the cut that set
   ``fp8_matmul_ratio``; below it the H100's event timing carries launch time, and a forecast's GEMMs of that size
   are bound by the host that issues them, not by the tensor rate). Each row's achieved share of the board's
   dense BF16 peak (the catalog's, at its boost clock): FLOPs / (time x peak).
2. Value: ``hopper: compute: tensor: matmul`` in ``efficiency.yaml`` := the median share over the rows of both
   boards, rounded to two decimals. The parameter means the share of the tensor peak that large GEMMs reach; these
   rows are the GEMMs of the transformer layers users train, timed on the two Hopper boards of the catalog, so
   they set it directly; nothing is fitted to a whole-model row. ``gemm_half_dim`` stays 0 (no shape ramp) and
   ``fp8_matmul_ratio`` stays 0.90 (a ratio of the FP8 to the BF16 share, measured on the same rows).
3. Then, once, before and after, each set whose forecasts run Hopper BF16 GEMMs, reported as they come (a set that
   worsens is reported with its cause; the value is not changed on them):
   ``gpu_measured.py`` on the H100 and H200 campaigns (defaults; with the H200 host-only profile),
   ``long_context_bench.py --compare`` (H200 steps), ``fp8_step_bench.py --compare`` (as its protocol said, and
   with ``--optimizer adamw-fused --bf16-precision pure-bf16``), ``fp8_cp_validation.py`` (eager, compiled,
   source), ``published_runs.py`` (its Llama 3 405B H100 rows) and ``gemm_ceiling.py`` (the Hopper tensor rows'
   r). ``gemm_ceiling.py``'s rule reads Hopper's tensor rows among its references: the ruled generations'
   catalog values (CDNA2-4) are not re-derived in this change; what the rule would give after it is printed and
   reported.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/hopper_gemm.py [--min-ms 0.3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.hardware.catalog import get_catalog  # noqa: E402
from traincast.predict.roofline import CompiledOps, RooflineParams, compute_unit  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "gpu_campaign"
FILES = {"H100-SXM5-80GB": DATA / "h100_fp8_gemm_2026-11-27.json",
         "H200-SXM-141GB": DATA / "h200_fp8_gemm_2026-11-27.json"}


def rows(min_ms: float = 0.3) -> list[dict]:
    """Every BF16 GEMM of both files with its achieved share of the BF16 peak, the catalog's forecast of it and
    whether it passes the protocol's time cut."""
    cat = get_catalog()
    out = []
    for name, path in FILES.items():
        dev = cat.device(name)
        peak = dev.peak_flops_per_s(compute_unit("matmul", "bf16", dev, "amp-bf16")[0])
        params = RooflineParams.for_device(dev)
        for g in json.loads(path.read_text())["gemms"]:
            m, k, n = int(g["M"]), int(g["K"]), int(g["N"])
            flops = 2.0 * m * n * k
            ops = CompiledOps.from_arrays([flops], [2.0 * (m * k + k * n + m * n)], ["matmul"], dev,
                                          precision="amp-bf16", dtype="bf16", dmin=[min(m, n, k)])
            fc_ms = float(ops.times(params)[0]) * 1e3
            ms = float(g["bf16_ms"])
            out.append(dict(device=name, name=g["name"], M=m, K=k, N=n, ms=ms, share=flops / (ms * 1e-3) / peak,
                            forecast_ms=fc_ms, used=ms >= min_ms))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-ms", type=float, default=0.3, help="the protocol's time cut (default 0.3 ms)")
    args = ap.parse_args(argv)
    rs = rows(args.min_ms)
    print(f"{'device':16s} {'gemm':18s} {'M':>6s} {'K':>6s} {'N':>6s} {'ms':>7s} {'share':>6s} {'fc/meas':>8s} used")
    for r in rs:
        print(f"{r['device']:16s} {r['name']:18s} {r['M']:6d} {r['K']:6d} {r['N']:6d} {r['ms']:7.3f} "
              f"{r['share']:6.3f} {r['forecast_ms'] / r['ms']:8.3f} {'yes' if r['used'] else 'no'}")
    used = [r for r in rs if r["used"]]
    for name in FILES:
        s = [r["share"] for r in used if r["device"] == name]
        print(f"{name}: {len(s)} rows >= {args.min_ms} ms, share of the BF16 peak median {np.median(s):.3f} "
              f"(IQR {np.quantile(s, 0.25):.3f}-{np.quantile(s, 0.75):.3f}, {min(s):.3f}-{max(s):.3f})")
    s = np.array([r["share"] for r in used])
    ratio = np.array([r["forecast_ms"] / r["ms"] for r in used])
    print(f"both: {len(s)} rows, median share {np.median(s):.3f} -> the protocol's value {round(float(np.median(s)), 2):.2f}")
    print(f"the catalog's forecast / measured on these rows: median {np.median(ratio):.3f} "
          f"(IQR {np.quantile(ratio, 0.25):.3f}-{np.quantile(ratio, 0.75):.3f}); "
          f"MAPE {100 * np.mean(np.abs(ratio - 1)):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
