"""Forecast whole published pre-training runs (LLaMA 7B-65B, Llama 2 7B-70B, BLOOM 176B) from their papers' own
figures, and compare the training throughput: tokens per second per GPU = tokens / GPU-hours / 3600.

Protocol (written 2026-11-28 at 01:20 UTC, before any of these rows was forecast; nothing is fitted to them):

- Rows: ``benchmarks/data/published_runs/runs.yaml`` (each figure's source in it). The models by name from
  ``traincast.workload.llms`` (their published shapes), the row's sequence length and global batch (sequences).
- What a user of traincast would do: the fastest layout ``traincast parallelize`` finds that fits (tensor,
  pipeline, data and context degrees, ZeRO, micro-batch, recomputation, schedule) on the row's GPUs, with the
  published tensor and pipeline degrees where the paper gives them (BLOOM: 4 x 12); precision ``amp-bf16``;
  AdamW; kernels ``compiled`` (every one of these runs used fused kernels: xformers and Megatron-style fusions);
  attention as each source builds it (flash); 8 GPUs a node; the row's inter-node network; the default predictor.
- Forecast throughput = global batch x sequence / forecast iteration / GPUs. Error = forecast / published - 1
  (+: forecast faster than the run).
- Two kinds of published figure, reported apart and together: LLaMA's GPU-hours are tokens over the steady
  throughput (the 65B's 380 tokens/s/GPU gives its Table 15 figure), so they compare with the step time alone;
  Llama 2's and BLOOM's are GPUs x wall-clock hours (``wall_clock``), which include evaluation, checkpoints,
  restarts after failures and BLOOM's batch ramp-up, none of which traincast forecasts: those rows are
  expected to read fast by that share, and it is reported, not corrected.
- Reported: per row, the layout chosen and the error; MAPE and median signed error over the steady rows, the
  wall-clock rows, and all. No goal is set by this script; issue 17's is 10%.

    PYTHONPATH=src .venv/bin/python benchmarks/published_runs.py [--only ID[,ID...]]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "published_runs" / "runs.yaml"
PRECISION, KERNELS, OPTIMIZER = "amp-bf16", "compiled", "adamw"


def rows() -> list[dict]:
    from traincast import yamlio

    return yamlio.safe_load(DATA.read_text())["runs"]


def forecast_row(r: dict):
    """(the layout's step, seconds it took to find) for row ``r`` under the protocol."""
    from traincast.errors import TraincastError
    from traincast.hardware import get_catalog
    from traincast.hardware.records import Cluster
    from traincast.predict.compose import WorkloadFamily
    from traincast.predict.parallel import ParallelModel
    from traincast.predict.parallel.search import enumerate_layouts, search
    from traincast.predict.registry import default_predictor

    t0 = time.perf_counter()
    dev = get_catalog().device(r["gpu"])
    gpus = int(r["gpus"])
    fam = WorkloadFamily(r["model"], optimizer=OPTIMIZER, precision=PRECISION, seq_len=int(r["seq"]), kernels=KERNELS)
    cl = Cluster(dev, gpus_per_node=min(8, gpus), nodes=max(1, gpus // 8),
                 inter_node_gbit_per_s=float(r["network_gbit"]))
    pm = ParallelModel(fam, dev, cl, default_predictor(), PRECISION)
    batch = int(r["batch"])
    if "tp" not in r:
        res = search(pm, gpus, batch, top=3)
        if res.best is None:
            return None, time.perf_counter() - t0
        cfg = res.best.config
        return pm.evaluate(cfg, batch // cfg.dp, simulate_pipeline=True), time.perf_counter() - t0
    best = None
    for cfg, per_replica in enumerate_layouts(pm, gpus, batch):
        if cfg.tp != int(r["tp"]) or cfg.pp != int(r["pp"]):
            continue
        try:
            st = pm.evaluate(cfg, per_replica, simulate_pipeline=False)
        except TraincastError:
            continue
        if st.fits_in_memory and (best is None or st.iteration_s < best.iteration_s):
            best = st
    if best is None:
        return None, time.perf_counter() - t0
    return pm.evaluate(best.config, best.per_replica_batch, simulate_pipeline=True), time.perf_counter() - t0


def summary(label: str, errs: list[float]) -> None:
    if not errs:
        return
    print(f"{label}: MAPE {statistics.mean(abs(e) for e in errs):.1f}%, median signed {statistics.median(errs):+.1f}%, "
          f"worst {max(errs, key=abs):+.1f}% (n={len(errs)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated row ids")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    print(f"protocol: precision {PRECISION}, kernels {KERNELS}, {OPTIMIZER}; throughput in tokens/s/GPU; "
          "error = forecast / published - 1")
    print(f"{'run':<12} {'GPUs':>5} {'published':>9} {'forecast':>8} {'error':>7}  kind       layout")
    steady, wall = [], []
    for r in rows():
        if only and r["id"] not in only:
            continue
        pub = float(r["tokens"]) / float(r["gpu_hours"]) / 3600
        st, took = forecast_row(r)
        if st is None:
            print(f"{r['id']:<12} {r['gpus']:>5} {pub:9.0f}  no layout fits")
            continue
        fc = int(r["batch"]) * int(r["seq"]) / st.iteration_s / int(r["gpus"])
        e = 100 * (fc / pub - 1)
        kind = "wall-clock" if r.get("wall_clock") else "steady"
        (wall if r.get("wall_clock") else steady).append(e)
        print(f"{r['id']:<12} {r['gpus']:>5} {pub:9.0f} {fc:8.0f} {e:+6.1f}%  {kind:<10} {st.config.label()} "
              f"({st.iteration_s:.2f} s a step, {st.peak_memory_bytes / 2**30:.1f} GiB; {took:.0f} s)", flush=True)
    summary("steady-throughput rows (LLaMA)", steady)
    summary("wall-clock rows (Llama 2, BLOOM)", wall)
    summary("all rows", steady + wall)


if __name__ == "__main__":
    main()
