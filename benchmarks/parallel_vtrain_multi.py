"""Forecast vTrain's multi-node measurements (109 Megatron GPT iterations on 64-512 A100 with tensor, data and
pipeline parallel degrees, 3.6B-175B parameters) analytically, and report the error.

Protocol (written 2026-11-28, before any forecast of these rows was run or looked at; nothing is fitted to them;
the same as ``parallel_vtrain.py``'s for vTrain's single-node rows but for the cluster):

- Rows: every row of ``benchmarks/data/vtrain_multi/ground_truth_multi.csv`` (VIA-Research/vTrain, commit
  f8dda84; its README there).
- Model: a Megatron GPT traced from a Hugging Face GPT-2 config with the row's hidden size, heads, layers and
  sequence length (``parallel_vtrain.gpt_config``: ``activation_function: gelu``, ``attn_implementation: eager``,
  vocabulary 50,257); precision ``amp-fp16``, optimizer Adam.
- Layout: the row's tensor, pipeline and data degrees and micro-batch (global batch / (data degree x micro-batch)
  micro-batches a step), 1F1B, full activation recomputation, no overlap of the gradient all-reduce with the
  backward pass (the authors' validation configs: ``use_checkpoint: true``, ``use_gradient_bucket: false``).
- Hardware: ``A100-SXM4-80GB``, 8 GPUs a node (NVSwitch inside it, the catalog's link and the collective model
  fitted to the shared NCCL data), the row's GPUs / 8 nodes, 800 Gb/s a node between nodes (the configs'
  ``inter_node_bandwidth``). The analytical predictor with the catalog's defaults, as ``predict`` uses them.
- Reported: MAPE, median signed error (+ = forecast slower), 90th percentile of |error|, share within 10%, rows
  forecast out of memory; by model, GPUs, tensor, pipeline and data degree and micro-batch. Sensitivities (never
  used to choose, reported beside): ``--precision fp16`` (the model in fp16 with fp32 master weights, as Megatron's
  ``--fp16`` runs it), ``--kernels compiled`` (Megatron's fused kernels), ``--device A100-SXM4-40GB``.
- Goal (issue 17): <= 10% MAPE; vTrain itself reports 14.7% on these runs.

    PYTHONPATH=src python benchmarks/parallel_vtrain_multi.py [--precision fp16] [--kernels compiled]
                                                              [--device A100-SXM4-40GB] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from parallel_vtrain import forecast_rows as vtrain_forecast_rows, summarize  # noqa: E402

DATA = HERE / "data" / "vtrain_multi" / "ground_truth_multi.csv"
NODE_GPUS = 8
INTER_NODE_GBIT = 800.0  # per node (the configs' inter_node_bandwidth, Gbps)


def load_rows(path: Path = DATA) -> list[dict]:
    rows = []
    with open(path) as f:
        rd = csv.reader(f)
        next(rd)
        for r in rd:
            if not r:
                continue
            b, g, gbs, mb, h, a, L, s, tp, dp, pp, ms = r
            rows.append(dict(params_b=float(b), gpus=int(g), gbs=int(gbs), mb=int(mb), h=int(h), a=int(a), L=int(L),
                             s=int(s), tp=int(tp), dp=int(dp), pp=int(pp), measured_ms=float(ms)))
    return rows


def cluster_of(dev, r: dict):
    """The row's GPUs, 8 a node, 800 Gb/s a node between nodes (the protocol's cluster)."""
    from traincast.hardware.records import Cluster

    return Cluster(dev, gpus_per_node=NODE_GPUS, nodes=r["gpus"] // NODE_GPUS, inter_node_gbit_per_s=INTER_NODE_GBIT)


def forecast_rows(rows: list[dict], device: str = "A100-SXM4-80GB", precision: str = "amp-fp16",
                  kernels: str = "eager") -> list[dict]:
    """Each row with the forecast iteration (ms), its signed error (%) and whether it fits, under the protocol:
    ``parallel_vtrain.forecast_rows`` (eager attention, full recomputation, the row's micro-batch, no gradient
    overlap) on the multi-node cluster."""
    return vtrain_forecast_rows(rows, device, "eager", "full", False, precision, kernels, cluster_of=cluster_of)


def report(recs: list[dict]) -> None:
    errs = [x["err"] for x in recs]
    absr = sorted(abs(e) for e in errs)
    print(f"MAPE {statistics.mean(absr):.1f}%  median signed error {statistics.median(errs):+.1f}%  "
          f"p90 |error| {absr[int(0.9 * (len(absr) - 1))]:.1f}%  within 10%: "
          f"{100 * sum(a <= 10 for a in absr) / len(absr):.0f}% of rows; forecast out of memory: "
          f"{sum(not x['fits'] for x in recs)}")
    for label, key in (("model", lambda r: r["params_b"]), ("GPUs", lambda r: r["gpus"]),
                       ("tensor", lambda r: r["tp"]), ("pipeline", lambda r: r["pp"]), ("data", lambda r: r["dp"]),
                       ("micro-batch", lambda r: r["mb"])):
        parts = [f"{k}: {m:.1f}% ({md:+.1f}%, n={n})" for k, n, m, md in summarize(recs, key)]
        print(f"  by {label:11s} " + "; ".join(parts))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="A100-SXM4-80GB")
    ap.add_argument("--precision", default="amp-fp16", choices=("amp-fp16", "fp16"))
    ap.add_argument("--kernels", default="eager", choices=("eager", "compiled"))
    ap.add_argument("--rows", type=int, default=0, help="only the first N rows (quick look)")
    ap.add_argument("--csv", default=None, help="write every row with its forecast here")
    args = ap.parse_args(argv)
    rows = load_rows()
    if args.rows:
        rows = rows[: args.rows]
    t0 = time.perf_counter()
    recs = forecast_rows(rows, args.device, args.precision, args.kernels)
    print(f"vTrain multi-node rows: {len(recs)} on {args.device} ({NODE_GPUS} a node, {INTER_NODE_GBIT:.0f} Gb/s a "
          f"node), precision {args.precision}, kernels {args.kernels} ({time.perf_counter() - t0:.0f} s)")
    report(recs)
    print(f"{'model':>6} {'GPUs':>5} {'tp':>3} {'pp':>3} {'dp':>3} {'mb':>3} {'measured':>9} {'forecast':>9} {'error':>7}")
    for r in recs:
        print(f"{r['params_b']:6.1f} {r['gpus']:5d} {r['tp']:3d} {r['pp']:3d} {r['dp']:3d} {r['mb']:3d} "
              f"{r['measured_ms']:9.1f} {r['predicted_ms']:9.1f} {r['err']:+6.1f}%" + ("" if r["fits"] else "  OOM"))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(recs[0]))
            w.writeheader()
            w.writerows(recs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
