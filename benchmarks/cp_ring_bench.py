"""One context-parallel rank's attention work as PyTorch's ring attention runs it, timed on one lent GPU; or
(``--compare``) those times against traincast's forecast of the same attention.

Why (issue 22, docs/parallel.md): torchtitan's published Llama 3 8B long-context rows (8 H100s, FSDP x CP 1/2/4/8
at 32K/64K/128K/256K tokens, full recomputation, FP8; ``data/fp8_cp/published.yaml``) are forecast 6-8% fast at
32K and 64K and 55-73% fast at 128K and 256K, and nothing said why. The forecast prices a rank's attention as one
flash call over 1/C of the causal score matrix at the catalog's attention efficiency, with the K/V exchange
hidden under it. PyTorch's ring attention (``torch/distributed/tensor/experimental/_attention.py``, the code
torchtitan 2024-12 ran: ``_templated_ring_attention`` and its backward, options ``convert_to_f32=True``,
``enable_load_balance=True``, rotation ``ALL_GATHER`` forward and ``ALL_TO_ALL`` for dK/dV) does more than that:
C flash calls a pass on chunk shapes (the local causal block, then half-query or half-key blocks), an FP32 merge of
the outputs and log-sum-exps after every call (``_SDPAMerger``: casts, a sigmoid-weighted update, and for half-query
blocks a ``torch.cat`` of the whole FP32 output), and in the backward FP32 accumulators of dQ, dK, dV, a
``torch.cat`` of dK and dV every step (what is sent), and ``torch.cat`` partial updates.

What is measured: that algorithm, step by step as the source has it, for every rank of a ring of C, in lockstep on
one GPU: a rank's "received" K/V is the slice of the whole sequence the all-gather would give it, the dK/dV it
receives is what the rank before it sent (a Python reference: the communication itself is not run and not timed).
Llama 3 8B's attention: 32 query heads, head dim 128, K and V repeated to 32 heads (torchtitan's model calls
``repeat_kv`` before SDPA), batch 1, BF16, causal, load-balanced chunks (rank r holds chunks r and 2C-1-r of 2C).
Rows: (S, C) = (32768, 1), (65536, 2), (131072, 4), (262144, 8), torchtitan's rows; and the same C at S = 8192 x C
(8K tokens a rank) to separate the length from the ring. Per row: forward and backward of all C ranks, each
timed with CUDA events around the whole pass (divided by C: one rank's time; the ranks do equal work with load
balancing) and around every flash call (their sum: the kernels alone); the median of ``--reps`` passes after one
warm-up pass. Also a monolithic causal flash forward and backward over the whole sequence at C = 1's shapes (the
no-CP kernel at that length), and GPU power, SM and memory clocks sampled by ``nvidia-smi`` around the
rows (``--power``), with a BF16 GEMM loop as the reference load. Rows are appended to ``--out`` (JSON lines) as
measured; a second run skips rows already there.

Protocol, written before any of these was timed (2026-11-28, before the lease):
- Nothing in the catalog is set from the published torchtitan rows.
- Scored after the lease (``--compare FILE --gpu NAME``, on any machine): the forecast's attention time of one
  rank (``ParallelModel``'s per-layer attention forward and backward kernels at that C, one layer, batch 1, the
  catalog GPU named) against (a) the measured kernels alone and (b) the measured whole pass (kernels, merges,
  accumulators and copies); printed per row with the ratio, and the overhead share (b - a) / b.
- Decision rule: if the whole pass exceeds the forecast attention by more than 10% on the rows with C >= 4, the
  ring's own work is added to the forecast as a mechanism, in the source's form (per step: the FP32 merge and
  accumulator traffic and the copies, as element-wise passes at the roofline's bandwidth; the flash calls at their
  step shapes), kept if it brings the forecast of these measured rows within 10%, and the published rows of
  ``fp8_cp_validation.py`` are rerun once and reported before and after, whatever they say. If (a) alone explains
  the gap (the flash kernels at the step shapes are slower than the single-call forecast), the attention
  efficiency by shape is reported, not changed (the catalog's rule: docs/gpu-accuracy.md). If neither exceeds 10%,
  the published rows' miss is not the ring's compute on a 700 W GH100 (left: the exposed exchange, the 500 W power
  limit); said so, nothing changed.
- The power samples are reported (watts and SM clock under each load), nothing set from them.

Usage: python benchmarks/cp_ring_bench.py --out cp_ring.jsonl [--power power.csv] [--deadline 240]   (on the GPU)
       PYTHONPATH=src python benchmarks/cp_ring_bench.py --compare cp_ring.jsonl --gpu H200-SXM-141GB
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
HEADS, HEAD_DIM = 32, 128
ROWS = [(32768, 1), (65536, 2), (131072, 4), (262144, 8), (16384, 2), (32768, 4), (65536, 8)]
MODEL_CONFIG = HERE / "data" / "gpu_campaign" / "llama3-8b-shape-8-layers.json"


# --- the attention op, on CUDA (flash) or on a CPU (a dry run, and the tests) ---------------------------------
class Flash:
    """PyTorch's flash attention ops as ring attention calls them (``aten._scaled_dot_product_flash_attention``
    and its backward); on a CPU the ``_for_cpu`` pair, same maths."""

    def __init__(self, device: str, timer=None):
        import torch

        self.cuda = device.startswith("cuda")
        self.aten = torch.ops.aten
        self.timer = timer  # a callable(fn) -> result, timing the call (CUDA events), or None

    def _timed(self, fn):
        return self.timer(fn) if self.timer is not None else fn()

    def forward(self, q, k, v, causal: bool):
        a = self.aten
        if self.cuda:
            res = self._timed(lambda: a._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False))
            out, lse, *rest = res
            return out, lse, rest
        out, lse = self._timed(lambda: a._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal))
        return out, lse, None

    def backward(self, dout, q, k, v, out, lse, causal: bool, rest):
        a = self.aten
        if self.cuda:
            # the forward's (cum_seq_q, cum_seq_k, max_q, max_k, philox seed, offset); max_q/max_k: this block's
            cq, ck, seed, off = rest[0], rest[1], rest[4], rest[5]
            return self._timed(lambda: a._scaled_dot_product_flash_attention_backward(
                dout, q, k, v, out, lse, cq, ck, q.shape[2], k.shape[2], 0.0, causal, seed, off)[:3])
        return self._timed(lambda: a._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, causal)[:3])


# --- the source's algorithm --------------------------------------------------------------------------------------
def _partial_update(original, new, dim: int, idx: int, add: bool):
    import torch

    chunks = list(original.chunk(2, dim=dim))
    if add:
        chunks[idx] += new
    else:
        chunks[idx] = new
    return torch.cat(chunks, dim=dim)


class Merger:
    """``_SDPAMerger`` with ``convert_to_f32=True``."""

    def __init__(self):
        self.out = self.lse = None
        self.dtypes = None

    def step(self, out, lse, partial: bool) -> None:
        import torch
        import torch.nn.functional as F

        self.dtypes = (out.dtype, lse.dtype)
        out, lse = out.to(torch.float32), lse.to(torch.float32).unsqueeze(-1)
        if self.lse is None:
            self.out, self.lse = out, lse
            return
        o = self.out.chunk(2, dim=2)[1] if partial else self.out
        s = self.lse.chunk(2, dim=2)[1] if partial else self.lse
        o = o - F.sigmoid(lse - s) * (o - out)
        s = s - F.logsigmoid(s - lse)
        if partial:
            self.lse = _partial_update(self.lse, s, 2, 1, add=False)
            self.out = _partial_update(self.out, o, 2, 1, add=False)
        else:
            self.out, self.lse = o, s

    def results(self):
        return self.out.to(self.dtypes[0]), self.lse.squeeze(-1).to(self.dtypes[1])


def _behaviour(rank: int, i: int) -> str:
    """Which block step i of a load-balanced causal ring computes on ``rank``: the local causal block, all local
    queries against the first half of the keys (``i <= rank``), or the second half of the queries against all."""
    return "causal" if i == 0 else ("half-kv" if i <= rank else "half-q")


def local_chunks(x, c: int):
    """Each rank's load-balanced share of ``x`` [B, H, S, D]: chunks r and 2c-1-r of 2c, concatenated."""
    import torch

    parts = x.chunk(2 * c, dim=2)
    return [torch.cat([parts[r], parts[2 * c - 1 - r]], dim=2).contiguous() for r in range(c)]


