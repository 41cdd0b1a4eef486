"""FP8 against BF16 GEMMs of transformer layers on this machine's GPU, and the cast/amax work FP8 adds; or
(``--compare``) those measurements against traincast's roofline forecast of the same GEMMs.

Measure (a GPU with FP8 tensor cores; ``torch._scaled_mm``, per-tensor scales as Transformer Engine's delayed
and current scaling use): for each layer width h of a GPT-style block (the FFN of width ``ffn``) and M = 8192
tokens, the four linear layers (QKV h->3h, projection h->h, FC1 h->ffn, FC2 ffn->h), each in its three
orientations of a training step (fprop M x K x N, dgrad M x N x K, wgrad K x M x N: the weight gradient's
contraction runs over the tokens), in BF16 (``torch.mm``) and FP8 (E4M3 x E4M3, BF16 out). And the cast work
of current scaling, unfused as eager PyTorch runs it: amax of a BF16 activation of M x h, scale, cast to E4M3
(``cast_ms``), with the bytes it moves. Timing: ten calls captured in a CUDA graph, the replay timed with CUDA
events, the median of ``--reps`` replays (each row's ``timing`` says so; ``events``: one call between two events,
the fallback). The first file, ``h100_fp8_gemm_2026-11-27.json``, was measured with one call between two events,
before this was changed: its times include the host's dispatch of the call (the GPU idles meanwhile), about
40 us on that lease's virtual machine, so its GEMMs under ~0.3 ms read slow and their FP8 speed-up compressed
towards 1; ``--compare`` marks such rows.

Compare (any machine): the roofline's time of each GEMM at dtype bf16 (precision amp-bf16) and fp8 (precision
fp8-current), on the catalog device named by ``--gpu``; prints forecast/measured per GEMM and for each the FP8
speed-up (bf16 time / fp8 time), measured and forecast, with their median and spread. Written before the first
measurement was seen: nothing in the catalog or the predictor is set from these rows.

Usage: python benchmarks/fp8_gemm_bench.py --out fp8_gemm.json         (on the GPU)
       PYTHONPATH=src .venv/bin/python benchmarks/fp8_gemm_bench.py --compare fp8_gemm.json --gpu H100-SXM5-80GB
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

M_TOKENS = 8192
WIDTHS = [(768, 3072), (2048, 8192), (4096, 11008), (8192, 28672)]


def layer_gemms(h: int, ffn: int, m: int = M_TOKENS) -> list[tuple[str, int, int, int]]:
    """(name, M, K, N) of every GEMM of one block's four linear layers in a training step."""
    out = []
    for lin, (k, n) in (("qkv", (h, 3 * h)), ("proj", (h, h)), ("fc1", (h, ffn)), ("fc2", (ffn, h))):
        out += [(f"h{h}.{lin}.fprop", m, k, n), (f"h{h}.{lin}.dgrad", m, n, k), (f"h{h}.{lin}.wgrad", k, m, n)]
    return out


def _time_events(fn, warmup: int, reps: int) -> float:
    """Median ms of one call between two CUDA events. The GPU idles while the host dispatches the call after the
    first event, so this counts the host's dispatch time too (tens of microseconds on a slow host): kept only as
    the fallback, and as the method of the 2026-11-27 file."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def _time(fn, warmup: int, reps: int, per_graph: int = 10) -> tuple[float, str]:
    """Median ms of one call: ``per_graph`` calls captured in a CUDA graph, the graph replayed between two
    events ``reps`` times, each replay's time / ``per_graph``. Replaying a graph issues its kernels without the
    host in between, so the GPU's own time is measured. Falls back to :func:`_time_events` where capture fails."""
    import torch

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(1, warmup)):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(per_graph):
                fn()
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / per_graph)
        del g
        return statistics.median(ts), "cuda-graph"
    except RuntimeError:
        torch.cuda.synchronize()
        return _time_events(fn, warmup, reps), "events"


def measure(warmup: int, reps: int) -> dict:
    import torch

    dev = "cuda"
    e4m3 = torch.float8_e4m3fn
    one = torch.ones((), device=dev)
    rows = []
    for h, ffn in WIDTHS:
        for name, m, k, n in layer_gemms(h, ffn):
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)  # row-major (N, K): b.t() is column-major
            bf, how = _time(lambda: torch.mm(a, b.t()), warmup, reps)
            a8, b8 = a.to(e4m3), b.to(e4m3)
            f8, how8 = _time(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                             warmup, reps)
            rows.append(dict(name=name, M=m, K=k, N=n, bf16_ms=bf, fp8_ms=f8, flops=2.0 * m * k * n,
                             timing=how if how == how8 else f"{how}/{how8}"))
            print(f"{name:18s} M{m:6d} K{k:6d} N{n:6d}  bf16 {bf:8.3f} ms ({2e-9 * m * k * n / bf:6.0f} TF/s)  "
                  f"fp8 {f8:8.3f} ms ({2e-9 * m * k * n / f8:6.0f} TF/s)", flush=True)
            del a, b, a8, b8
    casts = []
    for h, _ in WIDTHS:
        x = torch.randn(M_TOKENS, h, device=dev, dtype=torch.bfloat16)

        def cast():
            amax = x.abs().max().float()
            scale = 448.0 / torch.clamp(amax, min=1e-12)
            return (x.float() * scale).to(e4m3), scale

        ms, how = _time(cast, warmup, reps)
        casts.append(dict(M=M_TOKENS, K=h, cast_ms=ms, bytes_min=3.0 * M_TOKENS * h, timing=how))
        print(f"cast M{M_TOKENS} x {h}: {ms:.3f} ms (minimum traffic {3e-6 * M_TOKENS * h / ms:.0f} GB/s)")
    p = torch.cuda.get_device_properties(0)
    return dict(device=p.name, torch=torch.__version__, cuda=torch.version.cuda, warmup=warmup, reps=reps,
                gemms=rows, casts=casts)


