"""Forecast the vTrain single-node measurements (1,440 Megatron GPT iterations on 2/4/8 A100 with tensor, data
and pipeline parallel degrees) analytically, and report the error.

Protocol (written 2026-11-25, before any forecast of these rows was looked at; nothing is fitted to them):

- Rows: every row of ``../shared/data/models/vtrain_a100_single_node.csv`` (VIA-Research/vTrain, MICRO'24).
- Model: vTrain's ``ShardedGptModel`` is a Megatron GPT (learned positions, pre-norm layers, GELU MLP of 4h,
  dropout 0.1, vocabulary 50,257, fp16). Traced from a Hugging Face GPT-2 config with the row's hidden size,
  heads, layers and sequence length, ``activation_function: gelu`` (Megatron's fused bias-GELU is one kernel,
  not GPT-2's tanh chain) and ``attn_implementation: eager`` (Megatron's fused scale-mask-softmax, not flash
  attention); precision ``amp-fp16``, optimizer Adam.
- Layout: the row's tensor, pipeline and data degrees and micro-batch (Megatron semantics: global batch / (data
  degree x micro-batch) micro-batches per step), 1F1B; **full activation recomputation** and **no overlap of the
  gradient all-reduce with the backward pass**, as vTrain's own validation configs for these runs say
  (``config/validation/single/*.json``: ``use_checkpoint: true``, ``use_gradient_bucket: false``).
- Hardware: ``A100-SXM4-80GB`` (the data does not say 40 or 80 GB; NVSwitch, as vTrain's own all-reduce
  measurements show), the row's GPUs in one node. The analytical predictor with the catalog's defaults and
  the collective model fitted to the shared NCCL data (``collectives.yaml``).
- Reported: MAPE, median signed error (bias), 90th percentile of |error|, and both by GPUs, tensor, pipeline and
  data degree, hidden size, layers and micro-batch. Sensitivity runs (reported beside, never used to choose):
  ``--device A100-SXM4-40GB``; ``--pp1-whole-batch`` (pipeline-free rows with the whole per-replica batch as one
  micro-batch, as vTrain's simulator config does); ``--recompute none``.
- Goal (issue 17): <= 10% MAPE (vTrain itself: 8.4%).

    python benchmarks/parallel_vtrain.py [--device A100-SXM4-40GB] [--recompute none] [--pp1-whole-batch]
                                         [--attention fused] [--precision fp16] [--host-scale K] [--slopes] [--rows N]
                                         [--csv out.csv]
                                         [--plot out.png]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "models" / "vtrain_a100_single_node.csv"


def gpt_config(h: int, a: int, layers: int, seq: int, vocab: int = 50257, attention: str = "eager") -> dict:
    d = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": h, "n_head": a, "n_layer": layers,
         "n_positions": seq, "n_ctx": seq, "vocab_size": vocab, "activation_function": "gelu",
         "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5,
         "tie_word_embeddings": True}
    if attention == "eager":
        d["attn_implementation"] = "eager"
    return d


def load_rows() -> list[dict]:
    rows = []
    with open(DATA) as f:
        for r in csv.reader(f):
            if not r or r[0].startswith("#"):
                continue
            g, gbs, mb, h, a, L, s, tp, dp, pp, ms = r
            rows.append(dict(gpus=int(g), gbs=int(gbs), mb=int(mb), h=int(h), a=int(a), L=int(L), s=int(s),
                             tp=int(tp), dp=int(dp), pp=int(pp), measured_ms=float(ms)))
    return rows


def forecast_rows(rows: list[dict], device: str = "A100-SXM4-80GB", attention: str = "eager", recompute: str = "full",
                  pp1_whole_batch: bool = False, precision: str = "amp-fp16", kernels: str = "eager",
                  host_scale: float = 1.0, cluster_of=None) -> list[dict]:
    """Each row with the forecast iteration (ms) and its signed error (%) added, under this file's protocol.
    ``host_scale``: the host's issue costs at that multiple of the catalog's (a sensitivity). ``cluster_of``: the
    ``Cluster`` of a row given the device and the row (default: the row's GPUs in one node)."""
    from traincast.hardware import get_catalog
    from traincast.hardware.records import Cluster
    from traincast.predict.compose import WorkloadFamily
    from traincast.predict.parallel import ParallelConfig, ParallelModel
    from traincast.predict.registry import default_predictor

    dev = get_catalog().device(device)
    pred = default_predictor()
    if host_scale != 1.0:
        from traincast.predict.host import WithHost
        from traincast.predict.roofline import RooflineParams

        cat_host = RooflineParams.for_device(dev)
        pred = WithHost(pred, cat_host.host_forward_us * host_scale, cat_host.host_backward_us * host_scale)
    tmp = Path(tempfile.mkdtemp(prefix="vtrain_cfg_"))
    families, models, recs = {}, {}, []
    for r in rows:
        key = (r["h"], r["a"], r["L"], r["s"])
        if key not in families:
            p = tmp / f"gpt_h{r['h']}_a{r['a']}_l{r['L']}_s{r['s']}.json"
            p.write_text(json.dumps(gpt_config(*key, attention=attention)))
            families[key] = WorkloadFamily(str(p), optimizer="adam", precision=precision, seq_len=r["s"],
                                           kernels=kernels)
        mkey = (key, r["gpus"])
        if mkey not in models:
            cl = cluster_of(dev, r) if cluster_of else Cluster(dev, gpus_per_node=r["gpus"], nodes=1)
            models[mkey] = ParallelModel(families[key], dev, cl, pred, precision)
        per_replica = r["gbs"] // r["dp"]
        mb = per_replica if (pp1_whole_batch and r["pp"] == 1) else r["mb"]
        cfg = ParallelConfig(tp=r["tp"], pp=r["pp"], dp=r["dp"], micro_batch=mb, recompute=recompute,
                             overlap_grad_sync=False)
        st = models[mkey].evaluate(cfg, per_replica)
        pred_ms = st.iteration_s * 1e3
        recs.append(dict(r, predicted_ms=pred_ms, err=100 * (pred_ms / r["measured_ms"] - 1),
                         fits=st.fits_in_memory, bubble=st.bubble_share))
    return recs


def slopes(recs: list[dict]) -> None:
    """Per model with tensor and pipeline degree 1: time per micro-batch = intercept + slope x micro-batch, least
    squares over its rows, measured and forecast (what is fixed per micro-batch and what grows with it)."""
    import numpy as np

    groups = defaultdict(list)
    for r in recs:
        if r["tp"] == 1 and r["pp"] == 1:
            m = r["gbs"] // r["dp"] // r["mb"]
            groups[(r["h"], r["L"])].append((r["mb"], r["measured_ms"] / m, r["predicted_ms"] / m))
    print("time per micro-batch = intercept + slope x micro-batch (tensor and pipeline degree 1):")
    for (h, L), pts in sorted(groups.items()):
        x = np.array([p[0] for p in pts], dtype=float)
        a = np.vstack([np.ones_like(x), x]).T
        (mi, ms), (fi, fs) = (np.linalg.lstsq(a, np.array([p[k] for p in pts]), rcond=None)[0] for k in (1, 2))
        print(f"  h {h}, {L} layers: measured {mi:6.1f} ms + {ms:5.1f} ms/sample; forecast {fi:6.1f} ms + "
              f"{fs:5.1f} ms/sample (n={len(pts)})")


def summarize(recs: list[dict], key) -> list[tuple]:
    groups = defaultdict(list)
    for r in recs:
        groups[key(r)].append(r["err"])
    out = []
    for k in sorted(groups):
        e = groups[k]
        out.append((k, len(e), statistics.mean(abs(x) for x in e), statistics.median(e)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="A100-SXM4-80GB")
    ap.add_argument("--recompute", default="full")
    ap.add_argument("--pp1-whole-batch", action="store_true")
    ap.add_argument("--attention", default="eager", choices=("eager", "fused"),
                    help="eager (the protocol: Megatron's unfused attention) or fused (one attention kernel)")
    ap.add_argument("--precision", default="amp-fp16", choices=("amp-fp16", "fp16"),
                    help="amp-fp16 (the protocol's) or fp16: the model in fp16 with fp32 master weights, as vTrain's "
                         "Megatron runs were (a sensitivity added 2026-11-26 with that precision, after the protocol's run)")
    ap.add_argument("--kernels", default="eager", choices=("eager", "compiled"),
                    help="eager (the protocol's) or compiled: element-wise chains fused (workload/fusion.py), as "
                         "Megatron's fused kernels run them (a sensitivity added 2026-11-26 with the fusion model)")
    ap.add_argument("--rows", type=int, default=0, help="only the first N rows (quick look)")
    ap.add_argument("--host-scale", type=float, default=1.0, help="sensitivity: the host's issue costs at this "
                    "multiple of the catalog's (chosen after the protocol's runs; never used to choose)")
    ap.add_argument("--slopes", action="store_true",
                    help="diagnosis: time per micro-batch vs micro-batch size (intercept and slope), measured and forecast")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()

    rows = load_rows()
    if args.rows:
        rows = rows[: args.rows]
    t0 = time.perf_counter()
    recs = forecast_rows(rows, args.device, args.attention, args.recompute, args.pp1_whole_batch, args.precision,
                         args.kernels, args.host_scale)
    elapsed = time.perf_counter() - t0
    errs = [x["err"] for x in recs]
    absr = sorted(abs(e) for e in errs)
    print(f"vTrain single-node rows: {len(recs)} on {args.device}, recompute {args.recompute}"
          + (", pipeline-free rows as one micro-batch" if args.pp1_whole_batch else "") + f" ({elapsed:.0f} s)")
    print(f"MAPE {statistics.mean(absr):.1f}%  median signed error {statistics.median(errs):+.1f}%  "
          f"p90 |error| {absr[int(0.9 * (len(absr) - 1))]:.1f}%  within 10%: "
          f"{100 * sum(a <= 10 for a in absr) / len(absr):.0f}% of rows; forecast out of memory: "
          f"{sum(not x['fits'] for x in recs)}")
    for label, key in (("GPUs", lambda r: r["gpus"]), ("tensor", lambda r: r["tp"]), ("pipeline", lambda r: r["pp"]),
                       ("data", lambda r: r["dp"]), ("hidden", lambda r: r["h"]), ("layers", lambda r: r["L"]),
                       ("micro-batch", lambda r: r["mb"])):
        parts = [f"{k}: {m:.1f}% ({md:+.1f}%, n={n})" for k, n, m, md in summarize(recs, key)]
        print(f"  by {label:11s} " + "; ".join(parts))
    if args.slopes:
        slopes(recs)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(recs[0]))
            w.writeheader()
            w.writerows(recs)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 5.5))
        for pp, c in ((1, "tab:blue"), (2, "tab:orange"), (4, "tab:green")):
            pts = [x for x in recs if x["pp"] == pp]
            ax.scatter([x["measured_ms"] for x in pts], [x["predicted_ms"] for x in pts], s=8, c=c, label=f"pp {pp}",
                       alpha=0.6)
        lo = min(min(x["measured_ms"], x["predicted_ms"]) for x in recs)
        hi = max(max(x["measured_ms"], x["predicted_ms"]) for x in recs)
        ax.plot([lo, hi], [lo, hi], "k-", lw=1)
        ax.plot([lo, hi], [lo * 1.1, hi * 1.1], "k:", lw=0.8)
        ax.plot([lo, hi], [lo / 1.1, hi / 1.1], "k:", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured iteration (ms)")
        ax.set_ylabel("forecast iteration (ms)")
        ax.set_title(f"vTrain single node, {len(recs)} Megatron runs: MAPE {statistics.mean(absr):.1f}%")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
