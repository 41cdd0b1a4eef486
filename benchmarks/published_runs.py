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

Addendum (written 2026-11-28 at 03:45 UTC, before the wall clock below was computed for any row; the errors of
the steady forecasts above were known, from the run of 01:20): traincast now forecasts the expected wall clock
with failures, restarts and checkpoints (``traincast.predict.goodput``). Each wall-clock row is also scored
with it, on the defaults and nothing else: 50,677 GPU-hours between interruptions per GPU (Llama 3's 16,384
H100s, a different run from every row here), a 10-minute restart, checkpoints of the weights and AdamW's state
at 0.122 GB/s per GPU, the interval that minimises the wall clock. Forecast wall-clock throughput = tokens /
(expected wall clock x GPUs). Reported beside the steady forecast's error, with MAPE and median; a
sensitivity with Meta's research-cluster rate (Kokolis et al. 2025: 7.9 h between failures of a 1,024-GPU job,
8,090 GPU-hours) is printed too and not used to choose. Expected before running: at 2,048 GPUs the default
rate interrupts the job once a day, so the wall clock moves the forecast by 1-3%, far less than the +11% to
+38% the steady forecasts read.

Addendum 2 (written 2026-11-28 at 03:57 UTC, before any of these rows was forecast under it): Llama 3 405B's
pre-training layouts (Llama 3 Herd of Models, Table 4, checked against Balaji's SC'24 slide): 8,192 H100s at
tensor 8 x context 1 x pipeline 16 x data 64, 430 TFLOP/s per GPU; 16,384 at data 128, 400; 16,384 at context 16
x data 8 with 131,072-token sequences, 380; each 16M tokens a batch, 400 Gb/s RoCE a GPU (3,200 Gb/s a node).
The published figure is model TFLOP/s per GPU (BF16 MFU 43%, 41%, 38%), so the forecast's is compared: the
traced forward and backward FLOPs of the global batch, recomputation not counted, over the forecast iteration and
the GPUs. The convention for causal attention is not published: the trace counts the whole score matrix (what
PyTorch's FLOP counter does); the figure with half of the attention core's FLOPs is printed beside it. The
131,072-token row is printed and not scored: there the attention core is over half of the FLOPs, so the two
conventions differ by about a third. Layout as the other published-degree rows (BLOOM): tensor, pipeline and
context degrees as published, the rest (ZeRO stage, micro-batch, recomputation, schedule, sequence parallelism)
the fastest that fits. Seen before this addendum: one exploratory `predict llama-3.1-405b` on 16,384 H100s with
another network (the a3-highgpu-8g instance's), no ZeRO and interleaved:7, out of memory, about 100 TFLOP/s per
GPU. Expected before running: within 15% on the two 8K rows.

    PYTHONPATH=src .venv/bin/python benchmarks/published_runs.py [--only ID[,ID...]]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "published_runs" / "runs.yaml"
PRECISION, KERNELS, OPTIMIZER = "amp-bf16", "compiled", "adamw"
TP_COMM_OVERLAP = False  # the protocol's; --tp-comm-overlap for a sensitivity


def rows() -> list[dict]:
    from traincast import yamlio

    return yamlio.safe_load(DATA.read_text())["runs"]


@functools.cache
def _family(row_id: str, model: str, seq: int, precision: str, kernels: str):
    from traincast.predict.compose import WorkloadFamily

    # the protocol's "attention as each source builds it (flash)": pinned since PyTorch's SDPA prefers cuDNN's kernel
    # on Hopper (traincast --sdpa, 2026-11-28), which these runs' stacks did not run
    return WorkloadFamily(model, optimizer=OPTIMIZER, precision=precision, seq_len=seq, kernels=kernels, sdpa="flash")


def family(r: dict):
    """Row ``r``'s traces under the run's precision and kernels: one family per row (rows of one model do not share
    traces, as each row's forecast starts from none), shared by its forecast, its model FLOPs and its checkpoint."""
    return _family(r["id"], r["model"], int(r["seq"]), PRECISION, KERNELS)


def forecast_row(r: dict):
    """(the layout's step, seconds it took to find) for row ``r`` under the protocol."""
    from traincast.errors import TraincastError
    from traincast.hardware import get_catalog
    from traincast.hardware.records import Cluster
    from traincast.predict.parallel import ParallelModel
    from traincast.predict.parallel.search import enumerate_layouts, search
    from traincast.predict.registry import default_predictor

    t0 = time.perf_counter()
    dev = get_catalog().device(r["gpu"])
    gpus = int(r["gpus"])
    fam = family(r)
    cl = Cluster(dev, gpus_per_node=min(8, gpus), nodes=max(1, gpus // 8),
                 inter_node_gbit_per_s=float(r["network_gbit"]))
    pm = ParallelModel(fam, dev, cl, default_predictor(), PRECISION)
    batch = int(r["batch"])
    if "tp" not in r:
        res = search(pm, gpus, batch, top=3, tp_comm_overlap=TP_COMM_OVERLAP)
        if res.best is None:
            return None, time.perf_counter() - t0
        cfg = res.best.config
        return pm.evaluate(cfg, batch // cfg.dp, simulate_pipeline=True), time.perf_counter() - t0
    best = None
    cp = int(r.get("cp", 1))
    for cfg, per_replica in enumerate_layouts(pm, gpus, batch, context=(cp,), tp_comm_overlap=TP_COMM_OVERLAP):
        if cfg.tp != int(r["tp"]) or cfg.pp != int(r["pp"]) or cfg.cp != cp:
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


def model_tflops_per_gpu(r: dict, st) -> tuple[float, float]:
    """(forecast model TFLOP/s per GPU, the same with half of the attention core's FLOPs) of row ``r`` whose step
    is ``st``: the traced forward and backward FLOPs of the global batch over the iteration and the GPUs."""
    wl = family(r).trace(1)
    per_sample = wl.model_flops()
    attention = sum(o.flops for o in wl.ops if o.op_class == "attention" and o.phase in ("forward", "backward"))
    scale = int(r["batch"]) / st.iteration_s / int(r["gpus"]) / 1e12
    return per_sample * scale, (per_sample - attention / 2) * scale


def checkpoint_state(r: dict) -> int:
    """The bytes a checkpoint of row ``r``'s training state holds: the weights and AdamW's state, whole model."""
    from traincast.predict.goodput import checkpoint_bytes

    m = family(r).trace(1).memory
    return checkpoint_bytes(m.parameter_bytes, m.optimizer_state_bytes)


def wall_clock_throughput(r: dict, st, rel) -> tuple[float, float]:
    """(forecast tokens/s/GPU over the expected wall clock, goodput) of row ``r`` whose step is ``st``."""
    from traincast.predict.goodput import wall_clock

    gpus = int(r["gpus"])
    steps = float(r["tokens"]) / (int(r["batch"]) * int(r["seq"]))
    w = wall_clock(steps * st.iteration_s, gpus=gpus, iteration_s=st.iteration_s, state_bytes=checkpoint_state(r),
                   rel=rel)
    return float(r["tokens"]) / w.wall_s / gpus, w.goodput


def summary(label: str, errs: list[float]) -> None:
    if not errs:
        return
    print(f"{label}: MAPE {statistics.mean(abs(e) for e in errs):.1f}%, median signed {statistics.median(errs):+.1f}%, "
          f"worst {max(errs, key=abs):+.1f}% (n={len(errs)})")


def main() -> None:
    global PRECISION, KERNELS, TP_COMM_OVERLAP
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated row ids")
    ap.add_argument("--precision", default="amp-bf16", help="a sensitivity, not the protocol: e.g. bf16 (the model "
                    "in bf16 with fp32 master weights, as Megatron and FSDP's mixed precision train)")
    ap.add_argument("--kernels", default="compiled", help="a sensitivity, not the protocol: e.g. transformer-engine")
    ap.add_argument("--tp-comm-overlap", action="store_true", help="a sensitivity, not the protocol: layouts with "
                    "sequence parallelism overlap its collectives with the GEMMs (Megatron-Core userbuffers)")
    args = ap.parse_args()
    PRECISION, KERNELS, TP_COMM_OVERLAP = args.precision, args.kernels, args.tp_comm_overlap
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    label = ("protocol" if (PRECISION, KERNELS, TP_COMM_OVERLAP) == ("amp-bf16", "compiled", False)
             else "sensitivity (not the protocol)")
    print(f"{label}: precision {PRECISION}, kernels {KERNELS}, {OPTIMIZER}"
          + (", tensor-parallel collectives overlapped" if TP_COMM_OVERLAP else "") + "; throughput in tokens/s/GPU; "
          "error = forecast / published - 1")
    print(f"{'run':<12} {'GPUs':>5} {'published':>9} {'forecast':>8} {'error':>7}  kind       layout")
    from dataclasses import replace

    from traincast.predict.goodput import Reliability

    rel = Reliability.defaults()
    kokolis = replace(rel, gpu_mtbf_hours=7.9 * 1024)
    steady, wall, wall_gp, wall_kk, tflops = [], [], [], [], []
    for r in rows():
        if only and r["id"] not in only:
            continue
        if "tflops_per_gpu" in r:  # addendum 2: model TFLOP/s per GPU
            pub = float(r["tflops_per_gpu"])
            st, took = forecast_row(r)
            if st is None:
                print(f"{r['id']:<12} {r['gpus']:>5} {pub:9.0f}  no layout fits")
                continue
            fc, half = model_tflops_per_gpu(r, st)
            e, eh = 100 * (fc / pub - 1), 100 * (half / pub - 1)
            if r.get("scored", True):
                tflops.append(e)
            print(f"{r['id']:<12} {r['gpus']:>5} {pub:9.0f} {fc:8.0f} {e:+6.1f}%  TFLOP/s    {st.config.label()} "
                  f"({st.iteration_s:.2f} s a step, {st.peak_memory_bytes / 2**30:.1f} GiB; {took:.0f} s; causal "
                  f"half of the attention core: {half:.0f}, {eh:+.1f}%"
                  + ("" if r.get("scored", True) else "; not scored") + ")", flush=True)
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
        if r.get("wall_clock"):
            fw, gp = wall_clock_throughput(r, st, rel)
            fk, gk = wall_clock_throughput(r, st, kokolis)
            wall_gp.append(100 * (fw / pub - 1))
            wall_kk.append(100 * (fk / pub - 1))
            print(f"{'':<12} {'':>5} {'':>9} {fw:8.0f} {wall_gp[-1]:+6.1f}%  with failures, restarts and checkpoints "
                  f"(goodput {100 * gp:.1f}%; at Meta's research-cluster rate {fk:.0f}, {wall_kk[-1]:+.1f}%, goodput "
                  f"{100 * gk:.1f}%)", flush=True)
    summary("steady-throughput rows (LLaMA)", steady)
    summary("wall-clock rows (Llama 2, BLOOM)", wall)
    summary("wall-clock rows, expected wall clock with failures (defaults)", wall_gp)
    summary("wall-clock rows, expected wall clock at the research-cluster rate (sensitivity)", wall_kk)
    summary("Llama 3 405B, model TFLOP/s per GPU (8K rows)", tflops)
    summary("all rows", steady + wall)


if __name__ == "__main__":
    main()