def ring_forward(qs, ks, vs, flash: Flash):
    """All ranks' forward, in lockstep; returns (outs, lses, rests) per rank. The all-gather's buffer is modelled by
    the ranks' own K/V (what it would hold); the ``torch.cat`` of K and V that the source makes at every step but
    the last (its send buffer) is made, as there."""
    import torch

    c = len(qs)
    mergers, rests = [Merger() for _ in range(c)], [None] * c
    for i in range(c):
        for r in range(c):
            key, value = ks[(r - i) % c], vs[(r - i) % c]
            if i < c - 1:
                torch.cat([key.flatten(), value.flatten()])
            b = _behaviour(r, i)
            q, k, v, partial = qs[r], key, value, False
            if b == "half-kv":
                k, v = key.chunk(2, dim=2)[0], value.chunk(2, dim=2)[0]
            elif b == "half-q":
                q, partial = qs[r].chunk(2, dim=2)[1], True
            out, lse, rest = flash.forward(q, k, v, b == "causal")
            mergers[r].step(out, lse, partial)
            rests[r] = rest
    res = [m.results() for m in mergers]
    return [o for o, _ in res], [s for _, s in res], rests


def ring_backward(douts, qs, ks, vs, outs, lses, rests, flash: Flash):
    """All ranks' backward, in lockstep (``_templated_ring_attention_backward``): FP32 dQ/dK/dV accumulators, the
    dK/dV buffer passed to the next rank every step (``torch.cat``), partial updates by ``torch.cat``."""
    import torch

    c = len(qs)
    f32 = torch.float32
    gq = [torch.zeros_like(q, dtype=f32) for q in qs]
    gk = [torch.zeros_like(k, dtype=f32) for k in ks]
    gv = [torch.zeros_like(v, dtype=f32) for v in vs]
    sent = [None] * c
    for i in range(c):
        new_sent = [None] * c
        for r in range(c):
            key, value = ks[(r - i) % c], vs[(r - i) % c]
            if i != c - 1:
                torch.cat([key.flatten(), value.flatten()])
            b = _behaviour(r, i)
            q, k, v, o, d, s = qs[r], key, value, outs[r], douts[r], lses[r]
            if b == "half-kv":
                k, v = key.chunk(2, dim=2)[0], value.chunk(2, dim=2)[0]
            elif b == "half-q":
                q, o, d = qs[r].chunk(2, dim=2)[1], outs[r].chunk(2, dim=2)[1], douts[r].chunk(2, dim=2)[1]
                s = lses[r].chunk(2, dim=2)[1].contiguous()
            dq, dk, dv = flash.backward(d, q, k, v, o, s, b == "causal", rests[r])
            if i == 0:
                gk[r] += dk
                gv[r] += dv
            else:
                buf = sent[(r - 1) % c]
                n = gk[r].numel()
                gk[r] = buf[:n].reshape(gk[r].shape)
                gv[r] = buf[n:].reshape(gv[r].shape)
                if b == "half-kv":
                    gk[r] = _partial_update(gk[r], dk, 2, 0, add=True)
                    gv[r] = _partial_update(gv[r], dv, 2, 0, add=True)
                else:
                    gk[r] += dk
                    gv[r] += dv
            new_sent[r] = torch.cat([gk[r].flatten(), gv[r].flatten()])
            if b != "half-q":
                gq[r] += dq
            else:
                gq[r] = _partial_update(gq[r], dq, 2, 1, add=True)
        sent = new_sent
    dqs = [g.to(q.dtype) for g, q in zip(gq, qs)]
    dks, dvs = [], []
    for r in range(c):
        buf = sent[(r - 1) % c].to(ks[r].dtype)
        n = ks[r].numel()
        dks.append(buf[:n].reshape(ks[r].shape))
        dvs.append(buf[n:].reshape(vs[r].shape))
    return dqs, dks, dvs


