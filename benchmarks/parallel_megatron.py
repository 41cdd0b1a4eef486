"""Forecast published Megatron-LM runs on up to 3,072 A100s and compare: Narayanan et al. 2021 Table 1 (achieved
TFLOP/s per GPU, 1.7B to 1T parameters) and Korthikanti et al. 2022 (iteration time with full recomputation and
with sequence parallelism + selective recomputation, 22B to 1T).

Protocol (written 2026-11-25 before these forecasts were run; nothing is fitted to these rows):

- Tables: ``benchmarks/data/megatron/narayanan2021_table1.csv`` and ``korthikanti2022_table5.csv`` (sources in
  their headers).
- Model: a GPT traced from a Hugging Face GPT-2 config with the row's hidden size, heads and layers, sequence
  2,048, vocabulary 51,200, GELU, **fused attention** (one attention kernel; Megatron ran a fused
  scale-mask-softmax between two batched GEMMs, closer at the margin to one fused kernel than to Hugging Face's
  eager chain of fp32 element-wise kernels, as the vTrain per-sample slopes in docs/parallel.md show),
  precision ``amp-fp16``, Adam. Sensitivity (beside, never to choose): ``--attention eager``; added 2026-11-26
  after the protocol's runs, with the precision that describes Megatron's ``--fp16`` (the model in fp16, fp32
  master weights): ``--precision fp16``.
- Hardware: Selene, A100-SXM4-80GB, 8 per node, 8 x 200 Gb/s InfiniBand per node (1,600 Gb/s), the fitted
  collective model.
- Narayanan Table 1: the table's tensor and pipeline degrees, data degree = GPUs / (tp x pp), the table's batch;
  full recomputation (the paper's FLOP count includes it), no gradient all-reduce overlap (Megatron 2021), no
  ZeRO, no sequence parallelism. The micro-batch and schedule are not in the table: the fastest that fits of
  micro-batch 1/2/4/8 and 1F1B / interleaved with 2 or 4 chunks (where layers and micro-batches divide), as a
  user tuning Megatron would. Forecast TFLOP/s per GPU = the paper's eq. 3 FLOPs / (forecast iteration x GPUs).
- Korthikanti: the row's layout (tensor, pipeline, batch, micro-batch, interleaving); ``full`` = full
  recomputation, tensor-parallel all-reduces; ``selective`` = selective recomputation + sequence parallelism.
- Reported: error per row, MAPE, median signed error, by model size; and the forecast selective/full speed-up vs
  the published one.
- Goal (issue 17): within 10%.

    python benchmarks/parallel_megatron.py [--table narayanan|korthikanti|both] [--attention fused|eager]
                                           [--precision amp-fp16|fp16]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent / "data" / "megatron"
SEQ, VOCAB = 2048, 51200


def read(name: str) -> list[dict]:
    with open(HERE / name) as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    return list(csv.DictReader(lines))


def config(h: int, a: int, layers: int, attention: str) -> dict:
    d = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": h, "n_head": a, "n_layer": layers,
         "n_positions": SEQ, "n_ctx": SEQ, "vocab_size": VOCAB, "activation_function": "gelu",
         "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    if attention == "eager":
        d["attn_implementation"] = "eager"
    return d


def paper_flops(batch: int, layers: int, h: int) -> float:
    """Narayanan et al. 2021 eq. 3 (with recomputation)."""
    return 96 * batch * SEQ * layers * h * h * (1 + SEQ / (6 * h) + VOCAB / (16 * layers * h))


PRECISION = "amp-fp16"
KERNELS = "eager"


def model_for(tmp: Path, h: int, a: int, layers: int, gpus: int, attention: str, exact: bool):
    from traincast.hardware import get_catalog
    from traincast.hardware.records import Cluster
    from traincast.predict.compose import WorkloadFamily
    from traincast.predict.parallel import ParallelModel
    from traincast.predict.registry import default_predictor

    p = tmp / f"gpt_h{h}_a{a}_l{layers}.json"
    p.write_text(json.dumps(config(h, a, layers, attention)))
    dev = get_catalog().device("A100-SXM4-80GB")
    fam = WorkloadFamily(str(p), optimizer="adam", precision=PRECISION, seq_len=SEQ, kernels=KERNELS)
    cl = Cluster(dev, gpus_per_node=min(8, gpus), nodes=max(1, gpus // 8), inter_node_gbit_per_s=1600)
    return ParallelModel(fam, dev, cl, default_predictor(), PRECISION, exact_traces=exact)


def narayanan(attention: str, tmp: Path) -> list[float]:
    from traincast.errors import TraincastError
    from traincast.predict.parallel import ParallelConfig

    errs = []
    print(f"Narayanan et al. 2021 Table 1 (achieved TFLOP/s per GPU), attention {attention}:")
    print(f"  {'model':>8} {'GPUs':>5} {'tp':>3} {'pp':>3} {'dp':>4} {'batch':>5}  {'published':>9} {'forecast':>8} "
          f"{'error':>7}  layout chosen")
    for r in read("narayanan2021_table1.csv"):
        h, a, L = int(r["hidden"]), int(r["heads"]), int(r["layers"])
        tp, pp, gpus, B = int(r["tp"]), int(r["pp"]), int(r["gpus"]), int(r["batch"])
        dp = gpus // (tp * pp)
        t0 = time.perf_counter()
        pm = model_for(tmp, h, a, L, gpus, attention, exact=False)
        per_replica = B // dp
        best = None
        for mb in (1, 2, 4, 8):
            if per_replica % mb:
                continue
            m = per_replica // mb
            scheds = [("1f1b", 1)] + ([("interleaved", v) for v in (2, 4) if L % (pp * v) == 0 and m % pp == 0]
                                      if pp > 1 else [])
            for name, v in scheds:
                cfg = ParallelConfig(tp=tp, pp=pp, dp=dp, micro_batch=mb, schedule=name, virtual_stages=v,
                                     recompute="full", overlap_grad_sync=False)
                try:
                    st = pm.evaluate(cfg, per_replica, simulate_pipeline=False)
                except TraincastError:
                    continue
                if st.fits_in_memory and (best is None or st.iteration_s < best.iteration_s):
                    best = st
        if best is None:
            print(f"  {r['params_billion']:>7}B: no layout fits")
            continue
        best = pm.evaluate(best.config, per_replica, simulate_pipeline=True)
        tflops = paper_flops(B, L, h) / best.iteration_s / gpus / 1e12
        pub = float(r["achieved_tflops_per_gpu"])
        e = 100 * (tflops / pub - 1)
        errs.append(e)
        fl = best.flops_per_gpu / (paper_flops(B, L, h) / gpus)
        print(f"  {r['params_billion']:>7}B {gpus:5d} {tp:3d} {pp:3d} {dp:4d} {B:5d}  {pub:9.0f} {tflops:8.1f} {e:+6.1f}%  "
              f"{best.config.label()} ({best.pipeline_method}; executed FLOPs per GPU / eq. 3: {fl:.3f}; "
              f"{time.perf_counter() - t0:.0f} s)")
    print(f"  MAPE {statistics.mean(abs(x) for x in errs):.1f}%, median signed error {statistics.median(errs):+.1f}%, "
          f"worst {max(errs, key=abs):+.1f}% (n={len(errs)})")
    return errs


def korthikanti(attention: str, tmp: Path) -> list[float]:
    from traincast.predict.parallel import ParallelConfig

    rows = read("korthikanti2022_table5.csv")
    errs = []
    out = {}
    print(f"Korthikanti et al. 2022 (iteration time, s), attention {attention}:")
    print(f"  {'model':>5} {'mode':>9} {'published':>9} {'forecast':>8} {'error':>7}  memory/GPU")
    models = {}
    for r in rows:
        h, a, L = int(r["hidden"]), int(r["heads"]), int(r["layers"])
        tp, pp, gpus, B, mb, v = (int(r[k]) for k in ("tp", "pp", "gpus", "batch", "micro_batch", "interleave"))
        key = (h, a, L, gpus)
        if key not in models:
            models[key] = model_for(tmp, h, a, L, gpus, attention, exact=True)
        sel = r["mode"] == "selective"
        cfg = ParallelConfig(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=mb,
                             schedule="interleaved" if v > 1 else "1f1b", virtual_stages=v,
                             recompute="selective" if sel else "full", sequence_parallel=sel, overlap_grad_sync=False)
        st = models[key].evaluate(cfg, B)
        pub = float(r["iteration_s"])
        e = 100 * (st.iteration_s / pub - 1)
        errs.append(e)
        out[(r["model"], r["mode"])] = (pub, st.iteration_s)
        print(f"  {r['model']:>5} {r['mode']:>9} {pub:9.2f} {st.iteration_s:8.2f} {e:+6.1f}%  "
              f"{st.peak_memory_bytes / 2**30:.1f} GiB{'' if st.fits_in_memory else ' (does not fit)'} "
              f"[{st.pipeline_method}]")
    print(f"  MAPE {statistics.mean(abs(x) for x in errs):.1f}%, median signed error {statistics.median(errs):+.1f}% "
          f"(n={len(errs)})")
    for m in ("22B", "175B", "530B", "1T"):
        if (m, "full") in out and (m, "selective") in out:
            pf, ff = out[(m, "full")]
            ps, fs = out[(m, "selective")]
            print(f"  {m}: speed-up of selective + sequence parallel over full recomputation: published "
                  f"{pf / ps:.3f}x, forecast {ff / fs:.3f}x")
    return errs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", default="both", choices=("narayanan", "korthikanti", "both"))
    ap.add_argument("--attention", default="fused", choices=("fused", "eager"))
    ap.add_argument("--precision", default="amp-fp16", choices=("amp-fp16", "fp16"),
                    help="amp-fp16 (the protocol's); fp16: the model in fp16 with fp32 master weights, as Megatron's "
                         "--fp16 ran (a sensitivity added 2026-11-26 with that precision, after the protocol's run)")
    ap.add_argument("--kernels", default="eager", choices=("eager", "compiled"),
                    help="eager (the protocol's) or compiled: element-wise chains fused (workload/fusion.py), as "
                         "Megatron's fused kernels run them (a sensitivity added 2026-11-26 with the fusion model)")
    args = ap.parse_args()
    global PRECISION, KERNELS
    PRECISION, KERNELS = args.precision, args.kernels
    tmp = Path(tempfile.mkdtemp(prefix="megatron_cfg_"))
    if args.table in ("narayanan", "both"):
        narayanan(args.attention, tmp)
    if args.table in ("korthikanti", "both"):
        korthikanti(args.attention, tmp)


if __name__ == "__main__":
    main()