def compare(path: Path, gpu: str) -> int:
    ROOT = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(ROOT / "src"))
    from traincast.hardware.catalog import get_catalog
    from traincast.predict.roofline import CompiledOps, RooflineParams

    data = json.loads(path.read_text())
    device = get_catalog().device(gpu)
    params = RooflineParams.for_device(device)

    def fc(dtype: str, precision: str, m: int, k: int, n: int) -> float:
        el = 1 if dtype == "fp8" else 2
        ops = CompiledOps.from_arrays([2.0 * m * k * n], [el * (m * k + k * n) + 2 * m * n], ["matmul"], device,
                                      precision=precision, dtype=dtype, dmin=[min(m, k, n)])
        return float(ops.times(params)[0]) * 1e3

    print(f"measured on {data['device']} (torch {data['torch']}); forecast for {gpu}")
    print(f"{'gemm':18s} {'bf16 f/m':>9s} {'fp8 f/m':>9s} {'speed-up meas':>13s} {'fcst':>6s}")
    rb, r8, sm, sf, gap = [], [], [], [], []
    for g in data["gemms"]:
        fb = fc("bf16", "amp-bf16", g["M"], g["K"], g["N"])
        f8 = fc("fp8", "fp8-current", g["M"], g["K"], g["N"])
        rb.append(fb / g["bf16_ms"])
        r8.append(f8 / g["fp8_ms"])
        sm.append(g["bf16_ms"] / g["fp8_ms"])
        sf.append(fb / f8)
        # one call between two events, under 0.3 ms: the host's dispatch is a real share of the time
        gap.append("events" in g.get("timing", "events") and min(g["bf16_ms"], g["fp8_ms"]) < 0.3)
        print(f"{g['name']:18s} {rb[-1]:9.2f} {r8[-1]:9.2f} {sm[-1]:13.2f} {sf[-1]:6.2f}"
              + ("  (host gap in the time)" if gap[-1] else ""))

    def spread(xs):
        q = statistics.quantiles(xs, n=4)
        return f"median {statistics.median(xs):.3f} (IQR {q[0]:.3f}-{q[2]:.3f}, range {min(xs):.3f}-{max(xs):.3f})"

    print(f"forecast/measured, bf16 GEMMs: {spread(rb)}")
    print(f"forecast/measured, fp8 GEMMs:  {spread(r8)}")
    print(f"FP8 speed-up measured: {spread(sm)}")
    print(f"FP8 speed-up forecast: {spread(sf)}")
    err = [abs(f / m - 1) for f, m in zip(sf, sm)]
    print(f"speed-up error |forecast/measured - 1|: mean {100 * statistics.mean(err):.1f}%, "
          f"median {100 * statistics.median(err):.1f}%")
    clean = [i for i, short in enumerate(gap) if not short]
    if 1 < len(clean) < len(sm):
        print(f"rows whose times are over 0.3 ms (or graph-timed), {len(clean)}: speed-up measured "
              f"{spread([sm[i] for i in clean])}; forecast {spread([sf[i] for i in clean])}; error median "
              f"{100 * statistics.median([err[i] for i in clean]):.1f}%")
        print(f"  forecast/measured there: bf16 {spread([rb[i] for i in clean])}; fp8 {spread([r8[i] for i in clean])}")
    for c in data.get("casts", []):
        print(f"cast M{c['M']} x {c['K']}: measured {c['cast_ms']:.3f} ms eager (unfused), "
              f"{c['bytes_min'] / c['cast_ms'] / 1e6:.0f} GB/s of minimum traffic")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("fp8_gemm.json"))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--compare", type=Path, help="a measurement file: compare it with the forecast")
    ap.add_argument("--gpu", default="H100-SXM5-80GB")
    a = ap.parse_args(argv)
    if a.compare:
        return compare(a.compare, a.gpu)
    import torch

    if not torch.cuda.is_available():
        print("fp8_gemm_bench: no CUDA GPU here (measure on a GPU with FP8 tensor cores; --compare works anywhere)",
              file=sys.stderr)
        return 2
    data = measure(a.warmup, a.reps)
    a.out.write_text(json.dumps(data, indent=1))
    print(f"-> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