# --- timing on the GPU -------------------------------------------------------------------------------------------
class EventTimer:
    """Times each call with CUDA events; ``total_ms()`` sums what was timed since ``reset()``."""

    def __init__(self):
        self.pairs = []

    def reset(self):
        self.pairs = []

    def __call__(self, fn):
        import torch

        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        res = fn()
        b.record()
        self.pairs.append((a, b))
        return res

    def total_ms(self) -> float:
        import torch

        torch.cuda.synchronize()
        return sum(a.elapsed_time(b) for a, b in self.pairs)


def _key(r: dict) -> str:
    return f"{r['kind']}:{r['seq']}:{r['cp']}"


def measure_row(seq: int, c: int, reps: int, device: str) -> dict:
    import torch

    torch.manual_seed(0)
    shape = (1, HEADS, seq, HEAD_DIM)
    q, k, v, dout = (torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(4))
    qs, ks, vs, ds = (local_chunks(x, c) for x in (q, k, v, dout))
    del q, k, v, dout
    timer = EventTimer()
    flash = Flash(device, timer)
    fw, bw, fk, bk = [], [], [], []
    for rep in range(reps + 1):
        torch.cuda.synchronize()
        timer.reset()
        s0, s1, s2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        s0.record()
        outs, lses, rests = ring_forward(qs, ks, vs, flash)
        s1.record()
        torch.cuda.synchronize()
        f_kernels = timer.total_ms()
        timer.reset()
        s1b = torch.cuda.Event(enable_timing=True)
        s1b.record()
        ring_backward(ds, qs, ks, vs, outs, lses, rests, flash)
        s2.record()
        b_kernels = timer.total_ms()
        if rep == 0:
            continue  # the warm-up pass
        fw.append(s0.elapsed_time(s1) / c)
        bw.append(s1b.elapsed_time(s2) / c)
        fk.append(f_kernels / c)
        bk.append(b_kernels / c)
        del outs, lses, rests
    med = statistics.median
    return {"kind": "ring", "seq": seq, "cp": c, "heads": HEADS, "head_dim": HEAD_DIM, "reps": reps,
            "forward_ms": med(fw), "backward_ms": med(bw), "forward_kernels_ms": med(fk),
            "backward_kernels_ms": med(bk), "forward_all_ms": fw, "backward_all_ms": bw,
            "t_end": time.time()}


def measure_monolithic(seq: int, reps: int, device: str) -> dict:
    import torch

    torch.manual_seed(0)
    shape = (1, HEADS, seq, HEAD_DIM)
    q, k, v, dout = (torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(4))
    timer = EventTimer()
    flash = Flash(device, timer)
    fw, bw = [], []
    for rep in range(reps + 1):
        timer.reset()
        out, lse, rest = flash.forward(q, k, v, True)
        f = timer.total_ms()
        timer.reset()
        flash.backward(dout, q, k, v, out, lse, True, rest)
        b = timer.total_ms()
        if rep:
            fw.append(f)
            bw.append(b)
    return {"kind": "monolithic", "seq": seq, "cp": 1, "heads": HEADS, "head_dim": HEAD_DIM, "reps": reps,
            "forward_ms": statistics.median(fw), "backward_ms": statistics.median(bw), "t_end": time.time()}


def gemm_load(seconds: float, device: str) -> dict:
    """A BF16 8192^3 GEMM loop for ``seconds``: the reference load for the power samples."""
    import torch

    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    t0 = time.time()
    n = 0
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    while time.time() - t0 < seconds:
        for _ in range(20):
            a @ b
        n += 20
        torch.cuda.synchronize()
    e1.record()
    torch.cuda.synchronize()
    ms = e0.elapsed_time(e1)
    return {"kind": "gemm", "seq": 8192, "cp": 0, "calls": n, "tflops": 2 * 8192 ** 3 * n / ms / 1e9,
            "t_start": t0, "t_end": time.time()}


def run(args) -> int:
    import torch

    done = set()
    if args.out.exists():
        done = {_key(json.loads(line)) for line in args.out.read_text().splitlines() if line.strip()}
    power = None
    if args.power:
        power = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,power.draw,clocks.sm,clocks.mem,"
                                  "temperature.gpu,power.limit", "--format=csv,noheader",
                                  "-lms", "200"], stdout=open(args.power, "a"), stderr=subprocess.DEVNULL)
    t0 = time.time()
    try:
        with args.out.open("a") as fh:
            def emit(row):
                row["t_start"] = row.get("t_start", t_start)
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                print(json.dumps({k: v for k, v in row.items() if not k.endswith("_all_ms")}), flush=True)

            jobs = [("gemm", 8192, 0)] + [("ring", s, c) for s, c in ROWS] + \
                   [("monolithic", s, 1) for s in (32768, 65536, 131072, 262144)]
            for kind, s, c in jobs:
                if f"{kind}:{s}:{c}" in done:
                    continue
                if args.deadline and time.time() - t0 > args.deadline:
                    print(f"deadline: stopping before {kind} {s} {c}", flush=True)
                    break
                t_start = time.time()
                if kind == "gemm":
                    emit(gemm_load(8.0, args.device))
                elif kind == "ring":
                    emit(measure_row(s, c, args.reps, args.device))
                else:
                    emit(measure_monolithic(s, args.reps, args.device))
                torch.cuda.empty_cache()
    finally:
        if power is not None:
            power.terminate()
    return 0


# --- the comparison, on any machine ------------------------------------------------------------------------------
def forecast_attention_ms(device, seq: int, c: int) -> tuple[float, float]:
    """The forecast's attention of one rank, one layer, batch 1 (ms, forward and backward): the causal flash op
    over the whole sequence with 1/c of its work (``cp_split_ops``), timed by the roofline as the attention op it
    is (FLOPs of the pairs computed, Q/K/V/O bytes), BF16."""
    from traincast.predict.roofline import CompiledOps, RooflineParams
    from traincast.workload.fused import attended_pairs

    fwd = 2.0 * attended_pairs(seq, seq, True) * 2 * HEAD_DIM * HEADS / c
    nb = 2.0 * 4 * HEADS * seq * HEAD_DIM / c
    ops = CompiledOps.from_arrays([fwd, 2.5 * fwd], [nb, 2 * nb], ["attention"] * 2, device, precision="amp-bf16",
                                  dtype="bf16", key=["attention"] * 2,
                                  attn_keys=[attended_pairs(seq, seq, True) / seq] * 2)
    t = ops.times(RooflineParams.for_device(device)) * 1e3
    return float(t[0]), float(t[1])


def forecast_ring_work_ms(device, seq: int, c: int) -> tuple[float, float]:
    """The ring's own work beside the flash calls as the forecast prices it (``engine.with_ring_work``: the bytes
    of :func:`ring_attention_bytes`, c element-wise ops a pass, FP32), one rank, one layer (ms, forward, backward);
    0 at c = 1 (no ring)."""
    if c <= 1:
        return 0.0, 0.0
    from traincast.predict.parallel.engine import ring_attention_bytes
    from traincast.predict.roofline import CompiledOps, RooflineParams

    e = HEADS * seq / c * HEAD_DIM
    f_r, f_w, b_r, b_w = ring_attention_bytes(e, e, c, 2)
    flops = [0.0] * (2 * c)
    nbytes = [(f_r + f_w) / c] * c + [(b_r + b_w) / c] * c
    ops = CompiledOps.from_arrays(flops, nbytes, ["elementwise"] * (2 * c), device, precision="amp-bf16",
                                  dtype="fp32")
    t = ops.times(RooflineParams.for_device(device)) * 1e3
    return float(t[:c].sum()), float(t[c:].sum())


def compare(path: Path, gpu: str) -> int:
    from traincast.hardware.catalog import get_catalog

    device = get_catalog().device(gpu)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print(f"forecast on {device.name}: one rank's attention, one layer (32 heads x 128, batch 1, BF16, causal)")
    print("forecast: the attention kernels alone (as before 2026-11-28); +ring: with the ring's own work "
          "(engine.with_ring_work); measured: the flash kernels alone, the whole pass; overhead: (whole - kernels) / "
          "whole; ring bytes / (whole - kernels): the bandwidth the measured overhead implies")
    print(f"{'row':>16s} {'pass':>8s} {'forecast':>9s} {'+ring':>9s} {'kernels':>9s} {'whole':>9s} {'fc/kern':>8s} "
          f"{'fc/whole':>8s} {'+ring/wh':>8s} {'overhead':>8s} {'TB/s':>5s}")
    from traincast.predict.parallel.engine import ring_attention_bytes

    with_ring = []
    for r in rows:
        if r["kind"] != "ring":
            continue
        f_fw, f_bw = forecast_attention_ms(device, r["seq"], r["cp"])
        w_fw, w_bw = forecast_ring_work_ms(device, r["seq"], r["cp"])
        e = HEADS * r["seq"] / r["cp"] * HEAD_DIM
        f_r, f_w, b_r, b_w = ring_attention_bytes(e, e, r["cp"], 2) if r["cp"] > 1 else (0, 0, 0, 0)
        for name, fc, w, kern, whole, nb in (
                ("forward", f_fw, w_fw, r["forward_kernels_ms"], r["forward_ms"], f_r + f_w),
                ("backward", f_bw, w_bw, r["backward_kernels_ms"], r["backward_ms"], b_r + b_w)):
            bw = nb / (whole - kern) / 1e9 if nb else float("nan")
            print(f"{r['seq']:>9d} cp {r['cp']:<3d} {name:>8s} {fc:9.2f} {fc + w:9.2f} {kern:9.2f} {whole:9.2f} "
                  f"{fc / kern - 1:+8.1%} {fc / whole - 1:+8.1%} {(fc + w) / whole - 1:+8.1%} "
                  f"{(whole - kern) / whole:8.1%} {bw:5.2f}")
        fc, w, whole = f_fw + f_bw, w_fw + w_bw, r["forward_ms"] + r["backward_ms"]
        print(f"{'':>16s} {'both':>8s} {fc:9.2f} {fc + w:9.2f} "
              f"{r['forward_kernels_ms'] + r['backward_kernels_ms']:9.2f} {whole:9.2f} {'':8s} {fc / whole - 1:+8.1%} "
              f"{(fc + w) / whole - 1:+8.1%}")
        if r["cp"] >= 4:
            with_ring.append(((fc / whole - 1), ((fc + w) / whole - 1), r))
    if with_ring:
        print("rows with C >= 4 (the protocol's): forecast / whole - 1 without -> with the ring's work: "
              + ", ".join(f"{r['seq'] // 1024}K/{r['cp']}: {a:+.1%} -> {b:+.1%}" for a, b, r in with_ring))
    for r in rows:
        if r["kind"] == "gemm":
            print(f"BF16 GEMM 8192^3: {r['tflops']:.0f} TFLOP/s")
        if r["kind"] == "monolithic":
            f_fw, f_bw = forecast_attention_ms(device, r["seq"], 1)
            print(f"monolithic causal {r['seq']}: forward {r['forward_ms']:.1f} ms (forecast {f_fw:.1f}, "
                  f"{f_fw / r['forward_ms'] - 1:+.1%}), backward {r['backward_ms']:.1f} ms (forecast {f_bw:.1f}, "
                  f"{f_bw / r['backward_ms'] - 1:+.1%})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("cp_ring.jsonl"))
    ap.add_argument("--power", type=Path, help="append nvidia-smi samples (every 200 ms) here while measuring")
    ap.add_argument("--deadline", type=float, default=0.0, help="seconds after which no row starts")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compare", type=Path, help="a measurement file: print it against the forecast")
    ap.add_argument("--gpu", default="H200-SXM-141GB", help="the catalog GPU the measurements were taken on")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(args.compare, args.gpu)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
